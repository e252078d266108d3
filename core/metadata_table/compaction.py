"""The metadata table's own compaction, as Hudi's metadata writer runs it (every table version: on 6
with Hudi 0.x's instant times, below).

Every data-table instant appends one log file to the `files` file group (`writer`), and to the
file groups of the index partitions it touches, so without compaction their latest file slices
grow by a log file per commit and every reader merges them all. Hudi's
`HoodieBackedTableMetadataWriter.compactIfNecessary` folds them into new base HFiles; lakeward
does the same, for every partition it keeps (`files`, `record_index`, `bloom_filters`,
`column_stats`, `partition_stats`; one with any other partition is refused, MetadataTableError):

- **Due** once the completed metadata delta commits since the last metadata compaction (the
  initialisation delta commits included) reach `hoodie.metadata.compact.max.delta.commits`
  (default 10).
- **Instant time** `m`: a new instant time, except when a data-table instant `T` is pending on
  the data table but its metadata delta commit completed (a writer died between the two
  commits, or is between them now): then `m` is `T` minus one millisecond, so that the
  compaction never bakes `T` into a base file and `T` can still be rolled back on both tables.
  This is Hudi 1.x's rule. On version 6 lakeward follows Hudi 0.x (`MetadataTableRules.
  compaction_suffix`): `m` is `<last delta commit>001`, and no compaction is planned while
  a data instant at or before the last delta commit is pending.
- **Plan** (`<m>.compaction.requested` on the metadata table, a `HoodieCompactionPlan`): the
  latest slice of each file group with the log files whose delta commit completed before `m`
  (Hudi's planner rule, see the v8/v9 format reference section 3.2). Logs that complete later
  belong to the slice based at `m`.
- **Blocked**: when the bound leaves fewer delta commits than the threshold, nothing is
  planned and `MetadataCompactionCheck.reason` names the pending data instant that holds it
  back (`lakeward plans` and the API show it).
- **Execute** (idempotent): merge each slice as readers do (`files`: `merge_files_slice`, a
  newer tombstone removes a file, a newer live entry keeps the larger size; `record_index` and
  `bloom_filters`: the newest cell of a key wins, `merge_record_index_slice`; `column_stats` and
  `partition_stats`: `merge_stats_slice`), drop the tombstones where the merge does (nothing
  older is left below a base file), write `<fileId>_<token>_<m>.hfile`, complete
  `<m>_<c>.commit` (`COMPACT`, `compacted=true`). A run that died is run again from its plan:
  the base file is rewritten with the same name and content.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from lakeward.core.config.write import DEFAULT_METADATA_COMPACTION_DEFLATE_LEVEL
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.hfile_writer import write_base_hfile
from lakeward.core.file_group.metadata_listing import (
    ALL_PARTITIONS_KEY,
    FILES_PARTITION,
    MergedFiles,
    load_metadata_timeline,
    log_slice_time,
    merge_files_slice,
    metadata_partitions,
    metadata_storage,
    metadata_table_version,
    read_table_properties,
    slice_times,
)
from lakeward.core.file_group.naming import write_token
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.bloom_filters import BLOOM_FILTERS_PARTITION
from lakeward.core.metadata_table.files_partition import encode_record
from lakeward.core.metadata_table.record_index import RECORD_INDEX_PARTITION
from lakeward.core.metadata_table.record_index_compaction import merge_record_index_slice
from lakeward.core.metadata_table.schema import COMMIT_SCHEMA_JSON, HFILE_SCHEMA_JSON, MetadataRecordType
from lakeward.core.metadata_table.stats_writer import STATS_PARTITIONS, merge_stats_slice
from lakeward.core.storage import Storage
from lakeward.core.table_version import MAINTAINED_METADATA_PARTITIONS, rules_for_layout
from lakeward.core.timeline import WRITE_ACTIONS, Action, CommitMetadata, Instant, State, Timeline, WriteStat
from lakeward.core.timeline.compaction_plan import CompactionOperation, CompactionPlan, read_compaction_plan
from lakeward.core.timeline.instant_time import new_instant_time, previous_instant_time
from lakeward.core.timeline.metadata import COMPACT
from lakeward.core.timeline.transitions import complete, create_requested, transition_to_inflight
from lakeward.core.write.markers import create_marker, delete_markers_of_completed

#: Hudi's option and default: compact the metadata table once this many delta commits completed since the last.
MAX_DELTA_COMMITS_KEY = "hoodie.metadata.compact.max.delta.commits"
DEFAULT_MAX_DELTA_COMMITS = 10
#: Write token of the base files lakeward's metadata compaction writes (one task, one attempt).
BASE_WRITE_TOKEN = write_token(0, 0, 0)
#: The metadata partitions whose file groups a metadata compaction folds (every maintained one).
_COMPACTED_PARTITIONS = frozenset({FILES_PARTITION, RECORD_INDEX_PARTITION, BLOOM_FILTERS_PARTITION, *STATS_PARTITIONS})
#: Partitions whose slices merge by "the newest cell of a key wins" (`merge_record_index_slice`).
_NEWEST_WINS_PARTITIONS = frozenset({RECORD_INDEX_PARTITION, BLOOM_FILTERS_PARTITION})


def mdt_timeline(storage: Storage) -> Timeline:
    """The metadata table's active timeline (of its version's layout), loaded now; `storage` is the data table's."""
    return load_metadata_timeline(metadata_storage(storage))


