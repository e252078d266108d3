"""Before a write: may lakeward write to this table's metadata table, and what must go first.

lakeward keeps the `files` partition of a metadata table on every write, on every table version
(`metadata_table.writer`), and the index partitions it has among the version's
`MetadataTableRules.partitions`: `record_index` (`metadata_table.record_index`) and, on
versions 8/9, `column_stats`, `partition_stats` (`metadata_table.stats_writer`) and
`bloom_filters` (`metadata_table.bloom_filters`); each is dropped when the writer disables it.

Hudi 1.x's secondary indexes (`secondary_index_<name>`) it cannot maintain yet: a write or table
service drops them first, under the table lock, as Hudi drops an index (`dropIndex`: the
partition leaves `hoodie.table.metadata.partitions` and its inflight list, its definition leaves
`.hoodie/.index_defs/index.json`, its folder goes), logging a WARNING that names each one and
why; Hudi readers then simply do without them, and hudi-rs reads the same rows. A writer that
asks to keep them (`hoodie.metadata.index.secondary.enable=true`) is refused instead
(MetadataTableError naming the key, nothing written). The other partitions Hudi 1.x maintains
(expression indexes) are refused (MetadataTableError, nothing written) unless the writer
disables them: as a Hudi writer whose config disables a partition that exists
(`HoodieTable.deleteMetadataIndexIfNecessary`), lakeward then drops them the same way. Table
services are gated the same way (each keeps `files` too). Partitions still being built
(`…partitions.inflight`) stay refused.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Collection, Mapping

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
from lakeward.core.metadata_table.index_definitions import remove_index_definitions
from lakeward.core.storage import Storage
from lakeward.core.table_version import SECONDARY_INDEX_PREFIX, dropped_by_default

log = logging.getLogger(__name__)

#: The option that disables each partition lakeward cannot maintain (a prefix for index families).
_ENABLE_OPTIONS: dict[str, str] = {
    "column_stats": "hoodie.metadata.index.column.stats.enable",
    "partition_stats": "hoodie.metadata.index.partition.stats.enable",
    "record_index": "hoodie.metadata.record.index.enable",
    "bloom_filters": "hoodie.metadata.index.bloom.filter.enable",
    SECONDARY_INDEX_PREFIX: "hoodie.metadata.index.secondary.enable",
}
_DISABLED_REASON = "it is disabled in this writer's options; Hudi writers rebuild it when they enable it again"
#: Why a secondary index is dropped when the writer leaves `hoodie.metadata.index.secondary.enable` unset.
_UNMAINTAINED_REASON = (
    "lakeward cannot maintain secondary indexes yet, and writing around one would leave it stale for Hudi "
    "readers and writers (hoodie.metadata.index.secondary.enable=true makes lakeward refuse to write instead); "
    "a Hudi writer with the index enabled rebuilds it once it is defined again (Spark SQL: CREATE INDEX "
    "<name> ON <table> (<columns>))"
)
_WRITE_FIELDS = {
    "column_stats": "metadata_column_stats",
    "partition_stats": "metadata_partition_stats",
    "record_index": "metadata_record_index",
    "bloom_filters": "metadata_bloom_filters",
    SECONDARY_INDEX_PREFIX: "metadata_secondary_index",
}


def _family(partition: str) -> str | None:
    """The `_ENABLE_OPTIONS` key of a metadata partition (None: lakeward knows no option for it)."""
    if partition in _ENABLE_OPTIONS:
        return partition
    return SECONDARY_INDEX_PREFIX if partition.startswith(SECONDARY_INDEX_PREFIX) else None


def _enabled_option(write_config: WriteConfig, partition: str) -> bool | None:
    """The writer's `hoodie.metadata.index.*.enable` value for `partition` (None: unset or no such option)."""
    family = _family(partition)
    return None if family is None else getattr(write_config, _WRITE_FIELDS[family])


def _drop_reason(write_config: WriteConfig, partition: str) -> str | None:
    """Why this writer drops `partition` before it writes (None: it keeps it, or must refuse)."""
    if partition == "partition_stats" and write_config.metadata_column_stats is False:
        return _DISABLED_REASON  # kept from column_stats: without them it would go stale
    enabled = _enabled_option(write_config, partition)
    if enabled is False:
        return _DISABLED_REASON
    if enabled is None and dropped_by_default(partition):
        return _UNMAINTAINED_REASON
    return None


