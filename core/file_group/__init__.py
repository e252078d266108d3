"""File groups and their files: naming, file slices, the file-system view of a table at an instant, base files
(Parquet, HFile) and log files, and the integrity checks over them."""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
