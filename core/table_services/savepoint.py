"""Savepoints and restore.

- `savepoint`: `<t>.savepoint.inflight` (empty) then `<t>.savepoint` (`HoodieSavepointMetadata`)
  at the time `<t>` of a completed write, listing per partition the files of every file slice
  a read as of `<t>` uses (Hudi lists base files; lakeward lists the slices' log files too, so
  merge-on-read savepoints are whole). Cleaning never deletes a listed file, and reads as of a
  savepointed instant keep working after cleaning.
- `restore`: a restore instant (`<r>.restore.requested` with `HoodieRestorePlan`, `.inflight`,
  then `<r>.restore` with `HoodieRestoreMetadata`) rolls back every write and compaction after
  the savepoint, newest first, completed or pending. Rolling back an instant removes its
  completed timeline file first (readers then see the instant before it), then the data files
  it wrote (its write stats, markers, and base files named with its time), then its requested
  and inflight files. As in Hudi, these rollbacks are recorded inside the restore metadata, not
  as rollback instants. Every step is idempotent; a killed restore is finished by running it again.
  Savepoints after the restored one are deleted (their instants are gone).
- `delete_savepoint`: removes `<t>.savepoint` and its inflight file.

On table versions 8+ every instant is in `.hoodie/timeline/` and completed ones are named
`<t>_<c>.<action>` (timeline layout 2): the instants are taken from the loaded timeline, and a
restore also rolls back pending clusterings (their own `clustering` action there).
"""

from __future__ import annotations

import getpass
import logging
import posixpath
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.check import restore_change
from lakeward.core.metadata_table.record_index_writer import drop_record_index
from lakeward.core.metadata_table.writer import apply_change
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.retention import oldest_readable_instant, savepoints
from lakeward.core.table_services.rollback import _files_written
from lakeward.core.timeline import METAFOLDER, Action, CommitMetadata, Instant, State, Timeline, avro_plans
from lakeward.core.timeline import new_instant_time as _new_instant_time
from lakeward.core.timeline.transitions import (
    complete,
    create_requested,
    instant_path,
    read_instant,
    transition_to_inflight,
)
from lakeward.core.write.markers import delete_markers, list_markers, log_file_written_by

if TYPE_CHECKING:
    from lakeward.core.context import HoldsTableContext

log = logging.getLogger(__name__)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in some containers
        return "lakeward"


# -- savepoints (`savepoints(timeline)` lists them; it lives with the retention rules) ---------


def savepoint(table: HoldsTableContext, instant_time: str, user: str | None = None, comment: str = "") -> str:
    """Savepoint the completed write at `instant_time`; returns the instant time."""
    ctx = table.table_context
    storage = ctx.storage
    with ctx.lock:
        timeline = ctx.timeline()
        if instant_time not in timeline.completed_write_times():
            raise InstantNotFoundError(f"cannot savepoint {instant_time}: it is not a completed write of {storage.uri}")
        if instant_time in savepoints(timeline):
            raise InstantExistsError(f"instant {instant_time} is already savepointed")
        oldest = oldest_readable_instant(storage, timeline)
        if oldest is not None and instant_time < oldest:
            raise InstantNotFoundError(
                f"cannot savepoint {instant_time}: it is no longer retained (cleaned); the oldest readable "
                f"instant is {oldest}"
            )
        view = FileSystemView.load(storage, timeline)
        files: dict[str, list[str]] = defaultdict(list)
        for s in view.latest_file_slices(as_of=instant_time):
            if s.base_file is not None:
                files[s.partition_path].append(s.base_file.name)
            files[s.partition_path].extend(f.name for f in s.log_files)
        metadata = {
            "savepointedBy": user or _user(),
            "savepointedAt": int(time.time()),
            "comments": comment,
            "partitionMetadata": {
                p: {"partitionPath": p, "savepointDataFile": sorted(names)} for p, names in sorted(files.items())
            },
            "version": 1,
        }
        inflight = Instant(instant_time, Action.SAVEPOINT, State.INFLIGHT, layout=ctx.layout)
        ctx.lock.ensure_held()  # a ZooKeeper session that expired meanwhile: write nothing
        storage.write_bytes(instant_path(inflight), b"")
        content = avro_plans.serialize(avro_plans.SAVEPOINT_METADATA, metadata)
        complete(storage, inflight, content, ctx.config.timeline_timezone)
        log.info("savepointed %s (%d file(s))", instant_time, sum(len(v) for v in files.values()))
        return instant_time