def pending_metadata_compactions(storage: Storage, timeline: Timeline | None = None) -> list[str]:
    """Metadata-table compactions planned and not completed, oldest first (`timeline`: the MDT's)."""
    mdt = timeline if timeline is not None else mdt_timeline(storage)
    return [i.time for i in mdt.pending(Action.COMPACTION)]


def last_metadata_compaction(mdt: Timeline) -> Instant | None:
    """The latest completed compaction (a `commit`) of the metadata table's timeline."""
    done = mdt.completed(Action.COMMIT)
    return done[-1] if done else None


def delta_commits_since_compaction(mdt: Timeline) -> list[Instant]:
    """Completed metadata delta commits in the latest file slice: completed at or after the last
    compaction's instant time (all of them before the first compaction), by completion time."""
    last = last_metadata_compaction(mdt)
    done = mdt.completed(Action.DELTA_COMMIT)
    if last is not None:
        done = [i for i in done if i.ordering_time >= last.time]
    return sorted(done, key=lambda i: i.ordering_time)


def blocking_instant(data_timeline: Timeline, mdt: Timeline) -> Instant | None:
    """The oldest data-table instant pending on the data table whose metadata delta commit completed:
    the metadata compaction must stay before it (Hudi 1.x's bound). On v6 (layout 1, Hudi 0.x's
    rule): the oldest data instant pending at or before the latest metadata delta commit."""
    done = mdt.completed(Action.DELTA_COMMIT)
    if rules_for_layout(mdt.layout).metadata_table.compaction_suffix is not None:
        latest = max((i.time for i in done), default="")
        return next((i for i in data_timeline.pending() if i.time <= latest), None)
    recorded = {i.time for i in done}
    return next((i for i in data_timeline.pending() if i.time in recorded), None)


def _unblocking(blocker: Instant) -> str:
    """What ends a pending data-table instant's hold on the metadata compaction: a write completes or is
    rolled back once its writer is dead; a table-service plan is to be run, not thrown away."""
    plan = blocker.action is Action.REPLACE_COMMIT and blocker.state is State.REQUESTED  # v6 clustering plan
    if blocker.action in WRITE_ACTIONS and not plan:
        return "let it complete; the next writer or `lakeward` rollback rolls back a dead writer's instant"
    return (
        f"run the pending {blocker.action.value} plan to completion (the daemon runs pending plans); roll it "
        "back only to abandon it"
    )


