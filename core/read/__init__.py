"""Reads: snapshot, read-optimized, time travel, incremental and CDC queries over file slices, the
merge-on-read merge, filters, and the Spark read data plane (`spark`: DataFrames over file slices)."""
