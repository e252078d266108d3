"""Before a write: may lakeward write to this table's metadata table, and what must go first.

lakeward keeps the `files` partition of a metadata table on every write, on every table version
(`metadata_table.writer`), and the index partitions it has among the version's
`MetadataTableRules.partitions`: `record_index` (`metadata_table.record_index`) and, on
versions 8/9, `column_stats`, `partition_stats` (`metadata_table.stats_writer`) and
`bloom_filters` (`metadata_table.bloom_filters`); each is dropped when the writer disables it.
The other partitions Hudi 1.x maintains (secondary and expression indexes) it cannot maintain
yet, so a write to a table that has them is refused (MetadataTableError, nothing written) unless the
writer disables them: as a Hudi writer whose config disables a partition
that exists (`HoodieTable.deleteMetadataIndexIfNecessary`), lakeward then drops it under the
table lock (as `disable.delete_metadata_table` deletes the whole metadata table) —
`hoodie.table.metadata.partitions` first (readers stop using it), then its folder — and logs
why. Table services are gated the same way (each keeps `files` too). Partitions still being
built (`…partitions.inflight`) stay refused.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Collection

from lakeward.core.config.properties import parse_properties
from lakeward.core.config.table import PROPERTIES_PATH, TableConfig, update_table_properties
from lakeward.core.config.write import WriteConfig
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.metadata_listing import (
    FILES_PARTITION,
    INFLIGHT_PARTITIONS_KEY,
    METADATA_FOLDER,
    METADATA_PARTITIONS_KEY,
    metadata_partitions,
)
from lakeward.core.locks import LockProvider
from lakeward.core.storage import Storage

log = logging.getLogger(__name__)

#: The option that disables each partition lakeward cannot maintain (a prefix for index families).
_ENABLE_OPTIONS: dict[str, str] = {
    "column_stats": "hoodie.metadata.index.column.stats.enable",
    "partition_stats": "hoodie.metadata.index.partition.stats.enable",
    "record_index": "hoodie.metadata.record.index.enable",
    "bloom_filters": "hoodie.metadata.index.bloom.filter.enable",
    "secondary_index_": "hoodie.metadata.index.secondary.enable",
}
_DISABLED_REASON = "it is disabled in this writer's options; Hudi writers rebuild it when they enable it again"
_WRITE_FIELDS = {
    "column_stats": "metadata_column_stats",
    "partition_stats": "metadata_partition_stats",
    "record_index": "metadata_record_index",
    "bloom_filters": "metadata_bloom_filters",
    "secondary_index_": "metadata_secondary_index",
}


def _family(partition: str) -> str | None:
    """The `_ENABLE_OPTIONS` key of a metadata partition (None: lakeward knows no option for it)."""
    if partition in _ENABLE_OPTIONS:
        return partition
    return "secondary_index_" if partition.startswith("secondary_index_") else None


def _disabled(write_config: WriteConfig, partition: str) -> bool:
    family = _family(partition)
    if partition == "partition_stats" and write_config.metadata_column_stats is False:
        return True  # kept from column_stats: without them it would go stale
    return family is not None and getattr(write_config, _WRITE_FIELDS[family]) is False


def _refusal(storage: Storage, partitions: list[str], maintained: frozenset[str]) -> MetadataTableError:
    options = sorted({_ENABLE_OPTIONS[f] for p in partitions if (f := _family(p)) is not None})
    drop = (
        f"Drop them as a Hudi writer with them disabled does: pass {', '.join(o + '=false' for o in options)} "
        "to this writer (lakeward then deletes those partitions, keeps `files` and writes), or "
        if options
        else ""
    )
    return MetadataTableError(
        f"the metadata table of {storage.uri} has partition(s) {','.join(partitions)} that lakeward does not "
        "maintain yet on this table version (maintaining them is not supported; lakeward keeps "
        f"{', '.join(sorted(maintained))}); writing around "
        "them would leave them stale for Hudi readers and writers. Nothing was written. "
        f"{drop}delete the whole metadata table: pass the write option hoodie.metadata.enable=false to lakeward "
        "(Table.open(path, options={'hoodie.metadata.enable': 'false'}), the data source or `-o` of the CLI), "
        "which deletes .hoodie/metadata/ first, as Apache Hudi's writer does with that option"
    )


def drop_partitions(storage: Storage, partitions: Collection[str], reason: str) -> None:
    """Drop metadata-table `partitions` in Hudi's order: the table's `hoodie.properties` (read now)
    stops listing them, then their folders go; each logged with `reason`. Call under the table lock:
    the properties are rewritten, and a concurrent writer's rewrite must not be lost or undo this."""
    listed = metadata_partitions(parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8")))
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: ",".join(sorted(set(listed) - set(partitions)))})
    for partition in partitions:
        storage.delete_dir(posixpath.join(METADATA_FOLDER, partition))
        log.warning("dropped metadata-table partition %s of %s: %s", partition, storage.uri, reason)


def _partitions_to_drop(storage: Storage, config: TableConfig, write_config: WriteConfig) -> list[str]:
    """The partitions the table's `hoodie.properties` (read now) lists that this writer disables; raises
    MetadataTableError (nothing written) when the metadata table cannot be kept (module docstring)."""
    current = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    partitions = metadata_partitions(current)
    building = [p for p in current.get(INFLIGHT_PARTITIONS_KEY, "").split(",") if p.strip()]
    if building:
        raise MetadataTableError(
            f"the metadata table of {storage.uri} is building partition(s) {','.join(building)} "
            f"({INFLIGHT_PARTITIONS_KEY}); writing now is not supported. Nothing was written. Let the Hudi "
            "indexer finish, or delete the metadata table with hoodie.metadata.enable=false (lakeward or a Hudi writer)"
        )
    # a maintained partition the writer disables is dropped too (record_index)
    maintained = config.version.metadata_table.partitions
    others = [p for p in partitions if p not in maintained or _disabled(write_config, p)]
    if FILES_PARTITION not in partitions:
        raise _refusal(storage, partitions, maintained)
    kept = [p for p in others if not _disabled(write_config, p)]
    if kept:
        raise _refusal(storage, kept, maintained)
    return others


def prepare_metadata_table(
    storage: Storage, config: TableConfig, write_config: WriteConfig, lock: LockProvider
) -> TableConfig:
    """Check the table's metadata table before a write or table service (both keep `files`).

    Partitions this writer disables are dropped under the table `lock` (the check is made again
    under it), so that no concurrent writer's rewrite of `hoodie.properties` is lost or undoes
    the drop. Returns the table's config, re-read when partitions were dropped. Raises
    MetadataTableError (nothing written) when the metadata table cannot be kept: see the module
    docstring.
    """
    if not metadata_partitions(config.to_properties()) or not _partitions_to_drop(storage, config, write_config):
        return config
    with lock:
        others = _partitions_to_drop(storage, config, write_config)
        if others:
            drop_partitions(storage, others, _DISABLED_REASON)
    return TableConfig.from_text(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