def delete_savepoint(table: HoldsTableContext, instant_time: str) -> None:
    ctx = table.table_context
    storage = ctx.storage
    with ctx.lock:
        timeline = ctx.timeline()
        if timeline.state_of(instant_time, Action.SAVEPOINT) is None:
            raise InstantNotFoundError(f"no savepoint at {instant_time} in {storage.uri}")
        for interrupted in pending_restores(timeline):  # it may be restoring to this savepoint: finish it first
            resume_restore(storage, interrupted, ctx.config.timeline_timezone, ctx.lock.confirmed)
            timeline = ctx.timeline()
        ctx.lock.ensure_held()
        _drop_savepoint(storage, timeline, instant_time)
        log.info("deleted savepoint %s", instant_time)


def _drop_savepoint(storage: Storage, timeline: Timeline, instant_time: str) -> None:
    """Delete savepoint `instant_time`'s completed file (named as `timeline` lists it), then its inflight file."""
    for instant in timeline.find(instant_time):
        if instant.action is Action.SAVEPOINT and instant.is_completed:
            storage.delete_file(instant_path(instant))
    storage.delete_file(instant_path(Instant(instant_time, Action.SAVEPOINT, State.INFLIGHT, layout=timeline.layout)))


# -- restore ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class RestoreResult:
    restore_instant_time: str
    savepoint_instant_time: str
    rolled_back: tuple[str, ...]
    deleted_files: tuple[str, ...]

    def __str__(self) -> str:
        return self.restore_instant_time


_ROLLED_BACK = (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)


def instants_after(timeline: Timeline, savepoint_time: str) -> list[Instant]:
    """Writes and compactions after the savepoint (completed or pending), newest first."""
    found = [
        i
        for i in timeline.instants
        if i.time > savepoint_time and i.action.completed_action in _ROLLED_BACK and i.action is not Action.SAVEPOINT
    ]
    return sorted(found, key=lambda i: i.time, reverse=True)


def _info(timeline: Timeline, instant: Instant) -> dict[str, str]:
    action = instant.action
    if instant.is_completed and timeline.was_compaction(instant.time):
        action = Action.COMMIT
    return {"commitTime": instant.time, "action": action.value}


def restore_targets(storage: Storage, restore: Instant) -> list[str]:
    """The times of the instants a restore rolls back: from its completed metadata (which the LSM
    history keeps once archived, when the plan's file is gone), else from its plan."""
    if restore.is_completed:
        metadata = avro_plans.deserialize(read_instant(storage, restore), restore.file_name)
        return [str(t) for t in metadata.get("instantsToRollback") or []]
    requested = restore.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    return [str(i["commitTime"]) for i in plan.get("instantsToRollback") or []]


def pending_restores(timeline: Timeline) -> list[Instant]:
    return timeline.pending(Action.RESTORE)


def check_savepoint(storage: Storage, timeline: Timeline, savepoint_time: str) -> None:
    """InstantNotFoundError unless `savepoint_time` is a savepoint on `timeline` (what a restore goes back to)."""
    if savepoint_time not in savepoints(timeline):
        raise InstantNotFoundError(
            f"no savepoint at {savepoint_time} in {storage.uri}; savepoints: {savepoints(timeline) or 'none'}"
        )