@dataclass(frozen=True)
class MetadataCompactionCheck:
    """Whether the metadata table's compaction is due now, at which instant time, and if not, why."""

    #: Completed metadata delta commits since the last metadata compaction.
    delta_commits: int
    #: `hoodie.metadata.compact.max.delta.commits`.
    threshold: int
    #: The delta commits a plan made now would take (those completed before `instant_time`).
    eligible: int
    #: The compaction's instant time when a pending data instant bounds it (None: a new instant time).
    instant_time: str | None
    #: The data-table instant that bounds (and, when `blocked`, holds back) the compaction.
    blocked_by: Instant | None
    #: Metadata compactions planned and not completed (run them first; no new plan meanwhile).
    pending: tuple[str, ...] = ()
    #: The oldest metadata delta commit not compacted yet (None: none).
    oldest: str | None = None
    #: v6 (Hudi 0.x's rule): `blocked_by` holds the whole compaction back, not just the delta commits after it.
    blocks_all: bool = False
    #: The instant time of the metadata table's latest completed compaction ("" when it has none).
    compacted_at: str = ""

    @property
    def archival_bound(self) -> str | None:
        """How far a data-table archival may go (Hudi archives no commit that completed after the
        metadata table's latest compaction) once it ran the metadata compaction it runs first
        (`table_services.archival`): the pending ones, else a new one over the delta commits it
        may take now. None: that compaction is unbounded (it takes every delta commit)."""
        if self.pending:
            return max(self.pending)
        if self.eligible:
            return self.instant_time
        return self.compacted_at

    @property
    def due(self) -> bool:
        return not self.pending and self.eligible >= self.threshold

    @property
    def blocked(self) -> bool:
        """Due by count, but a pending data-table instant keeps too many delta commits out of the plan."""
        return not self.pending and self.delta_commits >= self.threshold and self.eligible < self.threshold

    @property
    def reason(self) -> str:
        """Why no new metadata compaction is planned now ("" when it is due)."""
        if self.pending:
            return f"metadata compaction(s) {', '.join(self.pending)} pending: they run first, no new plan meanwhile"
        if self.blocked and self.blocked_by is not None and self.blocks_all:
            b = self.blocked_by
            return (
                f"data-table instant {b.time} ({b.action.value}, {b.state.value}) is pending at or before the metadata "
                f"table's latest delta commit: on a version 6 table no metadata compaction is planned until it "
                f"completes or is rolled back (Hudi 0.x's rule; {_unblocking(b)})"
            )
        if self.blocked and self.blocked_by is not None:
            b = self.blocked_by
            return (
                f"data-table instant {b.time} ({b.action.value}, {b.state.value}) is pending while its metadata "
                f"delta commit completed: a metadata compaction may only take delta commits completed before it "
                f"({self.eligible} of {self.delta_commits}, fewer than {MAX_DELTA_COMMITS_KEY}={self.threshold}); "
                f"{_unblocking(b)}"
            )
        if self.eligible < self.threshold:
            return (
                f"{self.delta_commits} metadata delta commit(s) since the last metadata compaction, "
                f"fewer than {MAX_DELTA_COMMITS_KEY}={self.threshold}"
            )
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "due": self.due,
            "blocked": self.blocked,
            "delta_commits": self.delta_commits,
            "eligible": self.eligible,
            "threshold": self.threshold,
            "instant_time": self.instant_time,
            "blocked_by": self.blocked_by.time if self.blocked_by else None,
            "pending": list(self.pending),
            "oldest": self.oldest,
            "reason": self.reason,
        }


def check_metadata_compaction(
    storage: Storage,
    data_timeline: Timeline,
    threshold: int = DEFAULT_MAX_DELTA_COMMITS,
    mdt: Timeline | None = None,
) -> MetadataCompactionCheck:
    """Decide the metadata compaction of the table at `storage` now (module doc); reads timelines only
    (`mdt`: the metadata table's, when the caller has it)."""
    mdt = mdt if mdt is not None else mdt_timeline(storage)
    deltas = delta_commits_since_compaction(mdt)
    blocker = blocking_instant(data_timeline, mdt)
    suffix = rules_for_layout(mdt.layout).metadata_table.compaction_suffix
    if suffix is not None:  # v6: after the latest delta commit, nothing while a data instant before it is pending
        instant_time = max((i.time for i in deltas), default="") + suffix if deltas else None
        eligible = [] if blocker is not None else deltas
    else:
        instant_time = previous_instant_time(blocker.time) if blocker is not None else None
        eligible = [i for i in deltas if instant_time is None or i.ordering_time < instant_time]
    return MetadataCompactionCheck(
        delta_commits=len(deltas),
        threshold=threshold,
        eligible=len(eligible),
        instant_time=instant_time,
        blocked_by=blocker,
        pending=tuple(pending_metadata_compactions(storage, mdt)),
        oldest=min((i.time for i in deltas), default=None),
        blocks_all=suffix is not None,
        compacted_at=last.time if (last := last_metadata_compaction(mdt)) is not None else "",
    )


