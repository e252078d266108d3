"""Table versions: the one place that says what `hoodie.table.version` means on disk.

Every rule that differs between Hudi 0.14/0.15 tables (version 6) and Hudi 1.x tables
(versions 8 and 9) is a field of `TableVersion`; the rest of lakeward asks the table's
`TableVersion` instead of comparing version numbers:

- where the active timeline lives (`.hoodie/` or `.hoodie/timeline/`), and the archived one
  (`.hoodie/archived/` log files, or the LSM tree in `.hoodie/timeline/history/`);
- whether completed instant file names carry the completion time (`<t>_<c>.<action>`);
- how commit metadata is encoded (JSON, or an Avro container);
- which instant a log file name carries (the slice's base instant, or the delta commit that
  wrote it) and therefore how logs are sliced (by that instant, or by its completion time);
- whether clustering has its own pending action (`clustering`) or uses `replacecommit`;
- which `hoodie.properties` keys a table of the version carries (key generator, ordering
  field, merge mode, payload class, timeline paths);
- how the metadata table (`.hoodie/metadata/`, itself a table of the same version) is kept:
  which of its partitions lakeward maintains, and how its own instants are timed
  (`MetadataTableRules`: Hudi 0.x derives them from data-table instants plus a suffix);
- whether lakeward writes data to the table (6, 8, 9) and which table services it runs on it
  (all on 6; on 8 and 9 all but orphan-file removal, `V8_SERVICES`: compaction, clustering,
  clean, rollback/restore, savepoints, archival, change tracking (CDC), secondary-index
  builds and the metadata table's compaction). On every version they pass the same
  metadata-table gate as writes (`metadata_table.gate`) and keep the metadata table's
  partitions of `MetadataTableRules.partitions`.

This module imports nothing from lakeward but the exceptions, so that every layer (config,
timeline, file groups, reads, the daemon) can ask it without import cycles.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

from lakeward.core.exceptions import ReadOnlyTableVersionError, UnsupportedTableVersionError

METAFOLDER = ".hoodie"


class TimelineLayout(IntEnum):
    """`hoodie.timeline.layout.version`: 1 for table version 6, 2 for versions 8 and 9."""

    V1 = 1
    V2 = 2

    @property
    def timeline_folder(self) -> str:
        """Folder of the active timeline, relative to the table's base path."""
        return METAFOLDER if self is TimelineLayout.V1 else posixpath.join(METAFOLDER, "timeline")

    @property
    def completion_time_in_name(self) -> bool:
        """Completed instants are named `<requested>_<completion>.<action>` (layout 2)."""
        return self is TimelineLayout.V2


class MetadataEncoding(str, Enum):
    """How commit, delta commit and replace commit metadata is serialised."""

    JSON = "json"
    AVRO = "avro"

    @property
    def empty_is_valid(self) -> bool:
        """Whether a completed commit, delta commit or replace commit may be an empty file.

        Version 6 readers take an empty one as empty metadata (as Hudi 0.x does). Hudi 1.x writes
        an Avro container for every completed write, and hudi-rs fails on an empty one: on those
        tables an empty file is a truncated one, and reading it as "no metadata" would bring back
        the file groups a replacecommit replaced, or drop a commit from an incremental range.
        """
        return self is MetadataEncoding.JSON


class LogSlicing(str, Enum):
    """Which file slice a log file belongs to, and what the instant in its name means."""

    #: v6: the name carries the slice's base instant; the log joins that slice.
    BASE_INSTANT = "base_instant"
    #: v8+: the name carries the delta commit that wrote it; the log joins the newest slice
    #: whose base instant is at or before that delta commit's completion time.
    COMPLETION_TIME = "completion_time"


#: An instant time as it appears in file names (regex, no groups): `yyyyMMddHHmmss[SSS]`, and on the
#: metadata table of a v6 table a 17-digit time with Hudi 0.x's 3-digit operation suffixes
#: (`MetadataTableRules`; at most two: an initialisation's compaction, `<t>010001`).
INSTANT_TIME_PATTERN = r"\d{14}|\d{17}(?:\d{3}){0,2}"
#: Hudi's instant time of "no completed instant yet" (`SOLO_COMMIT_TIMESTAMP`, 14 zeros).
SOLO_COMMIT_TIMESTAMP = "0" * 14


