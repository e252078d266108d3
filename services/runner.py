"""Runs work items: under a claim, each in a child process (local engine) or in the replica's Spark driver process.

For every item it takes, the runner:

1. checks the limits (`max_running` on this replica, the table's `max_concurrent_runs` or
   `max_running_per_table`, its group's `max_concurrent_runs`: `services/fairness.py`) and the
   quarantine, then claims the item (a replica that cannot claim it skips it);
2. runs it -- on the local engine in a child process of its own (`resources.isolation:
   process`, `lakeward.services.supervisor`: terminated on stop, memory-bounded by
   `resources.max_memory_mb`, a death is a failed attempt with its exit reason), on the Spark
   engine in the replica's one Spark driver process (`lakeward.services.spark_driver`, the
   daemon holds no SparkSession) under its own Spark job group (the run id) and fair-scheduler
   pool (named after the action), the driver's process tree memory-bounded by the same
   `resources.max_memory_mb` while the run executes; under `resources.isolation: thread`, or with a SparkSession
   handed in, in a thread of the daemon -- with every log line carrying the run's context;
   a new plan is scheduled first (under the table's lock, by core) and then claimed by its
   own instant, so other replicas that discover it meanwhile skip it;
3. fences: right before core completes the instant, the claim must still be valid and the
   run not cancelled, else the instant stays inflight (recoverable) -- and when the
   coordinator's session is suspended or lost, every running Spark job group is cancelled;
4. on failure retries with exponential backoff (`retries.max_attempts` per claim), counts
   the failure in the shared control store and quarantines the item after
   `quarantine_after_failures` failures (released by on-call); a failure once the run's claim
   no longer holds (a ZooKeeper outage) ends the run `claim_lost`, uncounted;
5. enforces the action's timeout and takes cancellations from the API (a cancelled plan is
   quarantined, so it does not start again by itself) and from the drain on SIGTERM (not
   quarantined: another replica or the next start picks it up): a child process is
   terminated (SIGTERM, SIGKILL after `resources.terminate_grace_s`), Spark jobs are
   cancelled by job group (and a Spark run that has not ended after the same grace is
   stopped by killing the driver process). A stop takes effect until the run holds the
   table lock for its completion (waiting for it included); once its completion is underway
   (phase `committing`) the run completes its instant and ends with what it did, a warning
   in the log (`lakeward.services.attempt`);
6. releases its claims, reports to Prometheus and keeps a record of the run for the API.
"""

from __future__ import annotations

import collections
import logging
import pickle
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from lakeward.core.engine import LocalEngine
from lakeward.core.exceptions import StorageError, TableVersionChangedError
from lakeward.services import execution, supervisor
from lakeward.services.attempt import (
    COMMITTING,
    AttemptResult,
    AttemptSpec,
    RunStopped,
    completion_check,
    completion_scope,
    perform,
)
from lakeward.services.claims import Coordinator, SessionEvent
from lakeward.services.control import ControlStore
from lakeward.services.fairness import DEFAULT_SHARE, Share
from lakeward.services.logs import run_context
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import Claim, Outcome, ServiceAction, TableRef, WorkItem
from lakeward.services.settings import ConcurrencySettings, ResourceSettings
from lakeward.services.spark_driver import SparkDriver, SparkJobGroup, job_group_progress
from lakeward.services.worker import WorkerJob

log = logging.getLogger(__name__)

#: How a run was asked for.
TRIGGER_POLICY = "policy"
TRIGGER_API = "api"

#: How often the watch thread looks for runs past their timeout.
WATCH_S = 0.1
#: How often the watch looks for cancels of this replica's runs asked through another replica.
CANCEL_REQUESTS_S = 1.0

#: What a run does with a plan: write a new one and run it, only write it, or only run a pending one.
MODES = ("schedule_and_run", "schedule", "run")