def plan_metadata_compaction(
    storage: Storage, mdt: Timeline, instant_time: str, *, every_group: bool = False
) -> CompactionPlan:
    """The plan of a metadata compaction at `instant_time`: per file group of a partition it compacts
    (`files`, `record_index`, `bloom_filters`, `column_stats`, `partition_stats`), its latest slice with
    the logs whose delta commit completed before `instant_time` (groups with none are left out, unless
    `every_group`: then their base file is rewritten under `instant_time`)."""
    completion = slice_times(mdt)
    first = mdt.instants[0].time if mdt.instants else None
    view = FileSystemView.load(metadata_storage(storage), mdt)
    operations = []
    for group in view.file_groups():
        if group.partition_path not in _COMPACTED_PARTITIONS or not group.slices:
            continue
        latest = max(group.slices, key=lambda s: s.base_instant_time)
        logs = tuple(
            f
            for f in latest.log_files
            if (done := log_slice_time(completion, f.base_instant_time, first)) and done < instant_time
        )
        if not logs and not (every_group and latest.base_file is not None):
            continue
        operation = CompactionOperation.of_slice(latest)
        operations.append(
            CompactionOperation(
                operation.partition_path,
                operation.file_id,
                operation.base_instant_time,
                operation.base_file_name,
                tuple(f.name for f in logs),
                operation.metrics,
            )
        )
    return CompactionPlan(tuple(operations))


def _check_maintained_partitions(storage: Storage) -> None:
    """Refuse a metadata table with partitions lakeward does not maintain (it compacts them all)."""
    others = [p for p in metadata_partitions(read_table_properties(storage)) if p not in MAINTAINED_METADATA_PARTITIONS]
    if others:
        raise MetadataTableError(
            f"the metadata table of {storage.uri} has partition(s) {','.join(others)} whose records lakeward "
            "cannot merge yet: its compaction is not supported on it. Nothing was written"
        )


def schedule_metadata_compaction(
    storage: Storage,
    data_timeline: Timeline,
    threshold: int = DEFAULT_MAX_DELTA_COMMITS,
    timezone: str = "LOCAL",
    *,
    force: bool = False,
) -> str | None:
    """Write the plan of a metadata compaction when one is due (`force`: whenever there is a log to
    compact and nothing blocks); its instant time, or None. Call under the data table's lock."""
    _check_maintained_partitions(storage)
    mdt = mdt_timeline(storage)
    check = check_metadata_compaction(storage, data_timeline, threshold, mdt)
    if check.pending or not (check.due or (force and check.eligible > 0)):
        return None
    latest = max(filter(None, (mdt.latest_time(), data_timeline.latest_time())), default=None)
    instant_time = check.instant_time or new_instant_time(latest, timezone)
    if instant_time in {i.time for i in mdt.instants}:
        return None  # Hudi: a compaction of the same time exists already (an earlier attempt)
    return _request_compaction(storage, mdt, instant_time)


def _request_compaction(storage: Storage, mdt: Timeline, instant_time: str, *, every_group: bool = False) -> str | None:
    """Write the requested compaction plan at `instant_time`; its time, or None when it has nothing to compact."""
    plan = plan_metadata_compaction(storage, mdt, instant_time, every_group=every_group)
    if not plan.operations:
        return None
    create_requested(metadata_storage(storage), instant_time, Action.COMPACTION, plan.to_bytes(), mdt.layout)
    return instant_time