def _refusal(
    storage: Storage, partitions: list[str], maintained: frozenset[str], write_config: WriteConfig
) -> MetadataTableError:
    options = sorted({_ENABLE_OPTIONS[f] for p in partitions if (f := _family(p)) is not None})
    drop = (
        f"Drop them as a Hudi writer with them disabled does: pass {', '.join(o + '=false' for o in options)} "
        "to this writer (lakeward then deletes those partitions, keeps `files` and writes), or "
        if options
        else ""
    )
    kept = sorted(
        {_ENABLE_OPTIONS[f] for p in partitions if (f := _family(p)) and _enabled_option(write_config, p) is True}
    )
    asked = (
        f" This writer asks to keep them ({', '.join(o + '=true' for o in kept)}), which lakeward cannot do yet."
        if kept
        else ""
    )
    return MetadataTableError(
        f"the metadata table of {storage.uri} has partition(s) {','.join(partitions)} that lakeward does not "
        "maintain yet on this table version (maintaining them is not supported; lakeward keeps "
        f"{', '.join(sorted(maintained))}); writing around "
        f"them would leave them stale for Hudi readers and writers.{asked} Nothing was written. "
        f"{drop}delete the whole metadata table: pass the write option hoodie.metadata.enable=false to lakeward "
        "(Table.open(path, options={'hoodie.metadata.enable': 'false'}), the data source or `-o` of the CLI), "
        "which deletes .hoodie/metadata/ first, as Apache Hudi's writer does with that option"
    )


def _building(properties: Mapping[str, str]) -> list[str]:
    """The metadata partitions `hoodie.table.metadata.partitions.inflight` lists (being built)."""
    return [p for p in properties.get(INFLIGHT_PARTITIONS_KEY, "").split(",") if p.strip()]


def drop_partitions(storage: Storage, reasons: Mapping[str, str], *, definitions: Collection[str] = ()) -> None:
    """Drop metadata-table partitions (`reasons`: partition -> why) in Hudi's order: the table's
    `hoodie.properties` (read now) stops listing them (completed and inflight lists), the index
    definitions of `definitions` leave `index.json` (Hudi's `deleteIndexDefinition`), then their
    folders go; each logged as a WARNING with its reason. Call under the table lock: the properties
    are rewritten, and a concurrent writer's rewrite must not be lost or undo this."""
    current = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    updates = {METADATA_PARTITIONS_KEY: ",".join(sorted(set(metadata_partitions(current)) - set(reasons)))}
    building = _building(current)
    if set(building) & set(reasons):
        updates[INFLIGHT_PARTITIONS_KEY] = ",".join(p for p in building if p not in reasons)
    update_table_properties(storage, updates)
    removed = remove_index_definitions(storage, definitions)
    for partition, reason in reasons.items():
        storage.delete_dir(posixpath.join(METADATA_FOLDER, partition))
        columns = removed.get(partition, {}).get("sourceFields")
        defined = f" (its index definition on {','.join(columns)} deleted too)" if columns else ""
        log.warning("dropped metadata-table partition %s of %s%s: %s", partition, storage.uri, defined, reason)


def _partitions_to_drop(storage: Storage, config: TableConfig, write_config: WriteConfig) -> dict[str, str]:
    """The partitions the table's `hoodie.properties` (read now) lists that this writer drops, with why;
    raises MetadataTableError (nothing written) when the metadata table cannot be kept (module docstring)."""
    current = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    partitions = metadata_partitions(current)
    building = _building(current)
    if building:
        raise MetadataTableError(
            f"the metadata table of {storage.uri} is building partition(s) {','.join(building)} "
            f"({INFLIGHT_PARTITIONS_KEY}); writing now is not supported. Nothing was written. Let the Hudi "
            "indexer finish, or delete the metadata table with hoodie.metadata.enable=false (lakeward or a Hudi writer)"
        )
    # a maintained partition the writer disables is dropped too (record_index)
    maintained = config.version.metadata_table.partitions
    reasons = {p: reason for p in partitions if (reason := _drop_reason(write_config, p)) is not None}
    if FILES_PARTITION not in partitions:
        raise _refusal(storage, partitions, maintained, write_config)
    kept = [p for p in partitions if p not in maintained and p not in reasons]
    if kept:
        raise _refusal(storage, kept, maintained, write_config)
    return reasons


def prepare_metadata_table(
    storage: Storage, config: TableConfig, write_config: WriteConfig, lock: LockProvider
) -> TableConfig:
    """Check the table's metadata table before a write or table service (both keep `files`).

    Partitions this writer disables, and secondary indexes it does not ask to keep, are dropped
    under the table `lock` (the check is made again
    under it), so that no concurrent writer's rewrite of `hoodie.properties` is lost or undoes
    the drop. Returns the table's config, re-read when partitions were dropped. Raises
    MetadataTableError (nothing written) when the metadata table cannot be kept: see the module
    docstring.
    """
    if not metadata_partitions(config.to_properties()) or not _partitions_to_drop(storage, config, write_config):
        return config
    with lock:
        reasons = _partitions_to_drop(storage, config, write_config)
        if reasons:
            drop_partitions(storage, reasons, definitions=[p for p in reasons if p.startswith(SECONDARY_INDEX_PREFIX)])
    return TableConfig.from_text(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
