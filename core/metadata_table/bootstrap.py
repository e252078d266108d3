"""Initialise the metadata table of an existing table with its `files` partition.

What Hudi does when a writer first enables the metadata table on a table (its "bootstrap",
`HoodieBackedTableMetadataWriter.initializeFromFilesystem`), for the `files` partition, in
this order (Hudi 1.x on versions 8/9; Hudi 0.14/0.15 on version 6, differences noted):

1. `.hoodie/metadata/.hoodie/hoodie.properties`: a MERGE_ON_READ table of HFiles named
   `<table>_metadata`, of the data table's version, record key `key`, key generator
   `HOODIE_TABLE_METADATA` (v6: the class `HoodieTableMetadataKeyGenerator`), payload
   `HoodieMetadataPayload`, merge mode CUSTOM (v8+), the version's timeline layout;
2. on its timeline, the initialisation delta commit (`MetadataTableRules.init_instant`:
   `00000000000000000` on v8/v9, the data table's latest completed instant + `010` on v6):
   requested, inflight, then in the partition folder `files/` its `.hoodie_partition_metadata`,
   the file group's initialisation log file (one empty DELETE block) and the base HFile of the
   records (`files_partition`), then completed with the commit metadata of a
   `BULK_INSERT_PREPPED` (Avro on v8+, JSON on v6);
3. last, `hoodie.table.metadata.partitions=files` in the data table's `hoodie.properties`
   (backup file first, then one atomic replace), which is what makes readers (Hudi, hudi-rs,
   lakeward) list files through the metadata table.

The listing is taken as of the data table's latest completed instant. Every step before the
last leaves the data table as it was: a crash there leaves a metadata table nobody uses,
which the next initialisation deletes and builds again.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import time
from dataclasses import dataclass

from lakeward.core.config.properties import format_properties, parse_properties
from lakeward.core.config.table import TableConfig, table_checksum, update_table_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.hfile_writer import write_base_hfile
from lakeward.core.file_group.log_file.log_block import DeleteBlock, HeaderKey
from lakeward.core.file_group.log_file.log_format import encode_block
from lakeward.core.file_group.metadata_listing import (
    FILES_PARTITION,
    INFLIGHT_PARTITIONS_KEY,
    INIT_INSTANT_PREFIX,
    METADATA_FOLDER,
    METADATA_PARTITIONS_KEY,
    metadata_partitions,
    metadata_storage,
)
from lakeward.core.file_group.naming import log_file_name, write_token
from lakeward.core.file_group.partition_metadata import ensure_partition_metadata
from lakeward.core.metadata_table.files_partition import (
    FILES_FILE_GROUP_ID,
    encode_record,
    files_partition_records,
    list_partition_files,
)
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import METAFOLDER, Action, CommitMetadata, Timeline, WriteStat
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight

log = logging.getLogger(__name__)

PROPERTIES_PATH = posixpath.join(METAFOLDER, "hoodie.properties")
#: `hoodie.table.metadata.partitions.inflight`: metadata partitions being built (none here).
#: The metadata-table instant that initialises its first partition (`files`) on v8/v9: Hudi's
#: reserved `SOLO_COMMIT_TIMESTAMP` (14 zeros) plus a 3-digit offset 000 (v6: `init_instant`).
FILES_INIT_INSTANT = INIT_INSTANT_PREFIX + "000"
#: What Hudi's data table reports when nothing has completed yet (its `SOLO_COMMIT_TIMESTAMP`).
NO_INSTANT = "00000000000000"
#: Write token of the initialisation log file (Hudi's `DEFAULT_WRITE_TOKEN`) and of the base HFile.
INIT_WRITE_TOKEN = write_token(0, 0, 0)
_MDT_FOLDERS = (".temp", ".schema", ".heartbeat", ".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids")


@dataclass(frozen=True)
class MetadataTableInit:
    """What `initialize_metadata_table` wrote."""

    #: The metadata-table delta commit that initialised `files` (`00000000000000000` on v8/v9).
    instant_time: str
    #: The data table's latest completed instant the listing was taken as of (None: none yet).
    as_of: str | None
    #: Data partitions listed (records besides `__all_partitions__`).
    partitions: int
    #: Data files (base and log) listed across them.
    files: int
    #: The `files` partition's base HFile, relative to the data table's base path.
    base_file: str


def _metadata_table_properties(config: TableConfig) -> dict[str, str]:
    """`hoodie.properties` of the metadata table, keys as Hudi 1.1 writes them (fixture order), or
    as Hudi 0.14/0.15 does on version 6 (no merge mode, layout 1, `archived`, keygen class)."""
    name = f"{config.name}_metadata"
    version = config.version
    layout2 = version.timeline_layout is TimelineLayout.V2
    props = {
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.table.initial.version": str(config.table_version) if layout2 else None,
        "hoodie.table.keygenerator.type": "HOODIE_TABLE_METADATA" if layout2 else None,
        "hoodie.table.keygenerator.class": None
        if layout2
        else "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.archivelog.folder": "history" if layout2 else "archived",
        "hoodie.timeline.layout.version": str(int(version.timeline_layout)),
        "hoodie.timeline.history.path": "history" if layout2 else None,
        "hoodie.table.checksum": str(table_checksum("", name)),
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.record.merge.strategy.id": "00000000-0000-0000-0000-000000000000"
        if version.merge_mode_property
        else None,
        "hoodie.table.recordkey.fields": "key",
        "hoodie.table.name": name,
        "hoodie.timeline.path": "timeline" if layout2 else None,
        "hoodie.populate.meta.fields": "false",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.record.merge.mode": "CUSTOM" if version.merge_mode_property else None,
        "hoodie.table.version": str(config.table_version),
    }
    return {k: v for k, v in props.items() if v is not None}


def _iso_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _check_can_initialize(storage: Storage, timeline: Timeline) -> None:
    props = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    if metadata_partitions(props):
        raise MetadataTableError(
            f"{storage.uri} already has a metadata table ({METADATA_PARTITIONS_KEY}="
            f"{','.join(metadata_partitions(props))}); nothing was written"
        )
    pending = timeline.pending()
    if pending:
        raise MetadataTableError(
            f"cannot initialise the metadata table of {storage.uri} while instants are pending "
            f"({', '.join(str(i) for i in pending)}): their writers would complete them without recording "
            "them in the metadata table. Let them finish or roll them back first; nothing was written"
        )


def start_file_group(mdt: Storage, partition: str, file_id: str, init_instant: str) -> None:
    """The partition folder's metadata file and one file group's initialisation log file.

    Hudi starts every metadata file group with a log file holding one DELETE block with no
    keys and only an `INSTANT_TIME` header, so that a group is known even without records.
    """
    ensure_partition_metadata(mdt, partition, init_instant)
    no_keys = DeleteBlock.create(init_instant, "", [], []).records
    init_block = DeleteBlock(header={HeaderKey.INSTANT_TIME: init_instant}, records=no_keys)
    log_name = log_file_name(file_id, init_instant, 1, INIT_WRITE_TOKEN)
    mdt.create_if_absent(posixpath.join(partition, log_name), encode_block(init_block))


def initialize_for_writer(storage: Storage, config: TableConfig, timeline: Timeline) -> MetadataTableInit | None:
    """What a writer with `hoodie.metadata.enable=true` does before its first commit on a table without
    a metadata table: initialise it (`initialize_metadata_table`), unless an instant of another writer
    is pending (`timeline`: after this writer rolled back failed writes), which Hudi's writer waits for
    (`shouldInitializeFromFilesystem`): it then writes without one, logs why and tries again next time."""
    pending = timeline.pending()
    if pending:
        log.warning(
            "not initialising the metadata table of %s yet: instants are pending (%s); the next write tries again",
            storage.uri,
            ", ".join(str(i) for i in pending),
        )
        return None
    return initialize_metadata_table(storage, config, timeline=timeline)


def initialize_metadata_table(
    storage: Storage, config: TableConfig, *, timeline: Timeline | None = None
) -> MetadataTableInit:
    """Create the metadata table of the table at `storage` with its `files` partition.

    Call under the table lock, with no instant pending on the data table (MetadataTableError
    otherwise, as for a table that already has a metadata table). Leftovers
    of an earlier, interrupted initialisation are deleted first. See the module docstring
    for what is written; the data table's own files are not touched except `hoodie.properties`,
    last.
    """
    timeline = timeline or Timeline.load(storage, config.version.timeline_layout)
    _check_can_initialize(storage, timeline)
    storage.delete_dir(METADATA_FOLDER)  # an unused leftover of an interrupted initialisation
    completed = timeline.completed()
    as_of = completed[-1].time if completed else None
    version = config.version
    init_instant = version.metadata_table.init_instant(as_of)
    listing = list_partition_files(storage.list_dir("", recursive=True), as_of or NO_INSTANT)

    mdt = metadata_storage(storage)
    if mdt.is_local:
        archive = "timeline/history" if version.lsm_history else "archived"
        for folder in (*_MDT_FOLDERS, archive):
            mdt.make_dirs(posixpath.join(METAFOLDER, folder))
    mdt.create_if_absent(
        PROPERTIES_PATH,
        format_properties(_metadata_table_properties(config), f"Properties saved on {_iso_now()}").encode(),
    )
    requested = create_requested(mdt, init_instant, Action.DELTA_COMMIT, b"", version.timeline_layout)
    inflight = transition_to_inflight(mdt, requested)
    start_file_group(mdt, FILES_PARTITION, FILES_FILE_GROUP_ID, init_instant)

    started = time.monotonic()
    cells = [(key, encode_record(record)) for key, record in files_partition_records(listing)]
    hfile = write_base_hfile(cells, HFILE_SCHEMA_JSON)
    base_name = f"{FILES_FILE_GROUP_ID}_{INIT_WRITE_TOKEN}_{init_instant}.hfile"
    base_path = posixpath.join(FILES_PARTITION, base_name)
    mdt.create_if_absent(base_path, hfile)
    stat = WriteStat(
        fileId=FILES_FILE_GROUP_ID,
        path=base_path,
        numWrites=len(cells),
        numInserts=len(cells),
        totalWriteBytes=len(hfile),
        fileSizeInBytes=len(hfile),
        partitionPath=FILES_PARTITION,
        runtimeStats={
            "totalScanTime": 0,
            "totalCreateTime": int((time.monotonic() - started) * 1000),
            "totalUpsertTime": 0,
        },
    )
    metadata = CommitMetadata(
        partitionToWriteStats={FILES_PARTITION: [stat]},
        extraMetadata={"schema": COMMIT_SCHEMA_JSON},
        operationType="BULK_INSERT_PREPPED",
    )
    complete(mdt, inflight, metadata.to_bytes(version.metadata_encoding), config.timeline_timezone)

    # the one step that puts the metadata table in use: everything before it can be redone
    update_table_properties(storage, {METADATA_PARTITIONS_KEY: FILES_PARTITION, INFLIGHT_PARTITIONS_KEY: ""})
    return MetadataTableInit(
        init_instant,
        as_of,
        len(listing),
        sum(len(files) for files in listing.values()),
        posixpath.join(METADATA_FOLDER, base_path),
    )