def schedule_rebasing_metadata_compaction(
    storage: Storage, data_timeline: Timeline, timezone: str = "LOCAL"
) -> str | None:
    """Plan a metadata compaction at a new instant time that rewrites the latest slice of every file group,
    logs or not; its instant time, or None when the metadata table has no file group. Call under the
    data table's lock, with no data-table instant pending.

    Why: on version 6 a metadata compaction is named `<delta commit>001` (Hudi 0.x). Hudi 1.x names them
    with new instant times, and hudi-rs, which lists files through the metadata table from version 8
    on, does not take a base file of a 20-digit instant as a file slice: after an upgrade it listed the
    files of the slice before the first compaction (a row of the first commit came back). An upgrade
    from 6 therefore ends the metadata table's version 6 history with one compaction of the new kind.
    """
    _check_maintained_partitions(storage)
    mdt = mdt_timeline(storage)
    latest = max(filter(None, (mdt.latest_time(), data_timeline.latest_time())), default=None)
    instant_time = new_instant_time(latest[:17] if latest else None, timezone)
    return _request_compaction(storage, mdt, instant_time, every_group=True)


@dataclass(frozen=True)
class MetadataCompactionResult:
    """What one metadata compaction wrote."""

    instant_time: str
    #: Base files written, relative to the metadata table's base path.
    base_files: tuple[str, ...]
    #: Log files folded into them.
    log_files: int
    #: Records (keys) written.
    records: int


def _record(key: str, files: Mapping[str, Any], file_name: str) -> dict[str, Any]:
    kind = MetadataRecordType.ALL_PARTITIONS if key == ALL_PARTITIONS_KEY else MetadataRecordType.FILE_LIST
    return {
        "_hoodie_file_name": file_name,
        "key": "",
        "type": int(kind),
        "filesystemMetadata": {n: {"size": i.size, "isDeleted": False} for n, i in files.items() if not i.deleted},
    }


def compacted_cells(merged: MergedFiles, file_name: str) -> list[tuple[str, bytes]]:
    """The cells of a compacted `files` base HFile: one record per key, tombstones dropped, key order."""
    return [(key, encode_record(_record(key, merged[key], file_name))) for key in sorted(merged, key=str.encode)]


def _compact_operation(
    storage: Storage, mdt: Timeline, instant_time: str, op: CompactionOperation, deflate_level: int
) -> tuple[WriteStat, int]:
    started = time.monotonic()
    mdt_storage = metadata_storage(storage)
    completion = slice_times(mdt)
    file_slice = op.file_slice()
    base_path = file_slice.base_file.path if file_slice.base_file is not None else None
    log_paths = [
        f.path
        for f in sorted(
            file_slice.log_files, key=lambda f: (completion.get(f.base_instant_time, ""), f.version, f.write_token)
        )
    ]
    name = f"{op.file_id}_{BASE_WRITE_TOKEN}_{instant_time}.hfile"
    path = posixpath.join(op.partition_path, name)
    bloom = None
    if op.partition_path in _NEWEST_WINS_PARTITIONS:
        cells, bloom = merge_record_index_slice(mdt_storage, base_path, log_paths, completion, name)
    elif op.partition_path in STATS_PARTITIONS:  # column_stats, partition_stats
        cells = merge_stats_slice(mdt_storage, base_path, log_paths, completion, name)
    else:
        cells = compacted_cells(merge_files_slice(mdt_storage, base_path, log_paths, completion), name)
    data = write_base_hfile(cells, HFILE_SCHEMA_JSON, bloom=bloom, deflate_level=deflate_level)
    create_marker(mdt_storage, instant_time, op.partition_path, name, "CREATE")
    mdt_storage.write_bytes(path, data)  # a rerun rewrites the same bytes (same plan, same inputs)
    log_size = sum(_size(mdt_storage, f.path) for f in file_slice.log_files)
    stat = WriteStat(
        fileId=op.file_id,
        path=path,
        prevCommit=op.base_instant_time,
        numWrites=len(cells),
        numInserts=len(cells),
        totalWriteBytes=len(data),
        partitionPath=op.partition_path,
        totalLogFilesCompacted=len(op.log_file_names),
        totalLogSizeCompacted=log_size,
        totalLogBlocks=len(op.log_file_names),
        fileSizeInBytes=len(data),
        runtimeStats={
            "totalScanTime": 0,
            "totalCreateTime": int((time.monotonic() - started) * 1000),
            "totalUpsertTime": 0,
        },
    )
    return stat, len(cells)