@dataclass
class RunRecord:
    """One run of a work item on this replica (what `GET /api/v1/runs` shows)."""

    run_id: str
    item: WorkItem
    trigger: str
    mode: str
    force: bool
    replica: str
    created_at: float = field(default_factory=time.time)
    instant: str | None = None
    state: str = "running"  # running | waiting_retry | finished
    phase: str = "claimed"
    attempts: int = 0
    outcome: Outcome | None = None
    ended_at: float | None = None
    error: str | None = None
    detail: str = ""
    #: Files the run deleted, or would delete in a dry run (orphan removal).
    files: list[str] = field(default_factory=list)
    records: int = 0
    bytes_written: int = 0
    #: The child process of the current attempt (local engine, process isolation), None otherwise.
    pid: int | None = None
    #: Peak resident memory of the run's child processes, bytes (0 when the run ran in the daemon).
    peak_rss_bytes: int = 0
    stop: RunStopped | None = None
    #: The action's timeout, and the monotonic time it runs out while the run runs (None otherwise).
    timeout_s: float = 0.0
    deadline: float | None = field(default=None, repr=False)
    #: Set when on-call cancelled the run: the plan is quarantined so it does not start again by itself.
    quarantine_on_stop: bool = False
    stop_event: threading.Event = field(default_factory=threading.Event, repr=False)
    claims: list[Claim] = field(default_factory=list, repr=False)

    @property
    def table(self) -> TableRef:
        return self.item.table

    @property
    def action(self) -> ServiceAction:
        return self.item.action

    @property
    def key(self) -> str:
        return f"{self.table.name}/{self.action.value}/{self.instant or 'new'}"

    def to_dict(self, progress: str | None = None) -> dict[str, Any]:
        now = self.ended_at or time.time()
        return {
            "run_id": self.run_id,
            "table": self.table.name,
            "action": self.action.value,
            "instant": self.instant,
            "key": self.key,
            "trigger": self.trigger,
            "mode": self.mode,
            "replica": self.replica,
            "state": self.state,
            "phase": self.phase,
            "progress": progress if progress is not None else self.phase,
            "attempts": self.attempts,
            "outcome": self.outcome.value if self.outcome else None,
            "started_at": self.created_at,
            "ended_at": self.ended_at,
            "duration_s": round(now - self.created_at, 3),
            "error": self.error,
            "detail": self.detail,
            "files": self.files,
            "records_written": self.records,
            "bytes_written": self.bytes_written,
            "pid": self.pid,
            "peak_rss_mb": round(self.peak_rss_bytes / 2**20, 1) if self.peak_rss_bytes else None,
        }


@dataclass(frozen=True)
class Submitted:
    """The answer to `Runner.submit`: the run started, or why not."""

    run: RunRecord | None
    reason: str = ""


