"""Rollback of a failed (pending) write instant, from its markers, recorded as a rollback instant.

Plan (`HoodieRollbackPlan` in `<r>.rollback.requested`), execution (delete the data files
the failed instant wrote), then the completed `<r>.rollback` (`HoodieRollbackMetadata`)
and removal of the failed instant's timeline files. Every step is idempotent, so a
rollback interrupted at any point can simply be run again.

Merge-on-read: a failed deltacommit's log files are found through its APPEND markers,
which name the exact log file versions it created. Every append writes a new log file
version, whole, holding only that instant's blocks, so those files are deleted (as Hudi
1.x does; Hudi 0.14/0.15 appends a rollback command block instead, which readers treat
the same). A file is deleted only if every block in it carries the failed instant's time;
a marker whose version was taken by another writer names someone else's file, which is
left alone. The plan has one `HoodieRollbackRequest` per file group with log files
(`fileId`, `latestBaseInstant` = the slice's base instant, `filesToBeDeleted`); the
metadata lists them in `successDeleteFiles` and `logFilesFromFailedCommit` (path -> size).

A rollback of a pending instant never removes one that completed: a writer that loaded the
timeline while another process's write was in flight may only get to roll it back after it
completed. So the target's state is checked again right before anything is deleted (after
the plan exists), and a rollback whose target completed stops (`RollbackAbortedError`),
drops its plan and deletes nothing. The same holds when an interrupted rollback is resumed:
only an explicit rollback of a completed instant (`rollback_completed_instant`) removes one.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections import defaultdict
from dataclasses import dataclass

from lakeward.core.exceptions import InstantExistsError, MetadataTableError, RollbackAbortedError
from lakeward.core.file_group.log_file.reader import block_instant_times
from lakeward.core.file_group.metadata_listing import (
    keeps_metadata_table,
    load_metadata_timeline,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.file_group.naming import LogFileName, parse_base_file_name, parse_log_file_name
from lakeward.core.index.secondary.storage import delete_instant_index_files
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout, rules_for_layout
from lakeward.core.timeline import METAFOLDER, Action, Instant, State, Timeline, avro_plans, new_instant_time
from lakeward.core.timeline.clustering_plan import clustering_plan_of
from lakeward.core.timeline.transitions import (
    complete,
    create_requested,
    delete_pending_files,
    instant_path,
    read_commit_metadata,
    read_instant,
    transition_to_inflight,
)
from lakeward.core.write.markers import (
    delete_markers_of_completed,
    holds_only_blocks_of,
    list_markers,
    log_file_written_by,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RollbackResult:
    rollback_instant_time: str
    rolled_back_instant_time: str
    deleted_files: tuple[str, ...]


def _files_written(storage: Storage, instant: Instant) -> list[str]:
    """Data files of a failed instant: its markers, else base files named with its time (and,
    for a deltacommit, log files whose blocks are all of the instant: every log file is read).

    Log files (APPEND markers) only when they exist and hold the instant's blocks alone.
    """
    markers = list_markers(storage, instant.time)
    if markers:
        appended = {m.data_path for m in markers if m.io_type == "APPEND"}
        own = {p for p in appended if log_file_written_by(storage, p, instant.time)}
        _warn_of_shared_logs(storage, instant, sorted(appended - own))
        return sorted({m.data_path for m in markers if m.io_type != "APPEND"} | own)
    log.warning(
        "instant %s has no markers; rolling back by listing base files named with it and log files "
        "holding only its blocks",
        instant.time,
    )
    found = []
    for entry in storage.list_dir("", recursive=True):
        if entry.is_dir or entry.path.startswith(METAFOLDER + "/"):
            continue
        parsed = parse_base_file_name(entry.name)
        if parsed is not None and parsed.instant_time == instant.time:
            found.append(entry.path)
        elif (
            instant.action is Action.DELTA_COMMIT
            and _log_file(entry.path) is not None
            and holds_only_blocks_of(storage, entry.path, instant.time)
        ):
            found.append(entry.path)  # log names carry the base instant: read the blocks' instants
    return sorted(found)


def _warn_of_shared_logs(storage: Storage, instant: Instant, paths: list[str]) -> None:
    """Warn of log files that hold the failed instant's blocks beside other instants' (a Hudi 0.x
    writer appending, as on HDFS): they stay, since rolling those blocks back takes a rollback command
    block, which lakeward does not write. Readers skip the blocks while the instant is newer than the
    active timeline; once archival passes it, a v6 reader takes them for committed (Hudi's rule)."""
    shared = [p for p in paths if instant.time in (block_instant_times(storage, p) or set())]
    if shared:
        log.warning(
            "rolling back %s leaves its log blocks in %s, which hold other commits' blocks too: lakeward "
            "writes no rollback command block; roll the instant back with Apache Hudi before archival "
            "passes it, or compact and clean those file slices",
            instant,
            shared,
        )


def _completed(storage: Storage, instant_time: str, action: Action, layout: TimelineLayout) -> bool:
    """Whether the instant completed by now (on storage, not in a loaded timeline).

    Layout 2 names a completed file with its completion time, so the timeline is listed.
    """
    if layout.completion_time_in_name:
        return Timeline.load(storage, layout).state_of(instant_time, action) is State.COMPLETED
    return storage.exists(instant_path(Instant(instant_time, action, State.COMPLETED)))


def _abort_if_completed(
    storage: Storage, instant_time: str, action: Action, rollback_time: str | None, layout: TimelineLayout
) -> None:
    """Raise RollbackAbortedError if the target completed; first drop the rollback's own plan, if any."""
    if not _completed(storage, instant_time, action, layout):
        return
    if rollback_time is not None:
        delete_pending_files(storage, rollback_time, Action.ROLLBACK, layout)
    log.warning("not rolling back %s %s: it completed meanwhile (its writer was alive)", action.value, instant_time)
    raise RollbackAbortedError(
        f"{action.value} {instant_time} completed while it was about to be rolled back as a failed write; "
        "nothing was deleted"
    )


def rollback_pending_instant(
    storage: Storage, instant: Instant, rollback_time: str, timezone: str = "LOCAL"
) -> RollbackResult:
    """Undo a pending write instant so that no trace of it stays visible or on disk.

    The rollback instant goes to the instant's own timeline layout (`instant.layout`);
    `timezone` is the table's timeline time zone, for the completion time on layout 2.
    Raises RollbackAbortedError, having deleted nothing, if the instant turns out to have
    completed (the caller's view of the timeline was older than its completion).
    """
    if instant.is_completed:
        raise ValueError(f"{instant} is completed; only pending instants are rolled back here")
    layout = instant.layout
    _abort_if_completed(storage, instant.time, instant.action, None, layout)
    started = time.monotonic()
    files = rollback_files(storage, instant)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_partition[posixpath.dirname(path)].append(path)
    log_sizes = {path: storage.size(path) for path in files if _log_file(path) is not None}
    instant_info = {"commitTime": instant.time, "action": instant.action.value}
    plan = {
        "instantToRollback": instant_info,
        "RollbackRequests": _rollback_requests(storage, by_partition),
        "version": 1,
    }
    requested = create_requested(
        storage, rollback_time, Action.ROLLBACK, avro_plans.serialize(avro_plans.ROLLBACK_PLAN, plan), layout
    )
    inflight = transition_to_inflight(storage, requested)
    # Right before deleting: a writer that was alive may have completed since the listing above.
    _abort_if_completed(storage, instant.time, instant.action, rollback_time, layout)
    for path in files:
        storage.delete_file(path)
    delete_instant_index_files(storage, instant.time)  # secondary index files the instant wrote
    delete_pending_files(storage, instant.time, instant.action, layout)
    _complete_rollback(
        storage, inflight, instant_info, by_partition, int((time.monotonic() - started) * 1000), log_sizes, timezone
    )
    delete_markers_of_completed(storage, instant.time)  # the rollback completed
    log.info("rolled back %s (%d file(s)) at %s", instant, len(files), rollback_time)
    return RollbackResult(rollback_time, instant.time, tuple(files))


def _log_file(path: str) -> LogFileName | None:
    return parse_log_file_name(posixpath.basename(path))


def _rollback_requests(storage: Storage, by_partition: dict[str, list[str]]) -> list[dict[str, object]]:
    """One request per partition for its base files, one per file group for its log files (as Hudi)."""
    requests: list[dict[str, object]] = []
    for partition, paths in sorted(by_partition.items()):
        bases = [p for p in paths if _log_file(p) is None]
        if bases:
            requests.append(
                {
                    "partitionPath": partition,
                    "fileId": "",
                    "latestBaseInstant": "",
                    "filesToBeDeleted": [storage.full_path(p) for p in bases],
                    "logBlocksToBeDeleted": {},
                }
            )
        logs: dict[tuple[str, str], list[str]] = defaultdict(list)
        for path in paths:
            parsed = _log_file(path)
            if parsed is not None:
                logs[(parsed.file_id, parsed.base_instant_time)].append(path)
        for (file_id, base_instant), log_paths in sorted(logs.items()):
            requests.append(
                {
                    "partitionPath": partition,
                    "fileId": file_id,
                    "latestBaseInstant": base_instant,
                    "filesToBeDeleted": [storage.full_path(p) for p in sorted(log_paths)],
                    "logBlocksToBeDeleted": {},
                }
            )
    return requests


def failed_writes(timeline: Timeline, exclude: set[str] | None = None, storage: Storage | None = None) -> list[Instant]:
    """Pending commit/deltacommit/replacecommit instants: with the EAGER policy, failed writes.

    With `storage`, a pending clustering (a replacecommit whose requested file holds a
    clustering plan) is not a failed write: as in Hudi, a writer never rolls it back; the
    plan stays until `run_clustering` executes it.
    """
    exclude = exclude or set()
    found = [i for i in timeline.pending_writes() if i.time not in exclude]
    if storage is None:
        return found
    return [
        i
        for i in found
        if i.action is not Action.REPLACE_COMMIT or clustering_plan_of(storage, i.time, timeline.layout) is None
    ]


def rollback_files(storage: Storage, instant: Instant) -> list[str]:
    """The data files rolling back `instant` deletes, sorted: of a completed instant those its commit
    metadata lists (log files only when they hold its blocks alone), of a pending one those it wrote."""
    if not instant.is_completed:
        return _files_written(storage, instant)
    stats = read_commit_metadata(storage, instant).write_stats()
    return sorted(
        {
            path
            for stat in stats
            for path in stat.files()
            if _log_file(path) is None or log_file_written_by(storage, path, instant.time)
        }
    )


def rollback_completed_instant(
    storage: Storage, instant: Instant, rollback_time: str, timezone: str = "LOCAL"
) -> RollbackResult:
    """Undo a completed write or service commit: a rollback instant whose plan lists every file it wrote.

    The plan is written first, so a rollback that dies part-way is finished by `resume_rollback`.
    `timezone`: the table's timeline time zone, for the completion time on layout 2.
    """
    if not instant.is_completed:
        raise ValueError(f"{instant} is pending; use rollback_pending_instant")
    check_metadata_rollback(storage, instant.time)
    shared = _logs_shared_with_other_instants(storage, instant)
    if shared:
        raise RollbackAbortedError(
            f"cannot roll back {instant.action.value} {instant.time}: its log blocks share {shared[0]} with "
            "other commits' blocks (a Hudi 0.x writer appended them to one log file, as on HDFS), and undoing "
            "them takes a rollback command block, which lakeward does not write; nothing was changed. Roll it "
            "back with Apache Hudi, or restore a savepoint from before it"
        )
    files = rollback_files(storage, instant)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_partition[posixpath.dirname(path)].append(path)
    plan = {
        "instantToRollback": {"commitTime": instant.time, "action": instant.action.value},
        "RollbackRequests": _rollback_requests(storage, by_partition),
        "version": 1,
    }
    requested = create_requested(
        storage, rollback_time, Action.ROLLBACK, avro_plans.serialize(avro_plans.ROLLBACK_PLAN, plan), instant.layout
    )
    return resume_rollback(storage, requested, completed_target=True, timezone=timezone)


def _logs_shared_with_other_instants(storage: Storage, instant: Instant) -> list[str]:
    """Log files the completed delta commit's write stats list that hold other instants' blocks too."""
    if instant.action is not Action.DELTA_COMMIT:
        return []
    paths = {p for stat in read_commit_metadata(storage, instant).write_stats() for p in stat.files()}
    shared = []
    for path in sorted(paths):
        parsed = _log_file(path)
        if parsed is None or parsed.is_cdc:
            continue
        instants = block_instant_times(storage, path) or set()
        if instant.time in instants and len(instants) > 1:
            shared.append(path)
    return shared


def pending_rollbacks(timeline: Timeline) -> list[Instant]:
    """Rollbacks that were planned but never completed (their runner died)."""
    return timeline.pending(Action.ROLLBACK)


def rollback_target(storage: Storage, rollback: Instant) -> str:
    """The time of the instant a (pending) rollback's plan rolls back."""
    requested = rollback.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    return str(plan["instantToRollback"]["commitTime"])


def resume_rollback(
    storage: Storage, rollback: Instant, *, completed_target: bool = False, timezone: str = "LOCAL"
) -> RollbackResult:
    """Finish an interrupted rollback from its immutable plan (each step is idempotent).

    `completed_target`: the caller made the plan for a completed instant, under the table
    lock, just now (`rollback_completed_instant`). Otherwise a target that is completed is
    left alone: the plan cannot tell whether it was made for a completed instant (an
    explicit rollback that died before its first step) or for a then-pending one whose
    writer was alive and completed it, so it is dropped (RollbackAbortedError; nothing
    deleted; the first step of a completed target's rollback removes its completed file,
    so no data file is gone yet either way). Roll a completed instant back again with
    `Table.rollback`.
    """
    layout = rollback.layout
    if _completed(storage, rollback.time, Action.ROLLBACK, layout):
        # The caller's timeline is older: its runner was alive and finished it meanwhile.
        raise RollbackAbortedError(f"rollback {rollback.time} is already completed; nothing to resume")
    requested = rollback.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    target = plan["instantToRollback"]
    if not completed_target:
        _abort_if_completed(storage, target["commitTime"], Action(target["action"]), rollback.time, layout)
    prefix = storage.full_path("").rstrip("/") + "/"
    files = [
        f[len(prefix) :] if f.startswith(prefix) else f
        for request in plan.get("RollbackRequests") or []
        for f in request.get("filesToBeDeleted") or []
    ]
    # A completed target (an explicit rollback) disappears first: readers then see the instant before it.
    target_action = Action(target["action"])
    for completed in _completed_files(storage, target["commitTime"], target_action, layout):
        storage.delete_file(completed)
    for path in files:
        storage.delete_file(path)
    delete_instant_index_files(storage, target["commitTime"])  # secondary index files the instant wrote
    delete_pending_files(storage, target["commitTime"], target_action, layout)
    if target_action is Action.COMMIT:  # a completed compaction's requested and inflight files
        delete_pending_files(storage, target["commitTime"], Action.COMPACTION, layout)
    if target_action is Action.REPLACE_COMMIT and rules_for_layout(layout).clustering_action:
        delete_pending_files(storage, target["commitTime"], Action.CLUSTERING, layout)  # a completed clustering's
    inflight = rollback.with_state(State.INFLIGHT)
    if rollback.state is State.REQUESTED:
        inflight = transition_to_inflight(storage, requested)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_partition[posixpath.dirname(path)].append(path)
    # The files are gone by now: their sizes are unknown (Hudi stubs unknown log sizes as -1).
    log_sizes = {path: -1 for path in files if _log_file(path) is not None}
    try:
        _complete_rollback(storage, inflight, target, by_partition, 0, log_sizes, timezone)
    except InstantExistsError:
        # Another runner (without a lock shared with this one) finished the same plan meanwhile.
        log.info("rollback %s was completed by another runner", rollback.time)
    delete_markers_of_completed(storage, target["commitTime"])  # the rollback completed
    log.info("resumed rollback %s of %s", rollback.time, target["commitTime"])
    return RollbackResult(rollback.time, target["commitTime"], tuple(files))


def _complete_rollback(
    storage: Storage,
    inflight: Instant,
    instant_info: dict[str, str],
    by_partition: dict[str, list[str]],
    elapsed_ms: int,
    log_sizes: dict[str, int],
    timezone: str = "LOCAL",
) -> None:
    """`log_sizes`: log files of the failed instant (deleted too) -> size, for `logFilesFromFailedCommit`.

    The metadata table (when the table keeps one) is rolled back first, as Hudi does.
    """
    rollback_metadata_table(storage, instant_info["commitTime"], inflight.time, timezone)
    metadata = {
        "startRollbackTime": inflight.time,
        "timeTakenInMillis": elapsed_ms,
        "totalFilesDeleted": sum(len(v) for v in by_partition.values()),
        "commitsRollback": [instant_info["commitTime"]],
        "partitionMetadata": {
            partition: {
                "partitionPath": partition,
                "successDeleteFiles": [storage.full_path(p) for p in paths],
                "failedDeleteFiles": [],
                "rollbackLogFiles": None,
                "logFilesFromFailedCommit": {storage.full_path(p): log_sizes[p] for p in paths if p in log_sizes}
                or None,
            }
            for partition, paths in by_partition.items()
        },
        "version": 1,
        "instantsRollback": [instant_info],
    }
    complete(storage, inflight, avro_plans.serialize(avro_plans.ROLLBACK_METADATA, metadata), timezone)


def rollback_metadata_table(
    storage: Storage, target_time: str, rollback_time: str | None, timezone: str = "LOCAL"
) -> None:
    """Roll back the metadata table's delta commit `target_time` (if any) with a rollback `rollback_time`.

    As Hudi's `HoodieBackedTableMetadataWriter.update(HoodieRollbackMetadata)`: a data-table rollback
    of `T` rolls back the metadata table's delta commit `T` (completed or pending: its log files go)
    with a metadata rollback instant of the same time as the data table's; when the metadata table
    never got `T`, nothing happens. `rollback_time` None: a new time on the metadata timeline (the
    metadata writer undoing an earlier attempt of `T` before writing `T` again, as Hudi's does).
    Only tables whose `hoodie.properties` lists metadata partitions (so never a metadata table itself).

    A delta commit `T` a metadata compaction took (its files are in a base HFile now) cannot be
    undone by deleting its log file: such a rollback is refused before it starts
    (`check_metadata_rollback`, as Hudi does), and no other rollback reaches one (a metadata
    compaction never takes the delta commit of a data instant still pending); checked here again.
    """
    if not keeps_metadata_table(read_table_properties(storage)):
        return
    mdt = metadata_storage(storage)
    timeline = load_metadata_timeline(mdt)
    if rollback_time is None:
        rollback_time = new_instant_time(timeline.latest_time(), timezone)
    if timeline.state_of(rollback_time, Action.ROLLBACK) is State.COMPLETED:
        return  # done by an earlier attempt of this rollback
    pending_rollback = next((i for i in timeline.pending(Action.ROLLBACK) if i.time == rollback_time), None)
    if pending_rollback is not None:
        resume_rollback(mdt, pending_rollback, completed_target=True, timezone=timezone)
        return
    state = timeline.state_of(target_time, Action.DELTA_COMMIT)
    if state is State.COMPLETED:
        done = next(i for i in timeline.completed(Action.DELTA_COMMIT) if i.time == target_time)
        check_metadata_rollback(storage, target_time)
        rollback_completed_instant(mdt, done, rollback_time, timezone)
    elif state is not None:
        pending = next(i for i in timeline.pending() if i.time == target_time)
        rollback_pending_instant(mdt, pending, rollback_time, timezone)


def _compaction_of(mdt_timeline: Timeline, delta_commit: Instant) -> Instant | None:
    """The latest metadata compaction (completed or planned) that took `delta_commit`'s log files, if any."""
    completion = delta_commit.ordering_time
    taken = [i for i in mdt_timeline.instants if i.action in (Action.COMMIT, Action.COMPACTION) and i.time > completion]
    return taken[-1] if taken else None


def check_metadata_rollback(storage: Storage, target_time: str) -> None:
    """Refuse the rollback of data instant `target_time` when a metadata compaction took its completed
    metadata delta commit (MetadataTableError; call before anything is written).

    Hudi 1.x refuses it the same way (`HoodieBackedTableMetadataWriter.validateRollback`): the
    compacted base files hold the instant's files and record-index entries, and a rollback can
    only delete log files; a restore to a savepoint before the instant rebuilds the metadata
    table's view from a listing instead.
    """
    if not keeps_metadata_table(read_table_properties(storage)):
        return
    timeline = load_metadata_timeline(metadata_storage(storage))
    done = next((i for i in timeline.completed(Action.DELTA_COMMIT) if i.time == target_time), None)
    compaction = _compaction_of(timeline, done) if done is not None else None
    if done is None or compaction is None:
        return
    after = [i.time for i in timeline.completed(Action.DELTA_COMMIT) if i.time > compaction.time]
    raise MetadataTableError(
        f"cannot roll back {target_time} on {storage.uri}: the metadata table's compaction {compaction.time} "
        f"({compaction.state.value}) already took its metadata delta commit (there are {len(after)} delta "
        f"commit(s) after that compaction), so its files and record-index entries cannot be removed by a "
        "rollback, as in Hudi. Restore the table to a savepoint before it instead (Table.restore). Nothing was changed"
    )


def _completed_files(storage: Storage, instant_time: str, action: Action, layout: TimelineLayout) -> list[str]:
    """Paths of the completed file(s) of an instant: `<t>.<action>`, or on layout 2 `<t>_<c>.<action>`."""
    if not layout.completion_time_in_name:
        return [instant_path(Instant(instant_time, action, State.COMPLETED))]
    found = Timeline.load(storage, layout).completed(action.completed_action)
    return [instant_path(i) for i in found if i.time == instant_time]