@dataclass(frozen=True)
class MetadataTableRules:
    """How lakeward keeps the metadata table of a table of one version, as Hudi's writer of it does.

    Hudi 0.14/0.15 (and Hudi 1.x's `HoodieBackedTableMetadataWriterTableVersionSix`) time the
    metadata table's own instants from data-table instants plus a 3-digit suffix, so that they
    sort right after the instant they follow: the `files` initialisation at the data table's
    latest completed instant + `010`, a compaction at the metadata table's latest delta commit
    + `001` (and none while a data instant before that delta commit is pending), a clean at
    the instant it follows + `002`. Hudi 1.x initialises at `00000000000000000` and gives its
    compactions and cleans new instant times.
    """

    #: Partitions lakeward keeps on every commit when the table has them.
    partitions: frozenset[str]
    #: 3-digit offset of the first partition's initialisation instant (each later one takes the next).
    init_offset: int = 0
    #: The initialisation instant starts from the data table's latest completed instant (v6),
    #: not from `SOLO_COMMIT_TIMESTAMP` alone.
    init_after_latest: bool = False
    #: Suffix of a metadata compaction after the latest delta commit (None: a new instant time).
    compaction_suffix: str | None = None
    #: Suffix of a metadata clean after the latest metadata instant (None: a new instant time).
    clean_suffix: str | None = None

    def init_instant(self, latest_completed: str | None, offset: int = 0) -> str:
        """The instant that initialises a metadata partition on a data table whose latest completed
        instant is given (`offset`: 0 for the first, counting up past instants taken already)."""
        start = latest_completed if self.init_after_latest and latest_completed else SOLO_COMMIT_TIMESTAMP
        return f"{start}{self.init_offset + offset:03d}"


