"""Reads: snapshot, read-optimized, time travel, incremental and CDC queries over file slices, the
merge-on-read merge, filters, and the Spark read data plane (`spark`: DataFrames over file slices)."""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