class Runner:
    """Runs work items within limits, under claims, on the replica's engine (module doc)."""

    def __init__(
        self,
        coordinator: Coordinator,
        control: ControlStore,
        metrics: DaemonMetrics,
        concurrency: ConcurrencySettings,
        *,
        table_options: Callable[[TableRef], Mapping[str, Any]] = lambda ref: {},
        engine: Any = None,
        spark: Any = None,
        pool_for: Callable[[ServiceAction], str] = lambda action: action.value,
        on_finished: Callable[[RunRecord], None] | None = None,
        on_started: Callable[[RunRecord], None] | None = None,
        on_scheduled: Callable[[RunRecord], None] | None = None,
        share_of: Callable[[TableRef], Share] = lambda ref: DEFAULT_SHARE,
        recent_runs: int = 500,
        progress_interval_s: float = 30.0,
        resources: ResourceSettings | None = None,
        child_logging: tuple[str, str, str] | None = None,
    ):
        self.coordinator = coordinator
        self.control = control
        self.metrics = metrics
        self.concurrency = concurrency
        self.table_options = table_options
        self.engine = engine
        self.spark = spark
        self.pool_for = pool_for
        self.on_finished = on_finished
        #: Called (in `submit`, before the run's thread starts) with every run that starts.
        self.on_started = on_started
        #: Called when a run that schedules its plan has written and claimed it (`run.instant` is set).
        self.on_scheduled = on_scheduled
        #: The table's group and limits (called under the runner's lock: it must not call back into the runner).
        self.share_of = share_of
        self.resources = resources or ResourceSettings()
        #: (format, level, replica) for the log of a run's child process.
        self.child_logging = child_logging
        self.replica = coordinator.replica_id
        self._lock = threading.Lock()
        self._running: dict[str, RunRecord] = {}
        self._recent: collections.deque[RunRecord] = collections.deque(maxlen=recent_runs)
        self._accepting = True
        self._idle = threading.Condition(self._lock)
        self._pool = ThreadPoolExecutor(max_workers=concurrency.max_running, thread_name_prefix="run")
        self._progress_interval_s = progress_interval_s
        self._closed = threading.Event()
        self._watch_thread = threading.Thread(target=self._watch, name="run-watch", daemon=True)
        self._watch_thread.start()
        coordinator.add_session_listener(self._on_session)

    @property
    def isolated(self) -> bool:
        """Plans run outside the daemon's process: in a child process each (process isolation and the
        local engine, named or an engine object that can be sent to the child), or in the Spark driver
        process (`lakeward.services.spark_driver`). A SparkSession handed in runs them in the daemon."""
        return self.driver is not None or (
            self.resources.isolation == "process" and _sendable_local_engine(self.engine)
        )

    @property
    def driver(self) -> SparkDriver | None:
        """The Spark driver process the runs execute in, when the engine is one."""
        return self.engine if isinstance(self.engine, SparkDriver) else None

    # -- queries ----------------------------------------------------------------------------
    def running(self) -> list[RunRecord]:
        with self._lock:
            return list(self._running.values())

    def running_keys(self) -> set[str]:
        with self._lock:
            return {r.key for r in self._running.values()} | {r.item.key for r in self._running.values()}

    def runs(self) -> list[RunRecord]:
        """Running runs first, then finished ones, newest first."""
        with self._lock:
            return list(self._running.values()) + list(reversed(self._recent))

    def get(self, run_id: str) -> RunRecord | None:
        with self._lock:
            found = self._running.get(run_id)
            if found is None:
                found = next((r for r in self._recent if r.run_id == run_id), None)
            return found

    def has_capacity(self, table: TableRef) -> bool:
        with self._lock:
            return self._has_capacity(table)

    def refusal(self, table: TableRef) -> str | None:
        """Why a new run on `table` cannot start now (a concurrency limit, draining); None if it can."""
        with self._lock:
            return self._refusal(table)

    def _has_capacity(self, table: TableRef) -> bool:
        return self._limit_reason(table) is None

    def _refusal(self, table: TableRef) -> str | None:
        """Why a new run on `table` cannot start now, None if it can (call under the lock)."""
        if not self._accepting:
            return "the replica is draining: it takes no new work"
        return self._limit_reason(table)

    def _limit_reason(self, table: TableRef) -> str | None:
        """Which limit stops a new run on `table`, naming the runs that hold the slots; None when
        none does (call under the lock)."""

        def names(runs: list[RunRecord]) -> str:
            return ", ".join(f"run {r.run_id} ({r.key})" for r in runs)

        running = list(self._running.values())
        if len(running) >= self.concurrency.max_running:
            return (
                f"at the concurrency limit of this replica (max_running={self.concurrency.max_running}), "
                f"held by {names(running)}; try again when a run finishes"
            )
        share = self.share_of(table)
        per_table = share.max_runs or self.concurrency.max_running_per_table
        on_table = [r for r in running if r.table.name == table.name]
        if len(on_table) >= per_table:
            key = share.max_runs_key if share.max_runs is not None else "max_running_per_table"
            return (
                f"at the per-table concurrency limit ({key}={per_table}) "
                f"on {table.name}, held by {names(on_table)}; try again when a run finishes"
            )
        if share.group_max_runs is not None:
            in_group = [r for r in running if self.share_of(r.table).group == share.group]
            if len(in_group) >= share.group_max_runs:
                return (
                    f"group concurrency limit reached: group {share.group} of {table.name} runs "
                    f"{len(in_group)} (scheduling.groups.{share.group}.max_concurrent_runs={share.group_max_runs}), "
                    f"held by {names(in_group)}; try again when one of them finishes"
                )
        return None

    def progress_of(self, run: RunRecord) -> str:
        """The run's phase, with Spark task counts while its jobs run."""
        if run.state != "running" or run.phase != "running":
            return run.phase
        if self.driver is not None:
            progress = self.driver.progress(run.run_id)
        elif self.spark is not None:
            progress = job_group_progress(self.spark, run.run_id)
        else:
            progress = None
        return progress or run.phase

    # -- submitting --------------------------------------------------------------------------
    def submit(
        self,
        item: WorkItem,
        *,
        trigger: str = TRIGGER_POLICY,
        mode: str = "schedule_and_run",
        force: bool = False,
        quarantined: set[str] | None = None,
    ) -> Submitted:
        """Claim `item` and start running it; `Submitted.run` is None when it was not started (reason given)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
        held_back = quarantined if quarantined is not None else set(self.control.quarantined())
        if item.key in held_back:
            return Submitted(None, f"{item.key} is quarantined; release it first")
        with self._lock:
            refusal = self._refusal(item.table)
            if refusal is not None:
                return Submitted(None, refusal)
            if any(item.key in (r.key, r.item.key) for r in self._running.values()):
                return Submitted(None, f"{item.key} is already running on this replica")
        claim = self.coordinator.try_claim(item.key)
        result = self._claim_result(claim)
        if claim is None:
            if result == "unavailable":
                return Submitted(
                    None, f"{item.key} was not claimed: the {self.coordinator.description} are unreachable"
                )
            return Submitted(None, f"{item.key} is claimed by another run")
        run = RunRecord(
            run_id=uuid.uuid4().hex[:12],
            item=item,
            trigger=trigger,
            mode=mode,
            force=force,
            replica=self.replica,
            instant=item.instant,
            claims=[claim],
        )
        with self._lock:
            refusal = self._refusal(item.table)  # the slots can fill up while this run claims
            if refusal is not None:
                self.coordinator.release(claim)
                return Submitted(None, refusal)
            self._running[run.run_id] = run
        self.metrics.running.labels(item.action.value).inc()
        if self.on_started is not None:
            try:
                self.on_started(run)
            except Exception:
                log.exception("on_started callback failed")
        self._pool.submit(self._run, run)
        return Submitted(run)

    # -- stopping ----------------------------------------------------------------------------
    def cancel(
        self, run_id: str, outcome: Outcome = Outcome.CANCELLED, reason: str = "cancelled", *, quarantine: bool = False
    ) -> bool:
        """Stop a running run: its Spark jobs are cancelled and its instant is not completed.

        `quarantine`: hold the plan back afterwards until released (an on-call cancellation).
        """
        with self._lock:
            run = self._running.get(run_id)
            if run is None or run.state == "finished":
                return False
            if run.stop is None:
                run.stop = RunStopped(outcome, reason)
                run.quarantine_on_stop = quarantine
            run.stop_event.set()
        log.warning("stopping run %s (%s): %s", run_id, run.key, reason)
        if self.spark is not None:
            try:
                self.spark.sparkContext.cancelJobGroup(run_id)
            except Exception:
                log.debug("could not cancel Spark job group %s", run_id, exc_info=True)
        return True

    def cancel_all(self, outcome: Outcome, reason: str) -> int:
        return sum(self.cancel(r.run_id, outcome, reason) for r in self.running())

    def stop_accepting(self) -> None:
        with self._lock:
            self._accepting = False

    @property
    def accepting(self) -> bool:
        with self._lock:
            return self._accepting

    def wait_idle(self, timeout_s: float | None = None) -> bool:
        """Wait until nothing runs; False if `timeout_s` passed first."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._idle:
            while self._running:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._idle.wait(remaining if remaining is not None else 1.0)
            return True

    def close(self) -> None:
        self._closed.set()
        self.coordinator.remove_session_listener(self._on_session)
        self._pool.shutdown(wait=True)
        self._watch_thread.join(timeout=5)

    def _on_session(self, event: SessionEvent) -> None:
        if event in (SessionEvent.SUSPENDED, SessionEvent.LOST):
            n = self.cancel_all(Outcome.CLAIM_LOST, f"ZooKeeper session {event.value}: claims no longer hold")
            if n:
                log.error("ZooKeeper session %s: cancelled %d running plan(s)", event.value, n)

    # -- running -----------------------------------------------------------------------------
    def _fence(self, run: RunRecord) -> None:
        """Raise RunStopped unless the run may go on (not stopped, every claim still valid)."""
        if run.stop is not None:
            raise run.stop
        for claim in run.claims:
            reason = self.coordinator.invalid_reason(claim)
            if reason is not None:
                raise RunStopped(Outcome.CLAIM_LOST, f"claim {claim.key} is no longer held by this replica: {reason}")

    def _run(self, run: RunRecord) -> None:
        item = run.item
        started = time.monotonic()
        run.timeout_s = float(getattr(self.concurrency.timeouts_s, item.action.value))
        run.deadline = started + run.timeout_s  # enforced by the watch thread (`_watch`)
        with run_context(table=item.table.name, action=item.action.value, instant=run.instant, run_id=run.run_id):
            log.info("run started (%s, %s): %s", run.trigger, run.mode, item.reason or run.key)
            try:
                self._attempts(run)
            except BaseException as exc:  # never lose a run record, whatever happened
                self._finish(run, Outcome.FAILED, error=_describe(exc))
            finally:
                run.deadline = None
                for claim in run.claims:
                    self.coordinator.release(claim)
                seconds = time.monotonic() - started
                outcome = run.outcome or Outcome.FAILED
                self.metrics.observe_run(
                    item.table, item.action, outcome, seconds, time.time(), run.records, run.bytes_written
                )
                self.metrics.running.labels(item.action.value).dec()
                if run.peak_rss_bytes:
                    self.metrics.observe_run_memory(item.action, run.peak_rss_bytes)
                with self._lock:
                    run.phase = "finished"
                    run.state = "finished"
                    run.ended_at = time.time()
                    self._running.pop(run.run_id, None)
                    self._recent.append(run)
                    self._idle.notify_all()
                level = logging.INFO if outcome in (Outcome.SUCCEEDED, Outcome.NOTHING_TO_DO) else logging.WARNING
                log.log(level, "run finished: %s in %.2fs %s", outcome.value, seconds, run.detail or run.error or "")
        if self.on_finished is not None:
            try:
                self.on_finished(run)
            except Exception:
                log.exception("on_finished callback failed")

    def _finish(self, run: RunRecord, outcome: Outcome, *, error: str | None = None, detail: str = "") -> None:
        run.outcome = outcome
        run.error = error
        if detail:
            run.detail = detail

    def _attempts(self, run: RunRecord) -> None:
        retries = self.concurrency.retries
        while True:
            run.attempts += 1
            run.state = "running"
            try:
                done = self._attempt(run)
            except RunStopped as stopped:
                self._stopped(run, stopped)
                return
            except TableVersionChangedError as exc:  # no retry: the next cycle plans under the new version
                log.warning("%s", exc)
                self._finish(run, Outcome.FAILED, error=f"{type(exc).__name__}: {exc}")
                return
            except Exception as exc:
                if run.stop is not None:  # the Spark job failed because the run was stopped
                    self._stopped(run, run.stop)
                    return
                try:  # a claim lost meanwhile (a ZooKeeper outage) explains the failure: not the plan's
                    self._fence(run)
                except RunStopped as stopped:
                    log.warning("attempt %d failed after its claim was lost: %s", run.attempts, _describe(exc))
                    self._stopped(run, stopped)
                    return
                error = _describe(exc)
                log.warning("attempt %d failed: %s\n%s", run.attempts, error, traceback.format_exc(limit=8))
                # storage failing (S3 down or refusing) says nothing of the plan: not counted towards
                # quarantine, which would hold the plan (and the table's service) back after the outage
                quarantined = False if storage_failed(exc) else self._count_failure(run, error)
                if quarantined or run.attempts >= retries.max_attempts:
                    self._finish(run, Outcome.FAILED, error=error)
                    return
                delay = retries.backoff_s(run.attempts)  # run.attempts >= 1: the retry about to wait
                run.state = "waiting_retry"
                run.phase = f"retrying in {delay:g}s after: {error[:200]}"
                log.info("retrying in %.1fs (attempt %d of %d)", delay, run.attempts + 1, retries.max_attempts)
                if run.stop_event.wait(delay) and run.stop is not None:
                    self._stopped(run, run.stop)
                    return
                continue
            if run.outcome is None:
                run.outcome = Outcome.NOTHING_TO_DO if done.nothing_to_do else Outcome.SUCCEEDED
            run.detail = done.detail
            run.files = list(done.files)
            run.records, run.bytes_written = done.records, done.bytes_written
            if run.outcome is Outcome.SKIPPED_CLAIMED:
                return  # another replica runs the plan: the failures it counted are its own to reset
            try:
                self.control.clear_failures(run.key)
            except Exception as exc:  # the run succeeded all the same: only its old failure count stays
                log.warning(
                    "%s %s; its failure count could not be reset: %s", run.key, run.outcome.value, _describe(exc)
                )
            return

    def _claim_result(self, claim: Claim | None) -> str:
        """Count a claim attempt in the metrics, and say how it went (see `observe_claim`)."""
        result = "won" if claim is not None else ("conflict" if self.coordinator.connected else "unavailable")
        self.metrics.observe_claim(result)
        return result

    def _stopped(self, run: RunRecord, stopped: RunStopped) -> None:
        self._finish(run, stopped.outcome, error=str(stopped))
        if stopped.outcome is Outcome.TIMED_OUT:
            self._count_failure(run, str(stopped))
        elif run.quarantine_on_stop:
            self.control.quarantine(run.key, str(stopped), 0, self.replica)
            log.warning("quarantined %s: %s (release it to run it again)", run.key, stopped)

    def _count_failure(self, run: RunRecord, error: str) -> bool:
        """Count one failure of the run's item; quarantine it at the threshold. True if quarantined."""
        try:
            failures = self.control.record_failure(run.key, error)
        except Exception as exc:  # ZooKeeper unreachable: the run's own error is what it ends with
            log.warning("%s failed; the failure could not be counted: %s", run.key, _describe(exc))
            return False
        threshold = self.concurrency.quarantine_after_failures
        if failures >= threshold:
            reason = f"failed {failures} time(s); last error: {error}"
            try:
                self.control.quarantine(run.key, reason, failures, self.replica)
            except Exception as exc:
                log.warning("%s failed %d time(s); it could not be quarantined: %s", run.key, failures, _describe(exc))
                return True  # no more attempts now: the next failure quarantines it
            log.error("quarantined %s after %d failure(s)", run.key, failures)
            return True
        return False

    def _attempt(self, run: RunRecord) -> execution.Execution:
        item = run.item
        self._fence(run)
        spec = AttemptSpec(item.action, run.instant, run.mode, run.force, item.table_version)
        hooks = _RunHooks(self, run)
        if self.driver is not None:
            result = self._attempt_in_driver(run, spec, hooks, self.driver)
        elif self.isolated:
            result = self._attempt_in_child(run, spec, hooks)
        else:
            options = self.table_options(item.table)
            table = execution.open_table(
                item.table, options, self.engine, completion_check(hooks), completion_scope(hooks)
            )
            # The table is not closed: its lock keeps a share of the process's shared ZooKeeper client,
            # so the client (one connection per ensemble) lives as long as the daemon and /readyz can
            # watch it; closing would end the session after every run and reconnect for the next.
            with self._spark_job_group(run):
                result = perform(table, spec, self.engine, hooks)
        run.instant = result.instant or run.instant
        if result.outcome is not None:
            run.outcome = result.outcome
        return result.execution

    def _job(self, run: RunRecord, spec: AttemptSpec, engine: Any) -> WorkerJob:
        options = dict(self.table_options(run.table))
        return WorkerJob(run.run_id, run.table, options, spec, self.child_logging, engine, self.resources.nice)

    def _follow(self, run: RunRecord) -> dict[str, Any]:
        """What the supervision of an attempt outside the daemon reports to the run record."""

        def started(pid: int) -> None:
            run.pid = pid
            log.info("attempt %d runs in process %d", run.attempts, pid)

        def memory(peak: int) -> None:
            run.peak_rss_bytes = max(run.peak_rss_bytes, peak)

        return {"stopped": lambda: run.stop, "on_start": started, "on_memory": memory}

    def _attempt_in_child(self, run: RunRecord, spec: AttemptSpec, hooks: _RunHooks) -> AttemptResult:
        """One attempt in a child process (`lakeward.services.supervisor`)."""
        try:
            return supervisor.run_in_child(
                self._job(run, spec, self.engine or "local"),
                hooks,
                max_memory_mb=self.resources.max_memory_mb.for_action(run.action),
                grace_s=self.resources.terminate_grace_s,
                **self._follow(run),
            )
        finally:
            run.pid = None

    def _attempt_in_driver(
        self, run: RunRecord, spec: AttemptSpec, hooks: _RunHooks, driver: SparkDriver
    ) -> AttemptResult:
        """One attempt in the Spark driver process (`lakeward.services.spark_driver`)."""
        try:
            return driver.run(
                self._job(run, spec, None),
                hooks,
                pool=self.pool_for(run.action),
                description=f"lakeward {run.item.key}",
                grace_s=self.resources.terminate_grace_s,
                max_memory_mb=self.resources.max_memory_mb.for_action(run.action),
                **self._follow(run),
            )
        finally:
            run.pid = None

    def _spark_job_group(self, run: RunRecord) -> Any:
        return SparkJobGroup(self.spark, run.run_id, f"lakeward {run.item.key}", self.pool_for(run.item.action))

    def _watch(self) -> None:
        """One thread for every run of the replica: stops a run at its timeout or when on-call asked
        another replica to cancel it, and logs the progress of the running ones every
        `progress_interval_s` (no timer thread per run: a replica's thread count does not move with
        the runs it has in flight)."""
        next_progress, next_requests = time.monotonic() + self._progress_interval_s, 0.0
        while not self._closed.wait(WATCH_S):
            now = time.monotonic()
            running = self.running()
            for run in running:
                deadline = run.deadline
                if deadline is not None and now >= deadline and run.stop is None:
                    self.cancel(run.run_id, Outcome.TIMED_OUT, f"timed out after {run.timeout_s:g}s")
            if running and now >= next_requests:
                next_requests = now + CANCEL_REQUESTS_S
                self._take_cancel_requests()
            if now >= next_progress:
                next_progress = now + self._progress_interval_s
                self._log_progress()

    def _take_cancel_requests(self) -> None:
        """Cancel (and quarantine, as an on-call cancel does) this replica's runs that on-call asked another
        replica to cancel; forget the requests about this replica's runs once done or ended."""
        try:
            for run_id, request in self.control.cancel_requests().items():
                if request.replica != self.replica:
                    continue
                self.cancel(run_id, Outcome.CANCELLED, request.reason, quarantine=True)
                self.control.drop_cancel_request(run_id)
        except Exception:  # ZooKeeper unreachable: the requests wait for the next look
            log.warning("could not read or drop the cancel requests of this replica", exc_info=True)

    def _log_progress(self) -> None:
        for run in self.running():
            with run_context(table=run.table.name, action=run.action.value, instant=run.instant, run_id=run.run_id):
                progress = self.progress_of(run)
                elapsed = time.time() - run.created_at
                log.info("still running after %.0fs: %s", elapsed, progress, extra={"progress": progress})