@dataclass(frozen=True)
class TableVersion:
    """What one `hoodie.table.version` means for readers and writers."""

    number: int
    timeline_layout: TimelineLayout
    metadata_encoding: MetadataEncoding
    log_slicing: LogSlicing
    #: Pending clustering is its own `clustering` action (completes as `replacecommit`).
    clustering_action: bool
    #: Archived instants: `.hoodie/<archive folder>/` log files (False) or the LSM tree (True).
    lsm_history: bool
    #: lakeward writes and runs every table service on this version (everything, as on v6).
    writable: bool
    #: Readers list files from the metadata table's `files` partition when it exists (hudi-rs
    #: does on 8+ only; lakeward follows it, so that both read the same files).
    metadata_table_listing: bool = False
    #: How the metadata table is kept on this version (every commit keeps `files` when it exists).
    metadata_table: MetadataTableRules = MetadataTableRules(frozenset())
    #: lakeward writes data (insert, upsert, bulk_insert, delete, insert_overwrite(_table),
    #: delete_partition) to tables of this version, even where it does not run services yet.
    writes: bool = True
    #: The table services lakeward runs on this version although it is not `writable` (not yet
    #: all of them): registry actions (`compaction`, `clean`, ...) and `savepoint`, `restore`,
    #: `rollback`. Every other service is refused with ReadOnlyTableVersionError.
    services: frozenset[str] = frozenset()
    #: `hoodie.properties` key of the key generator: its class (v6) or its type name (v8+).
    keygen_property: str = "hoodie.table.keygenerator.class"
    #: `hoodie.properties` key of the ordering field: `precombine.field` (v6, v8) or
    #: `ordering.fields` (v9).
    ordering_property: str = "hoodie.table.precombine.field"
    #: Writes `hoodie.compaction.payload.class` (v6, v8; v9 records the merge mode alone).
    payload_property: bool = True
    #: Writes `hoodie.record.merge.mode` and the timeline paths of layout 2 (v8+).
    merge_mode_property: bool = False
    #: Writes `hoodie.record.merge.strategy.id` (v8; v9 leaves it out for built-in modes).
    merge_strategy_property: bool = False
    #: Writes `hoodie.table.format=native` (v9).
    table_format_property: bool = False

    @property
    def timeline_folder(self) -> str:
        return self.timeline_layout.timeline_folder

    @property
    def compacts_beside_pending_writes(self) -> bool:
        """Whether a compaction may be planned while writes are in flight.

        Slicing logs by completion time (v8+) makes it safe, as in Hudi 1.x: the plan takes only
        the log files of delta commits completed before it, and a write in flight completes
        after the plan's instant, so its logs join the slice the compaction creates. On v6 a
        log names its slice's base instant: logs a writer adds to a slice being compacted
        would be lost, so no plan is written while a write is pending.
        """
        return self.log_slicing is LogSlicing.COMPLETION_TIME

    @property
    def history_folder(self) -> str | None:
        """The LSM archived timeline folder (layout 2), relative to the base path."""
        return posixpath.join(self.timeline_folder, "history") if self.lsm_history else None

    def runs_service(self, service: str | None) -> bool:
        """Whether lakeward runs table service `service` on this version (None: any service, all of them)."""
        return self.writable or (service is not None and service in self.services)

    def check_writable(self, what: str = "write", service: str | None = None) -> None:
        """Raise ReadOnlyTableVersionError if lakeward must not run table service `service` on this version.

        `service` None asks for every service (repairs, index and CDC changes). Services on
        v8/v9 follow their own format rules (clean and compaction plans, the clustering
        action, the LSM archive); a service that does not follow them yet is refused outright
        rather than writing a v6-shaped instant into a Hudi 1.x table.
        """
        if not self.runs_service(service):
            raise ReadOnlyTableVersionError(
                f"cannot {what}: lakeward writes data to table version {self.number} but runs only "
                f"{sorted(self.services) or 'no'} table services on it (every other service runs on "
                f"table versions {list(WRITABLE_VERSIONS)} only; they are the next step of Hudi 1.x "
                f"support)",
                self.number,
                SUPPORTED_VERSIONS,
            )

    def read_only_reason(self, metadata_partitions: Sequence[str] = ()) -> str | None:
        """Why the daemon serves no table service on a table of this version (None: it serves them).

        `metadata_partitions`: the table's `hoodie.table.metadata.partitions`. A table is served
        without a metadata table, or with one of the partitions every write and service of its
        version keeps (`MetadataTableRules.partitions`: on 6 `files` and `record_index`, on 8 and 9
        the stats and bloom partitions too) or drops first (`dropped_by_default`: secondary
        indexes); other index partitions make it read-only, since every write and service on it is
        refused (`metadata_table.gate`) until they are dropped.
        """
        if not self.writable and not self.services:
            return f"read-only: {self}"
        kept = self.metadata_table.partitions
        if any(p not in kept and not dropped_by_default(p) for p in metadata_partitions):
            return (
                f"read-only: {self} with a metadata table ({','.join(metadata_partitions)}), whose index "
                "partitions lakeward does not maintain yet on this version; drop them with the write options "
                "hoodie.metadata.index.*.enable=false, or the whole metadata table with "
                "hoodie.metadata.enable=false (lakeward or a Hudi writer)"
            )
        return None

    def check_writes(self, what: str = "write") -> None:
        """Raise ReadOnlyTableVersionError if lakeward must not write data to this version."""
        if not self.writes:
            raise ReadOnlyTableVersionError(
                f"cannot {what}: table version {self.number} is read-only in lakeward",
                self.number,
                SUPPORTED_VERSIONS,
            )

    def __str__(self) -> str:
        return f"table version {self.number}"


#: The metadata-table partition lakeward keeps on every commit (`metadata_table.writer`).
MAINTAINED_METADATA_PARTITION = "files"
#: Every metadata-table partition lakeward keeps on a table that has it (`record_index`,
#: `bloom_filters`, `column_stats`, `partition_stats`: unless the writer disables them).
MAINTAINED_METADATA_PARTITIONS = frozenset(
    {MAINTAINED_METADATA_PARTITION, "record_index", "column_stats", "partition_stats", "bloom_filters"}
)
#: The prefix of Hudi 1.x's secondary-index partitions (`secondary_index_<index name>`), one per index.
SECONDARY_INDEX_PREFIX = "secondary_index_"


def dropped_by_default(partition: str) -> bool:
    """Whether lakeward drops this metadata-table partition before a write or table service unless the writer
    asks to keep it (`metadata_table.gate`): Hudi 1.x's secondary indexes, which it cannot maintain yet."""
    return partition.startswith(SECONDARY_INDEX_PREFIX)


#: Hudi 0.14/0.15's metadata table on v6 tables: `files` and `record_index` kept.
V6_METADATA_TABLE = MetadataTableRules(
    frozenset({MAINTAINED_METADATA_PARTITION, "record_index"}),
    init_offset=10,
    init_after_latest=True,
    compaction_suffix="001",
    clean_suffix="002",
)
#: Hudi 1.x's metadata table (versions 8 and 9).
V8_METADATA_TABLE = MetadataTableRules(MAINTAINED_METADATA_PARTITIONS)

