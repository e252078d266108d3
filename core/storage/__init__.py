"""Filesystem access for tables over pyarrow.fs (local, S3, GCS, HDFS) with atomic create."""

from lakeward.core.storage.storage import FileEntry, Storage

__all__ = ["FileEntry", "Storage"]
