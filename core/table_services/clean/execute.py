"""Executing a clean plan: delete the planned files, then complete `<t>.clean` with `HoodieCleanMetadata`.

The deletes run on the engine, one task per partition (Spark: on the executors).

`<t>.clean.inflight` (holding the same plan, as Hudi) is written before the first delete.
Every step is idempotent: a file already gone counts as deleted, so a clean killed at
any point is finished by running the same plan again.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import time
from dataclasses import dataclass

from lakeward.core.context import HoldsTableContext
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.secondary.storage import delete_index_files_of_base_files
from lakeward.core.metadata_table.writer import FilesChange, clean_change
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.plan import CleanPlan, pending_cleans, plan_clean, schedule_clean
from lakeward.core.table_services.service import Completion, PlannedService, PlanRun, ServiceReport
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.transitions import read_instant

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


def delete_files(storage: Storage, paths: list[str]) -> int:
    """The planned deletes of one partition (one engine task); how many."""
    for path in paths:
        delete_file(storage, path)
    return len(paths)


def clean_metadata(plan: CleanPlan, instant_time: str, started: float) -> bytes:
    """The completed clean's `HoodieCleanMetadata` (Avro) of a clean that deleted every file of `plan`
    (`started`: `time.monotonic()` when the run began)."""
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
    return avro_plans.serialize(avro_plans.CLEAN_METADATA, metadata)


class CleanService(PlannedService[tuple[bytes, CleanPlan], CleanResult]):
    """Cleaning as a table service: plan the file slices nobody needs, then delete them."""

    action = "clean"
    noun, plural = "clean", "cleans"
    timeline_action = Action.CLEAN
    tolerates_completed_by_other = True

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return pending_cleans(timeline)

    def schedule(self, *, force: bool = False) -> str | None:
        """`force` changes nothing: a clean has no due-policy, only files to delete or none."""
        return schedule_clean(self.ctx)

    def completed(self, instant_time: str) -> CleanResult:
        """A completed clean returns its recorded result (cleaning is safe to ask for twice)."""
        found = [i for i in self.ctx.timeline().completed(Action.CLEAN) if i.time == instant_time]
        return _recorded(self.ctx.storage, found[0])

    def load_plan(self, instant_time: str) -> tuple[bytes, CleanPlan]:
        requested = Instant(instant_time, Action.CLEAN, State.REQUESTED, layout=self.ctx.layout)
        data = read_instant(self.ctx.storage, requested)
        return data, CleanPlan.from_bytes(data, self.ctx.storage, requested.file_name)

    def inflight_content(self, plan: tuple[bytes, CleanPlan]) -> bytes:
        return plan[0]  # as Hudi: `<t>.clean.inflight` holds the plan again

    def run(self, run: PlanRun[tuple[bytes, CleanPlan]]) -> Completion[CleanResult]:
        storage, instant_time, plan = run.storage, run.instant_time, run.plan[1]
        # One task per partition (as Hudi's parallel clean): on Spark, the executors delete.
        run.engine.map(
            lambda paths: delete_files(storage, paths),
            [paths for _, paths in sorted(plan.files.items())],
            f"clean {instant_time}",
        )
        delete_index_files_of_base_files(storage, [p for paths in plan.files.values() for p in paths])
        earliest = plan.earliest_instant_to_retain.time if plan.earliest_instant_to_retain else ""
        deleted = tuple(p for paths in plan.files.values() for p in paths)
        result = CleanResult(instant_time, plan.policy, earliest, deleted)
        return Completion(
            clean_metadata(plan, instant_time, run.started), result, after=lambda: self._finished(run, result)
        )

    def metadata_table_change(self, metadata: bytes) -> FilesChange:
        """A clean deletes files: they are marked deleted in the metadata table's `files` partition."""
        return clean_change(avro_plans.deserialize(metadata, "clean metadata"))

    def _finished(self, run: PlanRun[tuple[bytes, CleanPlan]], result: CleanResult) -> None:
        """Once completed: remove what only the run needed, and log it."""
        log.info("clean %s deleted %d file(s)", run.instant_time, run.plan[1].file_count)

    def report(self, result: CleanResult) -> ServiceReport:
        return ServiceReport(result.instant_time, detail=f"{result.files_deleted} file(s) deleted")


@dataclass(frozen=True)
class CleanPreview:
    """What `Table.clean()` would delete now, without changing anything (a dry run)."""

    #: Pending clean plans (finished first by a real clean) -> the files each deletes.
    pending: dict[str, tuple[str, ...]]
    #: The files a new clean plan would delete now (none when a clean is pending).
    planned: tuple[str, ...]
    policy: str

    @property
    def files(self) -> tuple[str, ...]:
        """Every file the clean would delete, relative to the base path, sorted."""
        return tuple(sorted({f for files in self.pending.values() for f in files} | set(self.planned)))


def preview_clean(table: HoldsTableContext, now: dt.datetime | None = None) -> CleanPreview:
    """The files a clean would delete now: those of pending clean plans, else those of the plan
    `schedule_clean` would write (the same planner); writes nothing and takes no lock."""
    ctx = table.table_context
    timeline = ctx.timeline()
    service = CleanService(ctx)
    pending = {
        t: tuple(p for ps in service.load_plan(t)[1].files.values() for p in ps) for t in pending_cleans(timeline)
    }
    if pending:
        return CleanPreview(pending, (), ctx.write_config.cleaner_policy)
    view = FileSystemView.load(ctx.storage, timeline)
    plan = plan_clean(ctx.storage, timeline, view, ctx.write_config, ctx.config.timeline_timezone, now)
    return CleanPreview({}, tuple(sorted(p for ps in plan.files.values() for p in ps)), plan.policy)


def run_clean(table: HoldsTableContext, instant_time: str) -> CleanResult:
    """Execute the clean planned at `instant_time`; a completed clean returns its recorded result."""
    ctx = table.table_context
    return CleanService(ctx).execute(instant_time)


def _recorded(storage: Storage, completed: Instant) -> CleanResult:
    record = avro_plans.deserialize(read_instant(storage, completed), completed.file_name)
    files = []
    policy = str(record.get("policy") or "")
    for partition, meta in (record.get("partitionMetadata") or {}).items():
        policy = policy or str(meta.get("policy") or "")
        for name in meta.get("successDeleteFiles") or []:
            files.append(posixpath.join(partition, posixpath.basename(name)) if partition else posixpath.basename(name))
    return CleanResult(completed.time, policy, str(record.get("earliestCommitToRetain") or ""), tuple(files))
