"""`.hoodie_partition_metadata`: the marker that makes a directory a partition for Hudi."""

from __future__ import annotations

import posixpath

from lakeward.core.config.properties import format_properties
from lakeward.core.exceptions import InstantExistsError
from lakeward.core.file_group.naming import PARTITION_METADATA_FILE
from lakeward.core.storage import Storage


def ensure_partition_metadata(storage: Storage, partition_path: str, instant_time: str) -> None:
    """Create the partition's metadata file once (first writer wins; later calls are no-ops)."""
    path = posixpath.join(partition_path, PARTITION_METADATA_FILE) if partition_path else PARTITION_METADATA_FILE
    if storage.exists(path):
        return
    depth = len(partition_path.split("/")) if partition_path else 0
    text = format_properties({"commitTime": instant_time, "partitionDepth": str(depth)}, "partition metadata")
    try:
        storage.create_if_absent(path, text.encode())
    except InstantExistsError:
        pass