def restore(table: HoldsTableContext, savepoint_time: str) -> RestoreResult:
    """Roll the table back to the savepoint at `savepoint_time` (a pending restore is finished first)."""
    ctx = table.table_context
    storage, config = ctx.storage, ctx.config
    timezone = config.timeline_timezone
    with ctx.lock:
        timeline = ctx.timeline()
        resumed = None
        for interrupted in pending_restores(timeline):
            resumed = resume_restore(storage, interrupted, timezone, ctx.lock.confirmed)
            timeline = ctx.timeline()
        check_savepoint(storage, timeline, savepoint_time)
        targets = instants_after(timeline, savepoint_time)
        if not targets and resumed is not None and resumed.savepoint_instant_time == savepoint_time:
            return resumed  # the interrupted restore was this one
        plan = {"instantsToRollback": [_info(timeline, i) for i in targets], "version": 1}
        restore_time = _new_instant_time(timeline.latest_time(), timezone)
        ctx.lock.ensure_held()  # a ZooKeeper session that expired meanwhile: undo nothing
        requested = create_requested(
            storage, restore_time, Action.RESTORE, avro_plans.serialize(avro_plans.RESTORE_PLAN, plan), ctx.layout
        )
        inflight = transition_to_inflight(storage, requested)
        return _execute(storage, inflight, savepoint_time, timezone, ctx.lock.confirmed)


