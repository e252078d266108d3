"""The `TableService` protocol and the one plan-execution template every planned service shares.

A table service is a class over a `TableContext` with three verbs: `schedule` (write a new
plan under the table lock; its instant time, or None when nothing is due), `pending` (plans
not completed yet, oldest first) and `execute` (run a plan to completion; a typed result).
Services are registered by action (`registry.py`): the daemon and `Table.services` look
them up there, so a new service is one module plus one registration.

`PlannedService.execute` is the template of compaction, clustering, clean, change tracking
and index builds — the plan's instant is claimed idempotently, the work runs, the run is
fenced, the instant completes:

1. find the plan: completed -> `completed()` (InstantExistsError unless the service returns
   its recorded result); absent -> InstantNotFoundError naming the pending plans;
2. claim: `requested` -> `inflight` (an inflight plan was started by a run that died: it is
   simply run again, the plan being immutable and its execution idempotent);
3. the table schema when the service needs one (the same SchemaError for every service
   when nothing was ever written);
4. `run` the work on the engine -> the completed instant's metadata and the typed result;
5. fence: the context's completion check (the daemon's claim must still hold);
6. complete the instant (under the table lock when the service asks, inside the context's
   completion scope once the lock is held), then the run's `after` step (markers, superseded
   files).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.context import TableContext
from lakeward.core.engine import Engine
from lakeward.core.engine.spark import session_lost
from lakeward.core.exceptions import (
    ConcurrentWriteError,
    ConfigError,
    InstantExistsError,
    InstantNotFoundError,
    LakewardError,
    MissingFileError,
    SchemaError,
)
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.integrity import verify_planned_files
from lakeward.core.metadata_table.writer import FilesChange, apply_change, commit_change
from lakeward.core.schema import arrow_schema_from_avro, avro_schema_json, merge_committed
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_services.rollback import rollback_files
from lakeward.core.timeline import Action, CommitMetadata, Instant, State, Timeline
from lakeward.core.timeline.transitions import complete, transition_to_inflight
from lakeward.core.write.markers import delete_markers

log = logging.getLogger(__name__)

PlanT = TypeVar("PlanT")
ResultT = TypeVar("ResultT")
ResultT_co = TypeVar("ResultT_co", covariant=True)


@dataclass(frozen=True)
class ServiceReport:
    """What one service run did, in the daemon's terms (counts for metrics, one line for people).

    The daemon reports it as its `Execution` (the same type): `instant` is the plan's instant
    time (None for services without a plan, and for runs that found nothing to do).
    """

    instant: str | None
    nothing_to_do: bool = False
    records: int = 0
    bytes_written: int = 0
    detail: str = ""
    #: Files the run deleted (or, in a dry run, would delete), for services that remove files.
    files: tuple[str, ...] = ()


class TableService(Protocol[ResultT_co]):
    """A table service bound to one table's context; registered by `action`."""

    #: The registry key: the daemon's name of the action (`compaction`, `clean`, ...).
    action: ClassVar[str]
    #: Whether the work is a plan written on the timeline first (schedule, then execute it).
    planned: ClassVar[bool]

    def __init__(self, ctx: TableContext) -> None: ...

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        """Instant times of this service's plans not completed on `timeline`, oldest first."""
        ...

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        """Why this service cannot run on the table (None: it can), checked before anything is claimed."""
        ...

    def schedule(self, *, force: bool = False) -> str | None:
        """Write a new plan; its instant time, or None when nothing is due. `force`: skip a due-policy."""
        ...

    def pending(self) -> list[str]:
        """This service's plans not completed yet, oldest first."""
        ...

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> ResultT_co:
        """Run the plan `instant_time` (direct services: the service itself) to completion."""
        ...

    def report(self, result: Any) -> ServiceReport:
        """The daemon's summary of a result of `execute`."""
        ...


def bytes_of(storage: Storage, paths: Sequence[str]) -> int:
    """The total size of the files at `paths` (files gone since are counted as 0)."""
    total = 0
    for path in paths:
        try:
            total += storage.size(path)
        except (OSError, LakewardError):
            continue
    return total