def _size(storage: Storage, path: str) -> int:
    try:
        return storage.size(path)
    except (OSError, FileNotFoundError):
        return 0


def execute_metadata_compaction(
    storage: Storage,
    instant_time: str,
    timezone: str = "LOCAL",
    completing: Callable[[], AbstractContextManager[None]] = nullcontext,
    *,
    deflate_level: int = DEFAULT_METADATA_COMPACTION_DEFLATE_LEVEL,
) -> MetadataCompactionResult:
    """Run the metadata compaction planned at `instant_time` to completion (again, if a run died).

    Idempotent: a completed compaction returns what it wrote; an inflight one is run again
    from its immutable plan. Call under the data table's lock (no metadata delta commit races it).
    `completing` is entered around the instant's completion alone, once the new base files are
    written (the table service's completion scope: `TableContext.completing`).
    `deflate_level`: of the new base files' GZ blocks (`lakeward.metadata.compact.deflate.level`).
    """
    _check_maintained_partitions(storage)
    mdt_storage = metadata_storage(storage)
    version = metadata_table_version(mdt_storage)
    mdt = load_metadata_timeline(mdt_storage, version.timeline_layout)
    state = mdt.state_of(instant_time, Action.COMPACTION)
    plan = read_compaction_plan(mdt_storage, instant_time, mdt.layout) if state is not None else None
    if state is None or plan is None:
        raise MetadataTableError(
            f"no metadata-table compaction {instant_time} on {storage.uri}; "
            f"pending: {pending_metadata_compactions(storage, mdt)}"
        )
    if state is State.COMPLETED:
        names = tuple(
            posixpath.join(op.partition_path, f"{op.file_id}_{BASE_WRITE_TOKEN}_{instant_time}.hfile")
            for op in plan.operations
        )
        return MetadataCompactionResult(instant_time, names, sum(len(op.log_file_names) for op in plan.operations), 0)
    requested = Instant(instant_time, Action.COMPACTION, State.REQUESTED, layout=mdt.layout)
    inflight = (
        transition_to_inflight(mdt_storage, requested)
        if state is State.REQUESTED
        else requested.with_state(State.INFLIGHT)
    )
    stats, records = [], 0
    for op in plan.operations:
        stat, n = _compact_operation(storage, mdt, instant_time, op, deflate_level)
        stats.append(stat)
        records += n
    metadata = CommitMetadata(extraMetadata={"schema": COMMIT_SCHEMA_JSON}, operationType=COMPACT, compacted=True)
    for stat in stats:
        metadata.partitionToWriteStats.setdefault(stat.partitionPath, []).append(stat)
    with completing():
        complete(mdt_storage, inflight, metadata.to_bytes(version.metadata_encoding), timezone)
    delete_markers_of_completed(mdt_storage, instant_time)
    return MetadataCompactionResult(
        instant_time, tuple(s.path for s in stats), sum(len(op.log_file_names) for op in plan.operations), records
    )


__all__ = [
    "DEFAULT_MAX_DELTA_COMMITS",
    "MAX_DELTA_COMMITS_KEY",
    "MetadataCompactionCheck",
    "MetadataCompactionResult",
    "blocking_instant",
    "check_metadata_compaction",
    "compacted_cells",
    "delta_commits_since_compaction",
    "execute_metadata_compaction",
    "last_metadata_compaction",
    "mdt_timeline",
    "pending_metadata_compactions",
    "plan_metadata_compaction",
    "schedule_metadata_compaction",
    "schedule_rebasing_metadata_compaction",
]