def resume_restore(
    storage: Storage,
    restore_instant: Instant,
    timezone: str = "LOCAL",
    completing: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> RestoreResult:
    """Finish an interrupted restore from its plan (each rollback step is idempotent).

    `timezone`: the table's timeline time zone, for the completion time on layout 2. `completing`:
    entered around the restore's completion (the table lock's `confirmed` scope).
    """
    requested = restore_instant.with_state(State.REQUESTED)
    inflight = restore_instant.with_state(State.INFLIGHT)
    if restore_instant.state is State.REQUESTED:
        inflight = transition_to_inflight(storage, requested)
    return _execute(storage, inflight, None, timezone, completing)


def _execute(
    storage: Storage,
    inflight: Instant,
    savepoint_time: str | None,
    timezone: str,
    completing: Callable[[], AbstractContextManager[None]],
) -> RestoreResult:
    started = time.monotonic()
    layout = inflight.layout
    timeline = Timeline.load(storage, layout)
    requested = inflight.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    infos: list[dict[str, str]] = list(plan.get("instantsToRollback") or [])
    if savepoint_time is None:  # resumed: the savepoint is the latest one before the first rolled-back instant
        oldest = min((i["commitTime"] for i in infos), default=inflight.time)
        savepoint_time = max((t for t in savepoints(timeline) if t < oldest), default="")
    listing = _data_listing(storage)
    rollbacks: dict[str, list[dict[str, Any] | None]] = {}
    deleted: list[str] = []
    for info in sorted(infos, key=lambda i: i["commitTime"], reverse=True):
        metadata, files = _roll_back(storage, inflight.time, info, listing, timeline)
        rollbacks[info["commitTime"]] = [metadata]
        deleted.extend(files)
    timeline = Timeline.load(storage, layout)
    for later in savepoints(timeline):
        if savepoint_time and later > savepoint_time:
            _drop_savepoint(storage, timeline, later)
    metadata = {
        "startRestoreTime": inflight.time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "instantsToRollback": [i["commitTime"] for i in infos],
        "hoodieRestoreMetadata": rollbacks,
        "version": 1,
        "restoreInstantInfo": infos,
    }
    # the record index is not restored (Hudi restores the whole metadata table): dropped, so that
    # no lookup trusts keys of the rolled-back instants; a writer that enables it builds it again
    with completing():
        drop_record_index(storage, f"restore {inflight.time} does not roll it back; it is rebuilt when enabled again")
        # the metadata table: one delta commit of the restore's time, from a listing (as Hudi)
        apply_change(storage, timezone, inflight.time, lambda: restore_change(storage, layout))
        try:
            complete(storage, inflight, avro_plans.serialize(avro_plans.RESTORE_METADATA, metadata), timezone)
        except InstantExistsError:
            pass
    log.info("restore %s rolled back %d instant(s), %d file(s)", inflight.time, len(infos), len(deleted))
    return RestoreResult(inflight.time, savepoint_time or "", tuple(i["commitTime"] for i in infos), tuple(deleted))


#: The pending actions that complete as each rolled-back action (services completing as writes).
_PENDING_AS = {
    Action.COMMIT: (Action.COMPACTION,),
    Action.DELTA_COMMIT: (Action.LOG_COMPACTION,),
    Action.REPLACE_COMMIT: (Action.CLUSTERING,),
}


def _timeline_files(time_: str, action: Action, timeline: Timeline) -> tuple[Instant, list[Instant]]:
    """The completed instant of `time_` (named as `timeline` lists it on layout 2) and the pending ones."""
    family = action.completed_action
    layout = timeline.layout
    pending_actions = {family, *_PENDING_AS.get(family, ())}
    pending = [Instant(time_, a, s, layout=layout) for a in pending_actions for s in (State.INFLIGHT, State.REQUESTED)]
    listed = [i for i in timeline.find(time_) if i.is_completed and i.action is family]
    return (listed[0] if listed else Instant(time_, family, State.COMPLETED, layout=layout)), pending


def _files_to_delete(storage: Storage, info: dict[str, str], listing: list[str], timeline: Timeline) -> list[str]:
    """The data files undoing one instant of a restore deletes (those that exist), sorted; deletes nothing."""
    t = info["commitTime"]
    completed, pending = _timeline_files(t, Action(info["action"]), timeline)
    files: set[str] = set()
    if storage.exists(instant_path(completed)):
        meta = CommitMetadata.from_bytes(read_instant(storage, completed), completed.file_name)
        for stat in meta.write_stats():
            for path in stat.files():
                if parse_log_file_name(posixpath.basename(path)) is None or log_file_written_by(storage, path, t):
                    files.add(path)
    elif any(storage.exists(instant_path(p)) for p in pending) or list_markers(storage, t):
        state = next((p for p in pending if storage.exists(instant_path(p))), pending[0])
        files.update(_files_written(storage, state))
    for path in listing:
        parsed = parse_base_file_name(posixpath.basename(path))
        if parsed is not None and parsed.instant_time == t:
            files.add(path)
    return sorted(p for p in files if storage.exists(p))


def _data_listing(storage: Storage) -> list[str]:
    """Every data file of the table (outside `.hoodie/`)."""
    return [
        e.path for e in storage.list_dir("", recursive=True) if not e.is_dir and not e.path.startswith(METAFOLDER + "/")
    ]


def preview_restore(table: HoldsTableContext, savepoint_time: str) -> RestoreResult:
    """What `restore` to the savepoint would undo now, changing nothing (a dry run): the instants it
    rolls back (newest first) and the data files it deletes; `restore_instant_time` is empty.

    A pending restore is finished first by a real restore: its instants are not listed here.
    """
    ctx = table.table_context
    storage = ctx.storage
    timeline = ctx.timeline()
    check_savepoint(storage, timeline, savepoint_time)
    infos = [_info(timeline, i) for i in instants_after(timeline, savepoint_time)]
    listing = _data_listing(storage)
    files = [
        f
        for info in sorted(infos, key=lambda i: i["commitTime"], reverse=True)
        for f in _files_to_delete(storage, info, listing, timeline)
    ]
    return RestoreResult("", savepoint_time, tuple(i["commitTime"] for i in infos), tuple(files))


def _roll_back(
    storage: Storage, restore_time: str, info: dict[str, str], listing: list[str], timeline: Timeline
) -> tuple[dict[str, Any], list[str]]:
    """Undo one instant of a restore; returns its HoodieRollbackMetadata and the files deleted."""
    started = time.monotonic()
    t = info["commitTime"]
    completed, pending = _timeline_files(t, Action(info["action"]), timeline)
    existing = _files_to_delete(storage, info, listing, timeline)
    if storage.exists(instant_path(completed)):
        storage.delete_file(instant_path(completed))  # readers now see the instant before it
    for path in existing:
        storage.delete_file(path)
    for p in pending:
        storage.delete_file(instant_path(p))
    delete_markers(storage, t)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in existing:
        by_partition[posixpath.dirname(path)].append(path)
    metadata = {
        "startRollbackTime": restore_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": len(existing),
        "commitsRollback": [t],
        "partitionMetadata": {
            partition: {
                "partitionPath": partition,
                "successDeleteFiles": [storage.full_path(p) for p in paths],
                "failedDeleteFiles": [],
                "rollbackLogFiles": None,
                "logFilesFromFailedCommit": {
                    storage.full_path(p): -1 for p in paths if parse_log_file_name(posixpath.basename(p))
                }
                or None,
            }
            for partition, paths in sorted(by_partition.items())
        },
        "version": 1,
        "instantsRollback": [info],
    }
    return metadata, existing