class _RunHooks:
    """What an attempt asks of the runner (`lakeward.services.attempt.AttemptHooks`), for one run."""

    def __init__(self, runner: Runner, run: RunRecord):
        self.runner, self.run = runner, run

    def fence(self) -> None:
        self.runner._fence(self.run)
        if self.run.phase == "completing":
            log.info("claim re-checked before completing %s", self.run.instant)

    def claim_plan(self, instant: str) -> bool:
        run = self.run
        claim = self.runner.coordinator.try_claim(f"{run.table.name}/{run.action.value}/{instant}")
        self.runner._claim_result(claim)
        run.instant = instant
        if claim is None:
            return False
        run.claims.append(claim)
        log.info("scheduled %s %s", run.action.value, instant)
        if self.runner.on_scheduled is not None:
            try:
                self.runner.on_scheduled(run)
            except Exception:
                log.exception("on_scheduled callback failed")
        return True

    def set_phase(self, phase: str) -> None:
        self.run.phase = phase

    @contextmanager
    def completing(self) -> Iterator[None]:
        """In the daemon's own thread nothing else stops an attempt: a stop that came while it waited for
        the table lock refuses the completion here; once past, the completion goes on (`attempt`)."""
        if self.run.stop is not None:
            raise self.run.stop
        self.set_phase(COMMITTING)
        yield


def _sendable_local_engine(engine: Any) -> bool:
    """The engine is the local one, named or as an object that pickles (what a child process needs)."""
    if engine in (None, "local"):
        return True
    if not isinstance(engine, LocalEngine):
        return False
    try:
        pickle.dumps(engine)
    except Exception:
        return False
    return True


def storage_failed(exc: BaseException) -> bool:
    """Whether an attempt failed because storage failed (StorageError: unreachable, refusing, full), in
    the daemon or in the run's process: the next attempt may well succeed once storage is back."""
    if isinstance(exc, StorageError):
        return True
    return isinstance(exc, supervisor.ChildFailed) and str(exc).startswith(f"{StorageError.__name__}: ")


def _describe(exc: BaseException) -> str:
    """A failed attempt's error as the run record shows it: a child's reason as is, else type and message."""
    return str(exc) if isinstance(exc, supervisor.ChildFailed) else f"{type(exc).__name__}: {exc}"


__all__ = ["MODES", "TRIGGER_API", "TRIGGER_POLICY", "RunRecord", "RunStopped", "Runner", "Submitted"]
