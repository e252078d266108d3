"""The metadata table's own table services in one pass, as Hudi's `performTableServices` runs them.

Order (Hudi 1.x, `HoodieBackedTableMetadataWriter.performTableServices`): finish metadata
compactions a run left pending, then clean (`metadata_table.clean`), then plan and run a new
compaction when one is due (`metadata_table.compaction`), then archive the metadata table's
timeline (`metadata_table.archival`). Everything runs under the data
table's lock, so no metadata delta commit of a data-table commit races it; the metadata
table's files are small (one `files` file group, and the file groups of the index partitions
the table has: `record_index`, `bloom_filters`, `column_stats`, `partition_stats`), so the pass
is short.

Who runs it: the write client, inline after every data-table commit on a table that keeps a
metadata table (as Hudi's writer does), and the daemon's `metadata_compaction` action
(`table_services.metadata_compaction`), which plans it like any other action and reports why it
is not due or blocked.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lakeward.core.config.write import WriteConfig
from lakeward.core.file_group.metadata_listing import read_table_properties
from lakeward.core.locks import LockProvider
from lakeward.core.metadata_table import compaction
from lakeward.core.metadata_table.archival import archive_metadata_table
from lakeward.core.metadata_table.clean import (
    MetadataCleanResult,
    execute_metadata_clean,
    run_pending_metadata_cleans,
    schedule_metadata_clean,
)
from lakeward.core.metadata_table.writer import maintains_files_partition
from lakeward.core.storage import Storage
from lakeward.core.table_services.archival import ArchiveResult
from lakeward.core.table_version import table_version
from lakeward.core.timeline import Timeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetadataServicesRun:
    """What one pass of the metadata table's services did."""

    compactions: tuple[compaction.MetadataCompactionResult, ...] = ()
    cleans: tuple[MetadataCleanResult, ...] = ()
    #: The compaction decision after the pass (why the next one is not due, or what blocks it).
    check: compaction.MetadataCompactionCheck | None = None
    #: The archival of the metadata table's timeline that ended the pass.
    archived: ArchiveResult | None = None

    @property
    def nothing_done(self) -> bool:
        return not self.compactions and not self.cleans and not (self.archived and self.archived.archived)


def run_metadata_table_services(
    storage: Storage,
    lock: LockProvider,
    write_config: WriteConfig,
    timezone: str = "LOCAL",
    *,
    force: bool = False,
) -> MetadataServicesRun | None:
    """One pass of the metadata table's services on the table at `storage` (module doc).

    None when the table keeps no metadata table. `force`: compact whenever there is a log to fold
    (and nothing blocks), whatever `hoodie.metadata.compact.max.delta.commits` says. Each compaction
    completes only while `lock` is still this thread's (a ZooKeeper session can expire meanwhile).
    """
    if not maintains_files_partition(storage):
        return None
    threshold = write_config.metadata_compact_max_delta_commits
    level = write_config.metadata_compact_deflate_level
    layout = table_version(read_table_properties(storage).get("hoodie.table.version", "6")).timeline_layout
    with lock:
        compactions = [
            compaction.execute_metadata_compaction(storage, t, timezone, lock.confirmed, deflate_level=level)
            for t in compaction.pending_metadata_compactions(storage)
        ]
        cleans = run_pending_metadata_cleans(storage, timezone)
        clean_time = schedule_metadata_clean(storage, write_config.metadata_cleaner_commits_retained, timezone)
        if clean_time is not None:
            cleans.append(execute_metadata_clean(storage, clean_time, timezone))
        data_timeline = Timeline.load(storage, layout)
        planned = compaction.schedule_metadata_compaction(storage, data_timeline, threshold, timezone, force=force)
        if planned is not None:
            compactions.append(
                compaction.execute_metadata_compaction(storage, planned, timezone, lock.confirmed, deflate_level=level)
            )
            log.info("compacted the metadata table of %s at %s", storage.uri, planned)
        data_timeline = Timeline.load(storage, layout)
        check = compaction.check_metadata_compaction(storage, data_timeline, threshold)
        archived = archive_metadata_table(storage, data_timeline, write_config)
    if check.blocked:
        log.warning("metadata-table compaction of %s held back: %s", storage.uri, check.reason)
    return MetadataServicesRun(tuple(compactions), tuple(cleans), check, archived)


__all__ = ["MetadataServicesRun", "run_metadata_table_services"]
