"""Rollback of a failed (pending) write instant, from its markers, recorded as a rollback instant.

Plan (`HoodieRollbackPlan` in `<r>.rollback.requested`), execution (delete the data files
the failed instant wrote), then the completed `<r>.rollback` (`HoodieRollbackMetadata`)
and removal of the failed instant's timeline files. Every step is idempotent, so a
rollback interrupted at any point can simply be run again.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections import defaultdict
from dataclasses import dataclass

from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER, Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.transitions import (
    complete,
    create_requested,
    delete_pending_files,
    read_instant,
    transition_to_inflight,
)
from lakeward.core.write.markers import delete_markers, list_markers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RollbackResult:
    rollback_instant_time: str
    rolled_back_instant_time: str
    deleted_files: tuple[str, ...]


def _files_written(storage: Storage, instant: Instant) -> list[str]:
    """Data files of a failed instant: its markers, else base files named with its time."""
    markers = list_markers(storage, instant.time)
    if markers:
        return sorted({m.data_path for m in markers})
    log.warning("instant %s has no markers; rolling back by listing files named with it", instant.time)
    found = []
    for entry in storage.list_dir("", recursive=True):
        if entry.is_dir or entry.path.startswith(METAFOLDER + "/"):
            continue
        parsed = parse_base_file_name(entry.name)
        if parsed is not None and parsed.instant_time == instant.time:
            found.append(entry.path)
    return sorted(found)


def rollback_pending_instant(storage: Storage, instant: Instant, rollback_time: str) -> RollbackResult:
    """Undo a pending write instant so that no trace of it stays visible or on disk."""
    if instant.is_completed:
        raise ValueError(f"{instant} is completed; only pending instants are rolled back here")
    started = time.monotonic()
    files = _files_written(storage, instant)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_partition[posixpath.dirname(path)].append(path)
    instant_info = {"commitTime": instant.time, "action": instant.action.value}
    plan = {
        "instantToRollback": instant_info,
        "RollbackRequests": [
            {
                "partitionPath": partition,
                "fileId": "",
                "latestBaseInstant": "",
                "filesToBeDeleted": [storage.full_path(p) for p in paths],
                "logBlocksToBeDeleted": {},
            }
            for partition, paths in sorted(by_partition.items())
        ],
        "version": 1,
    }
    requested = create_requested(
        storage, rollback_time, Action.ROLLBACK, avro_plans.serialize(avro_plans.ROLLBACK_PLAN, plan)
    )
    inflight = transition_to_inflight(storage, requested)
    for path in files:
        storage.delete_file(path)
    delete_pending_files(storage, instant.time, instant.action)
    _complete_rollback(storage, inflight, instant_info, by_partition, int((time.monotonic() - started) * 1000))
    delete_markers(storage, instant.time)
    log.info("rolled back %s (%d file(s)) at %s", instant, len(files), rollback_time)
    return RollbackResult(rollback_time, instant.time, tuple(files))


def failed_writes(timeline: Timeline, exclude: set[str] | None = None) -> list[Instant]:
    """Pending commit/deltacommit/replacecommit instants: with the EAGER policy, failed writes."""
    exclude = exclude or set()
    return [
        i
        for i in timeline.pending()
        if i.action in (Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT)
        and i.time not in exclude
        and i.state in (State.REQUESTED, State.INFLIGHT)
    ]


def pending_rollbacks(timeline: Timeline) -> list[Instant]:
    """Rollbacks that were planned but never completed (their runner died)."""
    return [i for i in timeline.pending() if i.action is Action.ROLLBACK]


def resume_rollback(storage: Storage, rollback: Instant) -> RollbackResult:
    """Finish an interrupted rollback from its immutable plan (each step is idempotent)."""
    requested = rollback.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    target = plan["instantToRollback"]
    prefix = storage.full_path("").rstrip("/") + "/"
    files = [
        f[len(prefix) :] if f.startswith(prefix) else f
        for request in plan.get("RollbackRequests") or []
        for f in request.get("filesToBeDeleted") or []
    ]
    for path in files:
        storage.delete_file(path)
    delete_pending_files(storage, target["commitTime"], Action(target["action"]))
    inflight = rollback.with_state(State.INFLIGHT)
    if rollback.state is State.REQUESTED:
        inflight = transition_to_inflight(storage, requested)
    by_partition: dict[str, list[str]] = defaultdict(list)
    for path in files:
        by_partition[posixpath.dirname(path)].append(path)
    _complete_rollback(storage, inflight, target, by_partition, 0)
    delete_markers(storage, target["commitTime"])
    log.info("resumed rollback %s of %s", rollback.time, target["commitTime"])
    return RollbackResult(rollback.time, target["commitTime"], tuple(files))


def _complete_rollback(
    storage: Storage,
    inflight: Instant,
    instant_info: dict[str, str],
    by_partition: dict[str, list[str]],
    elapsed_ms: int,
) -> None:
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
                "logFilesFromFailedCommit": None,
            }
            for partition, paths in by_partition.items()
        },
        "version": 1,
        "instantsRollback": [instant_info],
    }
    complete(storage, inflight, avro_plans.serialize(avro_plans.ROLLBACK_METADATA, metadata))