#: The table services lakeward runs on Hudi 1.x tables (versions 8 and 9) so far. `change_tracking`
#: (CDC: `changetracking`, lakeward's own action, which Hudi 1.x and hudi-rs skip) and
#: `index_build` (secondary indexes: `indexing` instants and `.hoodie/.index/` files, which
#: neither reads) follow the version's timeline layout like every other service.
V8_SERVICES = frozenset(
    {
        "compaction",
        "clean",
        "clustering",
        "rollback",
        "savepoint",
        "restore",
        "archival",
        "change_tracking",
        "index_build",
        "metadata_compaction",
    }
)

V6 = TableVersion(
    6,
    TimelineLayout.V1,
    MetadataEncoding.JSON,
    LogSlicing.BASE_INSTANT,
    False,
    lsm_history=False,
    writable=True,
    metadata_table=V6_METADATA_TABLE,
)
V8 = TableVersion(
    8,
    TimelineLayout.V2,
    MetadataEncoding.AVRO,
    LogSlicing.COMPLETION_TIME,
    True,
    lsm_history=True,
    writable=False,
    services=V8_SERVICES,
    metadata_table_listing=True,
    metadata_table=V8_METADATA_TABLE,
    keygen_property="hoodie.table.keygenerator.type",
    merge_mode_property=True,
    merge_strategy_property=True,
)
V9 = TableVersion(
    9,
    TimelineLayout.V2,
    MetadataEncoding.AVRO,
    LogSlicing.COMPLETION_TIME,
    True,
    lsm_history=True,
    writable=False,
    services=V8_SERVICES,
    metadata_table_listing=True,
    metadata_table=V8_METADATA_TABLE,
    keygen_property="hoodie.table.keygenerator.type",
    ordering_property="hoodie.table.ordering.fields",
    payload_property=False,
    merge_mode_property=True,
    table_format_property=True,
)

_BY_NUMBER = {v.number: v for v in (V6, V8, V9)}
SUPPORTED_VERSIONS: tuple[int, ...] = tuple(sorted(_BY_NUMBER))
WRITABLE_VERSIONS: tuple[int, ...] = tuple(n for n, v in sorted(_BY_NUMBER.items()) if v.writable)
#: Versions lakeward writes data to (and creates tables with: `Table.create(table_version=)`).
DATA_WRITE_VERSIONS: tuple[int, ...] = tuple(n for n, v in sorted(_BY_NUMBER.items()) if v.writes)
#: The version lakeward creates new tables with.
CURRENT = V6


def table_version(value: int | str) -> TableVersion:
    """The `TableVersion` for a `hoodie.table.version` value.

    Raises UnsupportedTableVersionError naming the version and the supported ones for
    anything else (7 = the 0.16 bridge release, 10+ = newer than lakeward, garbage).
    """
    try:
        number = int(str(value).strip())
    except ValueError:
        raise UnsupportedTableVersionError(
            f"hoodie.table.version={value!r} is not a table version; lakeward reads table versions "
            f"{list(SUPPORTED_VERSIONS)}",
            str(value),
            SUPPORTED_VERSIONS,
        ) from None
    found = _BY_NUMBER.get(number)
    if found is None:
        newer = " (newer than lakeward understands)" if number > max(SUPPORTED_VERSIONS) else ""
        raise UnsupportedTableVersionError(
            f"hoodie.table.version={number}{newer} is not supported: lakeward reads and writes table "
            f"versions {list(SUPPORTED_VERSIONS)} (table services on {list(WRITABLE_VERSIONS)})",
            number,
            SUPPORTED_VERSIONS,
        )
    return found


def layout_from_listing(metafolder_names: set[str]) -> TimelineLayout:
    """The timeline layout of a table from the names in its `.hoodie/` folder alone.

    Used where only storage is at hand (no table config): Hudi 1.x creates
    `.hoodie/timeline/` with the table, Hudi 0.x never does.
    """
    return TimelineLayout.V2 if "timeline" in metafolder_names else TimelineLayout.V1


def rules_for_layout(layout: TimelineLayout) -> TableVersion:
    """The reading rules of a timeline's layout, where only the timeline is at hand.

    Versions sharing a layout read the same way (8 and 9 differ in table config only).
    """
    return V6 if layout is TimelineLayout.V1 else V9
