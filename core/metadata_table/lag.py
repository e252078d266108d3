"""How far a table's metadata table is behind its data table, from the two timelines only.

A Hudi writer applies every data-table instant of the actions in `RECORDED_ACTIONS` to the
metadata table as a delta commit with the same instant time, completed before the data
instant is (`HoodieBackedTableMetadataWriter`). Readers that list files through the metadata
table (Hudi 1.x, hudi-rs, lakeward on versions 8+) see only what its completed delta commits
hold, so a completed data instant the metadata table does not reflect is files those readers
miss -- the work of a writer that did not maintain it.

A completed data instant on the active timeline is **reflected** when

- the metadata table has a completed delta commit of the same instant time; or
- it completed before the metadata table's first initialisation instant did (instant times
  `00000000000000xxx`, which Hudi and `initialize_metadata_table` reserve; the first is the
  `files` partition's): the initialisation listed the table as of then (table versions 8+,
  whose instants carry completion times); or
- it is older than the oldest delta commit on the metadata table's active timeline that is not
  an initialisation (what came before was archived; it cannot be checked, and is not counted).

Every other one is **lag**. Nothing but the two timelines' file names is read.

Beside the lag, the metadata table's own compaction (`metadata_table.compaction`) is measured:
**not compacted** are the completed data-table instants whose metadata delta commit completed
after the metadata table's last compaction (readers merge one log file per such instant on
every listing, and the data table's archival stops at that compaction), and **blocking** is the
oldest data-table instant pending on the data table whose metadata delta commit completed (a
metadata compaction must stay before it: while it pends, compaction is held back).
"""

from __future__ import annotations

from dataclasses import dataclass

from lakeward.core.file_group.metadata_listing import INIT_INSTANT_PREFIX, metadata_storage
from lakeward.core.metadata_table.compaction import blocking_instant, delta_commits_since_compaction
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, Instant, Timeline

#: Completed data-table actions a Hudi writer records in the metadata table (a compaction
#: completes as a commit, a log compaction as a delta commit, a clustering as a replacecommit).
RECORDED_ACTIONS = frozenset(
    {Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT, Action.CLEAN, Action.ROLLBACK, Action.RESTORE}
)


def is_initialization(instant_time: str) -> bool:
    """Whether a metadata-table instant time is one of the reserved initialisation times."""
    return instant_time.startswith(INIT_INSTANT_PREFIX)


@dataclass(frozen=True)
class MetadataTableLag:
    """The completed data-table instants the metadata table does not reflect, oldest first."""

    behind: tuple[Instant, ...]
    #: Completed data-table instants whose metadata delta commit no metadata compaction took yet.
    not_compacted: tuple[Instant, ...] = ()
    #: The oldest pending data-table instant whose metadata delta commit completed (holds compaction back).
    blocking: Instant | None = None

    @property
    def instants(self) -> int:
        return len(self.behind)

    @property
    def oldest(self) -> Instant | None:
        return self.behind[0] if self.behind else None


def metadata_table_lag(storage: Storage, timeline: Timeline) -> MetadataTableLag:
    """The lag of the metadata table of the table at `storage`, whose data timeline is `timeline`
    (module doc). Call it for tables that have a metadata table; its timeline is listed once."""
    mdt = Timeline.load(metadata_storage(storage), timeline.layout)
    recorded = {i.time for i in mdt.completed(Action.DELTA_COMMIT)}
    inits = [i for i in mdt.completed(Action.DELTA_COMMIT) if is_initialization(i.time)]
    initialized_at = inits[0].completion_time if inits else None  # oldest first: the `files` partition's
    updates = [i.time for i in mdt.active() if not is_initialization(i.time)]
    first_update = min(updates, default=None)

    def reflected(instant: Instant) -> bool:
        if instant.time in recorded:
            return True
        completion = instant.completion_time
        if initialized_at is not None and completion is not None and completion <= initialized_at:
            return True
        return first_update is not None and instant.time < first_update

    data = [i for i in timeline.active() if i.is_completed and i.action in RECORDED_ACTIONS]
    uncompacted = {i.time for i in delta_commits_since_compaction(mdt) if not is_initialization(i.time)}
    return MetadataTableLag(
        tuple(i for i in data if not reflected(i)),
        tuple(i for i in data if i.time in uncompacted),
        blocking_instant(timeline, mdt),
    )


__all__ = ["RECORDED_ACTIONS", "MetadataTableLag", "is_initialization", "metadata_table_lag"]
