"""File groups and their files: naming, file slices, the file-system view of a table at an instant, base files
(Parquet, HFile) and log files, and the integrity checks over them."""
