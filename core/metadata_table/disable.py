"""`hoodie.metadata.enable` (default true, as in Apache Hudi since 0.11), and `=false`: drop the metadata
table, as a Hudi writer with the metadata table disabled does.

Hudi's `HoodieTable.maybeDeleteMetadataTable` runs when a writer of the data table has
`hoodie.metadata.enable=false` and `hoodie.table.metadata.partitions` is not empty;
`HoodieTableMetadataUtil.deleteMetadataTable` then, in this order:

1. clears `hoodie.table.metadata.partitions` and `hoodie.table.metadata.partitions.inflight` (both set to
   the empty string, `HoodieTableConfig.clearMetadataPartitions`) through the backup protocol of
   `hoodie.properties` — from here on no reader lists files through the metadata table;
2. deletes `.hoodie/metadata/` recursively (no backup copy on this path).

Index definitions (`hoodie.table.index.defs.path`) are left as they are, as Hudi leaves them. A crash
between 1 and 2 leaves an unused `.hoodie/metadata/` that no reader looks at (the properties no longer
list it); a Hudi writer enabling the metadata table again builds it anew, and
`Table.initialize_metadata_table()` deletes it first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from lakeward.core.config.properties import parse_properties
from lakeward.core.config.table import PROPERTIES_PATH, update_table_properties
from lakeward.core.config.values import parse_bool
from lakeward.core.exceptions import StorageError
from lakeward.core.file_group.metadata_listing import (
    INFLIGHT_PARTITIONS_KEY,
    METADATA_ENABLE_KEY,
    METADATA_FOLDER,
    METADATA_PARTITIONS_KEY,
    metadata_partitions,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.storage import Storage

log = logging.getLogger(__name__)


def metadata_table_enabled(options: Mapping[str, Any]) -> bool:
    """Whether the writer keeps a metadata table: `hoodie.metadata.enable`, true unless set to false, as
    in Apache Hudi since 0.11 (`HoodieMetadataConfig.ENABLE`). Such a writer builds the metadata table
    of a table that has none before its first commit or table service (`bootstrap`), as Hudi's does."""
    value = options.get(METADATA_ENABLE_KEY)
    return value is None or parse_bool(value, METADATA_ENABLE_KEY)


def metadata_table_disabled(options: Mapping[str, Any]) -> bool:
    """Whether the writer's options say `hoodie.metadata.enable=false` (unset: not disabled)."""
    value = options.get(METADATA_ENABLE_KEY)
    return value is not None and not parse_bool(value, METADATA_ENABLE_KEY)


def version_mismatch(storage: Storage) -> str | None:
    """Why the metadata table of the table at `storage` cannot be kept: its own `hoodie.table.version`
    is not its data table's, both as they are on storage now (an upgrade or downgrade died between the
    two switches, `table_services.upgrade`); None when they match or there is none. Check again under
    the table lock before acting on it: an upgrade in another process passes through that state."""
    try:
        props = read_table_properties(metadata_storage(storage))
        data = read_table_properties(storage).get("hoodie.table.version", "6")
    except (FileNotFoundError, NotADirectoryError, StorageError):
        return None
    found = props.get("hoodie.table.version", "6")
    if not props or found == data:
        return None
    return f"its table version {found} is not the data table's {data} (an interrupted upgrade or downgrade)"


def delete_metadata_table(storage: Storage, *, reason: str | None = None) -> list[str]:
    """Drop the metadata table: clear the properties that list it, then delete `.hoodie/metadata/`.

    Call under the table lock. Returns the metadata partitions the properties listed (none: nothing
    was done, as Hudi does nothing then). `reason`: why, when it is not `hoodie.metadata.enable=false`.
    """
    partitions = metadata_partitions(parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8")))
    if not partitions:
        return []
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: "", INFLIGHT_PARTITIONS_KEY: ""})
    storage.delete_dir(METADATA_FOLDER)
    log.warning(
        "deleted the metadata table of %s (partitions %s) because %s, as Apache Hudi's writer does; readers "
        "list files from storage until it is built again",
        storage.uri,
        ",".join(partitions),
        reason or f"the writer has {METADATA_ENABLE_KEY}=false",
    )
    return partitions


__all__ = ["delete_metadata_table", "metadata_table_disabled", "metadata_table_enabled", "version_mismatch"]