@dataclass(frozen=True)
class PlanRun(Generic[PlanT]):
    """One execution of a claimed plan: what the service's `run` step works with."""

    ctx: TableContext
    instant_time: str
    #: The timeline as loaded before the claim (the plan's view of the table).
    timeline: Timeline
    plan: PlanT
    #: The table's data schema (services with `needs_schema`), else None.
    schema: pa.Schema | None
    engine: Engine
    #: `time.monotonic()` when the execution started.
    started: float

    @property
    def storage(self) -> Storage:
        return self.ctx.storage


@dataclass(frozen=True)
class Completion(Generic[ResultT]):
    """What `run` produced: the completed instant's content, the typed result, and what to do once completed."""

    metadata: bytes
    result: ResultT
    #: Run after the instant completed: remove what only the run needed (markers, superseded files), log.
    after: Callable[[], None] | None = None


class DirectService(ABC, Generic[ResultT]):
    """A service without a plan on the timeline (archival, rollback of abandoned writes): it only executes."""

    action: ClassVar[str]
    planned: ClassVar[bool] = False

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx

    @classmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        return []

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        return None

    def schedule(self, *, force: bool = False) -> str | None:
        raise ConfigError(f"{self.action} has no plan to schedule; it runs directly")

    def pending(self) -> list[str]:
        return []

    @abstractmethod
    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> ResultT:
        """Do the service's work now (`instant_time` is not used: there is no plan)."""

    @abstractmethod
    def report(self, result: ResultT) -> ServiceReport:
        """The daemon's summary of `result`."""


