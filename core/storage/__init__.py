"""Filesystem access for tables over pyarrow.fs (local, S3, GCS, HDFS) with atomic create."""

from lakeward.core.storage.storage import FileEntry, Storage, is_storage_failure

__all__ = ["FileEntry", "Storage", "is_storage_failure"]
