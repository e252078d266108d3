"""The metadata table's own archival, as Hudi's archiver runs on it (1.x on versions 8/9, 0.x on 6).

Every data-table instant adds a delta commit to the metadata table's timeline
(`.hoodie/metadata/.hoodie/timeline/`), and its compactions and cleans add their own instants;
without archival that timeline grows forever and every reader lists it. Hudi's metadata writer
archives it after its compaction and clean (`HoodieBackedTableMetadataWriter.performTableServices`,
with `TimelineArchiverV2` on the metadata table); lakeward does the same, with the data table's
archival machinery (`table_services.archival`) and these rules of Hudi 1.x for the metadata table:

- **Counts**: `hoodie.keep.min.commits` + 1 and `hoodie.keep.max.commits` + 1 of the data table
  (`HoodieMetadataWriteUtils.createMetadataWriteConfig`): archive once more than max completed
  delta commits and compactions are active, down to min.
- **Its latest compaction**: only instants before the metadata table's latest compaction (nothing
  before its first one): the file slices readers use start there, so no instant a reader needs to
  place a log file is archived (Hudi's merge-on-read rule, `getEarliestInstantToRetainForCompaction`).
- **The data table's active timeline**: never at or past the earliest completed write (commit,
  delta commit, replacecommit) or the earliest pending instant of the data table
  (`TimelineUtils.getEarliestInstantForMetadataArchival`): a data-table rollback of an instant
  rolls back its metadata delta commit, which must still be active.
- The rules every archival keeps: never past the metadata table's earliest pending instant or the
  earliest commit its latest clean retains, and cleans and rollbacks older than the first kept
  commit go with the commits (`table_services.archival`).

The archived instants go to the metadata table's own LSM history
(`.hoodie/metadata/.hoodie/timeline/history/`) on versions 8/9, and to its archived log files
(`.hoodie/metadata/.hoodie/archived/`, Hudi 0.x's `HoodieArchivedMetaEntry` blocks, as the data
table's) on version 6, where Hudi 0.x's metadata writer archives with the same rules; a run killed
part-way is finished by the next one (the archive is written first, then the timeline files are
deleted oldest first).
Readers of the metadata table take base files older than its first active instant as committed
(they were archived), as Hudi's file-system view does.
"""

from __future__ import annotations

from lakeward.core.config.properties import parse_properties
from lakeward.core.config.table import PROPERTIES_PATH
from lakeward.core.config.write import WriteConfig
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.metadata_table.compaction import last_metadata_compaction, mdt_timeline
from lakeward.core.storage import Storage
from lakeward.core.table_services.archival import ArchiveResult, archive_instants, instants_to_archive
from lakeward.core.table_version import rules_for_layout
from lakeward.core.timeline import Instant, Timeline

#: The key of a table's archive folder (version 6), relative to `.hoodie/`.
ARCHIVE_FOLDER_KEY = "hoodie.archivelog.folder"

#: The metadata table keeps this many more commits than the data table's `hoodie.keep.*.commits` (Hudi).
EXTRA_COMMITS_KEPT = 1


def data_table_barrier(data_timeline: Timeline) -> str | None:
    """The earliest data-table instant the metadata table must keep active: the earlier of the data
    table's first completed write and its first pending instant (None: neither exists)."""
    candidates = [i.time for i in data_timeline.completed_writes()[:1]]
    candidates += [i.time for i in data_timeline.pending()[:1]]
    return min(candidates, default=None)


def metadata_instants_to_archive(
    storage: Storage, data_timeline: Timeline, write_config: WriteConfig, mdt: Timeline | None = None
) -> list[Instant]:
    """The metadata-table instants the rules (module doc) archive now, oldest first; `storage` is the
    data table's, `mdt` the metadata table's timeline when the caller has it."""
    mdt = mdt if mdt is not None else mdt_timeline(storage)
    compaction = last_metadata_compaction(mdt)
    if compaction is None:
        return []
    barriers = [compaction.time]
    data = data_table_barrier(data_timeline)
    if data is not None:
        barriers.append(data)
    return instants_to_archive(
        metadata_storage(storage),
        mdt,
        write_config.keep_min_commits + EXTRA_COMMITS_KEPT,
        write_config.keep_max_commits + EXTRA_COMMITS_KEPT,
        barriers,
    )


def archive_metadata_table(
    storage: Storage, data_timeline: Timeline, write_config: WriteConfig, *, dry_run: bool = False
) -> ArchiveResult:
    """Archive the metadata-table instants the rules allow into its LSM history (v8/v9) or archived
    log files (v6), and finish what a killed run left; `storage` is the data table's. Call under the
    data table's lock."""
    mdt = mdt_timeline(storage)
    planned = metadata_instants_to_archive(storage, data_timeline, write_config, mdt)
    metadata = metadata_storage(storage)
    history = rules_for_layout(mdt.layout).history_folder  # None on layout 1: archived log files
    folder = ""
    if history is None:
        properties = parse_properties(metadata.read_bytes(PROPERTIES_PATH).decode("utf-8"))
        folder = properties.get(ARCHIVE_FOLDER_KEY, "archived")
    return archive_instants(
        metadata,
        mdt,
        planned,
        history=history,
        folder=folder,
        batch=write_config.archival_batch,
        timeline_compaction_batch=write_config.timeline_compaction_batch,
        dry_run=dry_run,
    )


__all__ = ["EXTRA_COMMITS_KEPT", "archive_metadata_table", "data_table_barrier", "metadata_instants_to_archive"]