class PlannedService(ABC, Generic[PlanT, ResultT]):
    """A service whose work is an immutable plan on the timeline; `execute` is the shared template."""

    action: ClassVar[str]
    planned: ClassVar[bool] = True
    #: The service in messages ("compaction") and its plural ("compactions").
    noun: ClassVar[str]
    plural: ClassVar[str]
    #: The timeline action of the plan's instant.
    timeline_action: ClassVar[Action]
    #: Whether `run` needs the table's data schema (services that read or write records).
    needs_schema: ClassVar[bool] = False
    #: Whether another runner completing the same plan first is fine (its result is the same).
    tolerates_completed_by_other: ClassVar[bool] = False

    def __init__(self, ctx: TableContext) -> None:
        self.ctx = ctx

    # -- what each service provides -------------------------------------------------------
    @classmethod
    @abstractmethod
    def pending_of(cls, storage: Storage, timeline: Timeline) -> list[str]:
        """Instant times of this service's plans not completed on `timeline`, oldest first."""

    @classmethod
    def unavailable_reason(cls, storage: Storage, config: TableConfig) -> str | None:
        """Why this service cannot run on the table (None: it can)."""
        return None

    @abstractmethod
    def schedule(self, *, force: bool = False) -> str | None:
        """Write a new plan under the table lock; its instant time, or None when nothing is due."""

    @abstractmethod
    def load_plan(self, instant_time: str) -> PlanT:
        """Read the plan of `instant_time` (requested instant, or its sidecar)."""

    @abstractmethod
    def run(self, run: PlanRun[PlanT]) -> Completion[ResultT]:
        """Do the plan's work on `run.engine`; the completed instant's content and the result."""

    @abstractmethod
    def report(self, result: ResultT) -> ServiceReport:
        """The daemon's summary of `result`."""

    def check_applies(self) -> None:
        """Raise (ConfigError) when the service does not apply to the table; called before anything else."""

    def state_of(self, timeline: Timeline, instant_time: str) -> State | None:
        """The state of this service's plan `instant_time` on `timeline` (None: no such plan)."""
        return timeline.state_of(instant_time, self.timeline_action)

    def completed(self, instant_time: str) -> ResultT:
        """Executing a plan that completed already: InstantExistsError (clean returns its recorded result)."""
        raise InstantExistsError(f"{self.noun} {instant_time} is already completed")

    def plan_action(self) -> Action:
        """The action of the plan's requested and inflight files (clustering: by table version)."""
        return self.timeline_action

    def planned_slices(self, plan: PlanT) -> list[FileSlice]:
        """The file slices the plan reads, checked to be all there before the plan is claimed (none:
        the service reads no data file slices, or checks its own inputs)."""
        return []

    def inflight_content(self, plan: PlanT) -> bytes:
        """What the inflight instant file holds (Hudi: empty, or the plan again for some actions)."""
        return b""

    # -- the verbs --------------------------------------------------------------------------
    def pending(self) -> list[str]:
        return self.pending_of(self.ctx.storage, self.ctx.timeline())

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> ResultT:
        """Run the plan `instant_time` to completion (again, if an earlier run died): the template."""
        self.check_applies()
        self.ctx.check_version(f"run {self.noun} {instant_time}")  # planned under this handle's version?
        storage = self.ctx.storage
        timeline = self.ctx.timeline()
        if instant_time is None:
            raise InstantNotFoundError(
                f"name the {self.noun} plan to run; pending {self.plural}: {self.pending_of(storage, timeline)}"
            )
        state = self.state_of(timeline, instant_time)
        if state is State.COMPLETED:
            return self.completed(instant_time)
        if state is None:
            raise InstantNotFoundError(
                f"no {self.noun} plan {instant_time}; pending {self.plural}: {self.pending_of(storage, timeline)}"
            )
        started = time.monotonic()
        plan = self.load_plan(instant_time)
        verify_planned_files(storage, self.planned_slices(plan), f"{self.noun} {instant_time}")
        requested = Instant(instant_time, self.plan_action(), State.REQUESTED, layout=self.ctx.layout)
        inflight = self._claim(requested, state, plan)
        schema = self.ctx.require_schema(timeline) if self.needs_schema else None
        run = PlanRun(self.ctx, instant_time, timeline, plan, schema, engine or self.ctx.engine, started)
        try:
            done = self.run(run)
        except (FileNotFoundError, MissingFileError) as exc:
            # a file vanished under the run: a restore or rollback that undid the plan meanwhile deletes them
            if self._plan_undone(inflight.time, self._timeline_now()):
                raise self._undone(inflight) from exc
            raise
        except Exception as exc:
            lost = session_lost(exc)  # the Spark engine's JVM died: the plan stays pending, to run again
            if lost is not None:
                raise lost from exc
            raise
        self.ctx.check_completion(instant_time)  # fencing: the daemon's claim must still hold
        self._complete(inflight, done.metadata, timeline if self.needs_schema else None)
        if done.after is not None:
            done.after()
        return done.result

    def _claim(self, requested: Instant, state: State, plan: PlanT) -> Instant:
        """requested -> inflight, once: an inflight plan is run again as it is (idempotent)."""
        if state is State.REQUESTED:
            return transition_to_inflight(self.ctx.storage, requested, self.inflight_content(plan))
        log.info("%s %s was started before: running its plan again", self.noun, requested.time)
        return requested.with_state(State.INFLIGHT)

    def _with_columns_added_meanwhile(self, seen: Timeline, now: Timeline, instant_time: str, metadata: bytes) -> bytes:
        """The commit metadata with the schema readers should take from it: a write that completed while
        the service ran may have added columns, and when the service's instant is the later one its
        schema (the table's as of `seen`) becomes the table's. The union keeps them (as writes commit)."""
        storage, config = self.ctx.storage, self.ctx.config
        known = seen.completed_write_times()
        newer = [i for i in now.completed_writes() if i.time not in known and i.time != instant_time]
        if not newer or max(i.time for i in newer) > instant_time:
            return metadata  # nothing completed meanwhile, or a later instant's schema stays the table's
        committed = resolve_table_schema(storage, now, config)
        commit = CommitMetadata.from_bytes(metadata)
        if committed is None or commit.schema is None:
            return metadata
        ours = arrow_schema_from_avro(commit.schema)
        try:
            merged = merge_committed(committed, ours, allow_new=True)
        except SchemaError as exc:
            raise ConcurrentWriteError(
                f"{self.noun} {instant_time}: a write committed another table schema while it ran ({exc})"
            ) from None
        if merged == ours:
            return metadata
        commit.extraMetadata = {**commit.extraMetadata, "schema": avro_schema_json(merged, config.name)}
        return commit.to_bytes(config.version.metadata_encoding)

    def metadata_table_change(self, metadata: bytes) -> FilesChange:
        """What the instant completing with `metadata` changes in the metadata table's `files`
        partition: the files a commit-like service wrote (compaction, clustering); clean overrides it."""
        return commit_change(self.ctx.storage, CommitMetadata.from_bytes(metadata))

    def _timeline_now(self) -> Timeline:
        """The timeline as it is now, read with this run's layout once the table version is checked: an
        upgrade (which runs pending plans itself) may have switched it while the run worked, and the old
        layout's folder then holds no instant, which would make every plan look undone."""
        self.ctx.check_version(f"complete {self.noun}")
        return Timeline.load(self.ctx.storage, self.ctx.layout)

    def _plan_undone(self, instant_time: str, now: Timeline) -> bool:
        """Whether the plan's instant is gone from `now`: a restore or a rollback (which take the table
        lock, as this run does only to complete) undid it while the run worked."""
        return self.state_of(now, instant_time) is None

    def _undone(self, inflight: Instant) -> ConcurrentWriteError:
        """Remove what the run of an undone plan wrote (after the restore's listing, so no one else will);
        the error to raise. Completing it would bring back rows the restore undid, or commit deleted files."""
        storage = self.ctx.storage
        for path in rollback_files(storage, inflight):
            if storage.exists(path):
                storage.delete_file(path)
        delete_markers(storage, inflight.time)
        return ConcurrentWriteError(
            f"{self.noun} {inflight.time} was undone while it ran, by a restore or a rollback of it that "
            "completed meanwhile: it did not complete and the files it wrote are removed"
        )

    def _complete(self, inflight: Instant, metadata: bytes, seen: Timeline | None = None) -> None:
        """Complete the plan's instant; on a table with a metadata table, first its metadata delta
        commit of the same time (both under the table lock, as Hudi commits table services).
        `seen`: the timeline the run took the table's schema from (services that commit one)."""
        storage, tz = self.ctx.storage, self.ctx.config.timeline_timezone
        try:
            # always under the lock: a restore or rollback may have undone the plan while the run worked
            with self.ctx.lock:
                now = self._timeline_now()
                if self._plan_undone(inflight.time, now):
                    raise self._undone(inflight)
                if self.state_of(now, inflight.time) is State.COMPLETED:
                    # on timeline layout 2 completing it again would not collide: a second completed instant
                    self._completed_by_other(inflight)
                    return
                if seen is not None:
                    metadata = self._with_columns_added_meanwhile(seen, now, inflight.time, metadata)
                with self.ctx.completing(inflight.time):  # underway: the daemon lets no stop cut it short
                    apply_change(storage, tz, inflight.time, lambda: self.metadata_table_change(metadata))
                    complete(storage, inflight, metadata, tz)
        except InstantExistsError as exc:  # completed without the lock between the check and ours
            self._completed_by_other(inflight, exc)

    def _completed_by_other(self, inflight: Instant, cause: Exception | None = None) -> None:
        """Another runner of the same plan completed it while this run worked: its files are the ones this
        run wrote (a plan's output names are its own), so nothing is removed. InstantExistsError unless the
        service tolerates it (its result is the same)."""
        if not self.tolerates_completed_by_other:
            raise InstantExistsError(
                f"{self.noun} {inflight.time} was completed by another runner while this run worked; its result stands"
            ) from cause
        log.info("%s %s was completed by another runner", self.noun, inflight.time)


__all__ = [
    "Completion",
    "DirectService",
    "PlanRun",
    "PlannedService",
    "ServiceReport",
    "TableService",
    "bytes_of",
]
