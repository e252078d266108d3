"""Executing a clean plan: delete the planned files, then complete `<t>.clean` with `HoodieCleanMetadata`.

`<t>.clean.inflight` (holding the same plan, as Hudi) is written before the first delete.
Every step is idempotent: a file already gone counts as deleted, so a clean killed at
any point is finished by running the same plan again.
"""

from __future__ import annotations

import logging
import posixpath
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError
from lakeward.core.index.secondary.storage import delete_index_files_of_base_files
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.plan import CleanPlan
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.transitions import complete, read_instant, transition_to_inflight

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)
METADATA_VERSION = 2


@dataclass(frozen=True)
class CleanResult:
    instant_time: str
    policy: str
    earliest_commit_to_retain: str
    deleted_files: tuple[str, ...]

    @property
    def files_deleted(self) -> int:
        return len(self.deleted_files)

    def __str__(self) -> str:
        return self.instant_time


def delete_file(storage: Storage, path: str) -> None:
    """One planned delete (a file already gone is fine: the plan may be re-run)."""
    storage.delete_file(path)


def run_clean(client: WriteClient, instant_time: str) -> CleanResult:
    """Execute the clean planned at `instant_time`; a completed clean returns its recorded result."""
    storage = client.storage
    timeline = Timeline.load(storage)
    state = timeline.state_of(instant_time, Action.CLEAN)
    if state is None:
        raise InstantNotFoundError(f"no clean instant {instant_time} on the timeline of {storage.uri}")
    if state is State.COMPLETED:
        return _recorded(storage, Instant(instant_time, Action.CLEAN, State.COMPLETED))
    started = time.monotonic()
    requested = Instant(instant_time, Action.CLEAN, State.REQUESTED)
    data = read_instant(storage, requested)
    plan = CleanPlan.from_bytes(data, storage, requested.file_name)
    inflight = requested.with_state(State.INFLIGHT)
    if state is State.REQUESTED:
        inflight = transition_to_inflight(storage, requested, data)
    for paths in plan.files.values():
        for path in paths:
            delete_file(storage, path)
    delete_index_files_of_base_files(storage, [p for paths in plan.files.values() for p in paths])
    earliest = plan.earliest_instant_to_retain.time if plan.earliest_instant_to_retain else ""
    metadata = {
        "startCleanTime": instant_time,
        "timeTakenInMillis": int((time.monotonic() - started) * 1000),
        "totalFilesDeleted": plan.file_count,
        "earliestCommitToRetain": earliest,
        "lastCompletedCommitTimestamp": plan.last_completed_commit,
        "partitionMetadata": {
            partition: {
                "partitionPath": partition,
                "policy": plan.policy,
                "deletePathPatterns": [posixpath.basename(p) for p in paths],
                "successDeleteFiles": [posixpath.basename(p) for p in paths],
                "failedDeleteFiles": [],
                "isPartitionDeleted": False,
            }
            for partition, paths in sorted(plan.files.items())
        },
        "version": METADATA_VERSION,
        "bootstrapPartitionMetadata": {},
    }
    client.check_completion(instant_time)
    try:
        complete(storage, inflight, avro_plans.serialize(avro_plans.CLEAN_METADATA, metadata))
    except InstantExistsError:
        log.info("clean %s was completed by another runner", instant_time)
    log.info("clean %s deleted %d file(s)", instant_time, plan.file_count)
    deleted = tuple(p for paths in plan.files.values() for p in paths)
    return CleanResult(instant_time, plan.policy, earliest, deleted)


def _recorded(storage: Storage, completed: Instant) -> CleanResult:
    record = avro_plans.deserialize(read_instant(storage, completed), completed.file_name)
    files = []
    policy = str(record.get("policy") or "")
    for partition, meta in (record.get("partitionMetadata") or {}).items():
        policy = policy or str(meta.get("policy") or "")
        for name in meta.get("successDeleteFiles") or []:
            files.append(posixpath.join(partition, posixpath.basename(name)) if partition else posixpath.basename(name))
    return CleanResult(completed.time, policy, str(record.get("earliestCommitToRetain") or ""), tuple(files))
