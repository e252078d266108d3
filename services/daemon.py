"""The daemon: composition root and lifecycle of one replica.

`Daemon(settings)` wires the pieces (coordinator and control store, the engine -- on Spark
the driver process that holds the SparkSession, `services/spark_driver.py` --, metrics,
runner, scheduler); `start()` connects and starts the discovery cycles;
`drain()` is the graceful stop of SIGTERM: readiness turns false, no new claims, running
plans get `drain_time_s` to finish and are then cancelled (their instants stay inflight
and are recoverable), claims are released. The HTTP API (`services/api`) reads and drives
a started daemon through the methods below.

Table locks: when ZooKeeper is configured and a table's `hoodie_options` name no lock
provider, the daemon takes the table lock through core's ZooKeeper lock provider at
`<hosts>` with base path `<chroot>/locks` and the table name as lock key, under optimistic
concurrency control (failed writes are rolled back lazily, from their heartbeats) --
ingestion writers on the same tables must use the same lock settings.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import LakewardError, LockError
from lakeward.core.locks import LockProvider, ZooKeeperLockProvider, lock_provider_for
from lakeward.core.locks.zk_client import (
    SharedZooKeeperClient,
    ZooKeeperUnavailableError,
    acquire_shared_client,
    client_key,
)
from lakeward.services import execution
from lakeward.services.claims import (
    Coordinator,
    CoordinatorError,
    InProcessCoordinator,
    OwnerInfo,
    SessionEvent,
    ZooKeeperCoordinator,
)
from lakeward.services.control import ControlStore, MemoryControlStore, PauseEntry, ZooKeeperControlStore
from lakeward.services.discovery import (
    DiscoveryCache,
    DiscoveryResult,
    HungReadError,
    ProgressMark,
    RenewingPool,
    TableHealth,
    TableState,
    assess_health,
    discover,
    load_state,
    read_within,
)
from lakeward.services.fairness import FairShareLedger, Share, order_fairly, shares_for
from lakeward.services.history import ENDED, SharedHistory
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import (
    ACTION_PRIORITY,
    Outcome,
    PendingPlan,
    ServiceAction,
    TableRef,
    WorkItem,
    version_changes,
)
from lakeward.services.planning import (
    Decision,
    Gate,
    Policy,
    admit,
    decide,
    instant_moment,
    plan_decisions,
    policy_from_settings,
)
from lakeward.services.runner import TRIGGER_API, Runner, RunRecord, Submitted
from lakeward.services.scheduler import CycleScheduler
from lakeward.services.settings import DaemonSettings
from lakeward.services.spark_driver import SparkDriver, build_spark_session

log = logging.getLogger(__name__)

_T = TypeVar("_T")


class UnknownTableError(KeyError):
    """The name is not one of the tables this daemon looks after."""


class TriggerError(ValueError):
    """A trigger that cannot be carried out as asked (bad mode for the action, no such plan...)."""


class TableUnreadableError(TriggerError):
    """A table the daemon looks after cannot be read now, so nothing can be explained or planned on it."""


@dataclass(frozen=True)
class TableView:
    """A table as the API shows it."""

    ref: TableRef
    state: TableState | None
    problem: str | None
    paused: bool
    paused_by_policy: bool
    #: The on-call pause (who -- the replica that took the API call --, when, why), if any.
    pause: PauseEntry | None = None

    def to_dict(self) -> dict[str, Any]:
        s = self.state
        pause = self.pause if self.paused else None
        return {
            "name": self.ref.name,
            "path": self.ref.path,
            # no state: not read yet, or the last cycle could not read it (`problem`); its type, counts and
            # pending lists are then unknown, not none (the lists stay lists for the API's clients)
            "state_known": s is not None,
            "table_type": s.table_type if s else None,
            "table_version": s.table_version if s else None,
            "read_only": s.read_only if s else None,
            "paused": self.paused or self.paused_by_policy,
            "paused_by": "policy" if self.paused_by_policy else ("on-call" if self.paused else None),
            "pause_reason": pause.reason if pause else None,
            "paused_via": pause.replica if pause else None,
            "paused_since": dt.datetime.fromtimestamp(pause.since, dt.UTC).isoformat() if pause else None,
            "healthy": self.problem is None and (s is None or s.error is None),
            "problem": self.problem or (s.error if s else None),
            "last_completed_instant": s.last_completed if s else None,
            "pending_plans": [plan_dict(p) for p in s.pending_plans] if s else [],
            "pending_writes": [i.time for i in s.pending_writes] if s else [],
            "delta_commits_since_compaction": s.delta_commits_since_compaction if s else None,
            "writes_since_clean": s.writes_since_clean if s else None,
            "completed_instants": s.completed_count if s else None,
        }


def plan_dict(plan: PendingPlan) -> dict[str, Any]:
    return {
        "table": plan.table.name,
        "action": plan.action.value,
        "instant": plan.instant,
        "state": plan.state,
        "key": f"{plan.table.name}/{plan.action.value}/{plan.instant}",
    }


def table_lock_options(settings: DaemonSettings) -> dict[str, str]:
    """The table-lock options the daemon adds when ZooKeeper is configured (module doc)."""
    return settings.table_lock_options()


def table_options_for(settings: DaemonSettings, table_name: str) -> dict[str, str]:
    """The `hoodie.*` options the daemon opens a table with (`DaemonSettings.table_options`)."""
    return settings.table_options(table_name)


class Daemon:
    """One replica of the table-services daemon (module doc)."""

    #: Recent runs of the deployment looked at for a table's runs and for the plans running now.
    RUNS_SCANNED = 200

    def __init__(
        self,
        settings: DaemonSettings,
        *,
        spark: Any = None,
        metrics: DaemonMetrics | None = None,
        coordinator: Coordinator | None = None,
    ):
        self.settings = settings
        self.metrics = metrics or DaemonMetrics()
        self.owner = OwnerInfo.current(settings.replica_id)
        self.replica_id = self.owner.replica_id
        self._spark = spark
        self._owns_spark = False
        #: The Spark driver process runs execute in (Spark engine, process isolation).
        self._driver: SparkDriver | None = None
        self.coordinator = coordinator or self._build_coordinator()
        self.control: ControlStore = (
            ZooKeeperControlStore(self.coordinator)
            if isinstance(self.coordinator, ZooKeeperCoordinator)
            else MemoryControlStore()
        )
        #: The deployment's run history and audit log (shared through ZooKeeper when configured).
        self.history = SharedHistory.for_coordinator(self.coordinator, settings.history)
        #: Per-table overrides that named no table at the last discovery cycle (logged when they change).
        self._unmatched_overrides: list[str] | None = None
        self.cache = DiscoveryCache()
        self._last: DiscoveryResult | None = None
        #: Each table's `hoodie.table.version` in the last discovery cycle (to see it change).
        self._versions: dict[str, int] = {}
        #: Table name -> its health as of the last cycle (`assess_health`).
        self._health: dict[str, TableHealth] = {}
        #: Load and score the tables of each cycle; their few threads live with the daemon (no threads
        #: started and stopped every cycle, which a soak's thread count would show as churn).
        #: A read of hung storage keeps its thread for good: these pools renew themselves then (`RenewingPool`).
        self._discovery_pool = RenewingPool(8, "discovery")
        self._health_pool = RenewingPool(4, "health")
        #: Reads of a table for API calls (trigger, explain), bounded by `tables.load_timeout_s` (`_read_table`).
        self._table_reads = RenewingPool(4, "table-read")
        #: Work item key -> why it was not run in the last cycle (logged when it changes).
        self._skipped: dict[str, str] = {}
        #: (table, action) -> the table's `progress_mark` when a new plan of it was found not due: not
        #: proposed again until the table has `_retry_gap` more completed instants after it (else an idle
        #: table would be retried every cycle, and a busy one would keep its slot on no-op runs). A run
        #: of it that does something clears it.
        self._not_due: dict[tuple[str, str], ProgressMark] = {}
        #: Runs started per group and table (the fair share of `services/fairness.py`).
        self.ledger = FairShareLedger()
        #: Table name -> its group, priority and limits, as of the last cycle.
        self._shares: dict[str, Share] = {}
        self._lock = threading.Lock()
        #: Runs whose last record could not be written to the shared history (ZooKeeper unreachable): written
        #: again, as they are then, at the next cycle and when the session is back.
        self._unrecorded: dict[str, RunRecord] = {}
        self._unrecorded_lock = threading.Lock()
        self._started = False
        self._draining = False
        self._stopped = threading.Event()
        self.runner: Runner | None = None
        self.scheduler: CycleScheduler | None = None
        #: One never-connected lock provider per distinct lock setting: which shared client it would use.
        self._lock_probes: dict[tuple[tuple[str, str], ...], LockProvider] = {}
        #: Shares of lock-ensemble clients the daemon holds for readiness while runs live in child processes.
        self._lock_watches: dict[tuple[Any, ...], SharedZooKeeperClient] = {}

    # -- wiring --------------------------------------------------------------------------------
    def _build_coordinator(self) -> Coordinator:
        zk = self.settings.zookeeper
        if zk.hosts is None:
            paths = [r.path for r in self.settings.static_tables()] + [r.path for r in self.settings.tables.roots]
            return InProcessCoordinator(paths, owner=self.owner)
        auth = None
        if zk.digest_user is not None and zk.digest_password is not None:
            auth = [("digest", f"{zk.digest_user}:{zk.digest_password.get_secret_value()}")]
        return ZooKeeperCoordinator(
            zk.hosts,
            chroot=None if zk.chroot == "/" else zk.chroot,
            base_path=zk.claims_path.removesuffix("/claims") or "/",
            session_timeout_s=zk.session_timeout_s,
            connection_timeout_s=zk.connection_timeout_s,
            auth_data=auth,
            owner=self.owner,
        )

    def _engine(self) -> Any:
        """The runner's engine: "local"; the Spark driver process (`spark_driver`, the daemon holds no
        SparkSession); or, under `resources.isolation: thread` or with a session handed in, a SparkEngine
        on the daemon's own session."""
        if self.settings.spark.engine == "local":
            return "local"
        if self._spark is None and self.settings.resources.isolation == "process":
            self._driver = SparkDriver(
                self.settings.spark,
                logging_setup=self._child_logging(),
                nice=self.settings.resources.nice,
            )
            self._driver.start()  # the session builds in the background: runs wait for it in the pipe
            return self._driver
        if self._spark is None:
            self._spark = build_spark_session(self.settings.spark)
            self._owns_spark = True
        return SparkEngine(self._spark)

    def _child_logging(self) -> tuple[str, str, str]:
        """(format, level, replica) of the log of the processes runs execute in."""
        return (self.settings.log.format, self.settings.log.level, self.replica_id)

    def table_options(self, ref: TableRef) -> dict[str, str]:
        """The `hoodie.*` options a table is opened with: the daemon's lock defaults, then the policy's."""
        return table_options_for(self.settings, ref.name)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, abort: threading.Event | None = None) -> None:
        """Connect, start the Spark session (if the engine is spark) and the discovery cycles.

        Once `abort` is set, a wait for ZooKeeper ends with :class:`StartAborted` (SIGTERM at start-up).
        """
        with self._lock:
            if self._started:
                return
            self._started = True
        log.info("starting replica %s (%s)", self.replica_id, type(self.coordinator).__name__)
        self.coordinator.start(abort)
        self.coordinator.add_session_listener(self._on_session)
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
        try:
            self.history.replicas.register()
        except Exception:
            log.warning("could not announce this replica for the shared run history", exc_info=True)
        self.history.start_view()
        engine = self._engine()
        self.runner = Runner(
            self.coordinator,
            self.control,
            self.metrics,
            self.settings.concurrency,
            table_options=self.table_options,
            engine=engine,
            spark=self._spark if self.settings.spark.engine == "spark" else None,
            pool_for=self.settings.spark.pool_for,
            on_finished=self._run_finished,
            on_started=self._run_started,
            # recorded again once its plan is written: a replica that dies then leaves a lost run naming its plan
            on_scheduled=self._record_run,
            share_of=self.share_of,
            resources=self.settings.resources,
            child_logging=self._child_logging(),
        )
        tables = self.settings.tables
        self.scheduler = CycleScheduler(self.cycle, tables.refresh_interval_s, tables.refresh_jitter)
        self.scheduler.start()

    def _on_session(self, event: SessionEvent) -> None:
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
        self.metrics.ready.set(1 if self.ready else 0)
        back = event in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION)
        if back and self._unrecorded and self.scheduler is not None:
            self.scheduler.run_soon()  # the cycle writes them (not from the session's callback thread)

    def _record_run(self, run: RunRecord) -> bool:
        """Write the run to the shared history (at its start, once it scheduled its plan, and at its end).
        A failure logs, and the run is written again later (`_record_unrecorded`): a run whose end was never
        written showed as running on every other replica for good."""
        try:
            self.history.record_run(run.to_dict())
        except Exception:
            log.warning(
                "could not write run %s to the shared history; it is written again once ZooKeeper answers",
                run.run_id,
                exc_info=True,
            )
            with self._unrecorded_lock:
                self._unrecorded[run.run_id] = run
            return False
        with self._unrecorded_lock:
            self._unrecorded.pop(run.run_id, None)
        return True

    def _record_unrecorded(self) -> None:
        """Write the runs whose last record failed, as they are now. Not while ZooKeeper is known
        unreachable, and no further once one fails: each attempt waits out the connection timeout,
        which would hold the cycle that calls this."""
        if not self.coordinator.connected:
            return
        with self._unrecorded_lock:
            waiting = list(self._unrecorded.values())
        for run in waiting:
            if not self._record_run(run):
                return

    def share_of(self, ref: TableRef) -> Share:
        """A table's group, priority and limits (those of the last cycle; from the settings for a table
        the last cycle did not see)."""
        found = self._shares.get(ref.name)
        if found is not None:
            return found
        last = self._last
        return shares_for(self.settings, [ref], last.found_under if last else {})[ref.name]

    def _run_started(self, run: RunRecord) -> None:
        self.ledger.started(run.table.name, self.share_of(run.table))
        self._record_run(run)

    def _run_finished(self, run: RunRecord) -> None:
        self._record_run(run)
        key = (run.table.name, run.action.value)
        if run.item.instant is None and run.outcome is Outcome.NOTHING_TO_DO:
            with self._lock:
                last = self._last
            state = next((s for s in last.states if s.ref == run.table), None) if last else None
            if state is not None:
                self._not_due[key] = state.progress_mark
        elif run.outcome is Outcome.SUCCEEDED:
            self._not_due.pop(key, None)
        # A slot is free: take the next work now (a repeat of a not-due item is held back above).
        if self.scheduler is not None and not self._draining:
            self.scheduler.run_soon()

    def _retry_gap(self, table: str, action: ServiceAction) -> int:
        """Completed instants a table must gain before a not-due action is proposed again."""
        policy = self.settings.policy_for(table)
        gaps = {
            ServiceAction.COMPACTION: policy.compaction.max_delta_commits,
            ServiceAction.CLUSTERING: policy.clustering.every_n_commits,
        }
        return max(1, gaps.get(action, 1))

    @staticmethod
    def _moved(state: TableState, action: ServiceAction, mark: ProgressMark) -> int:
        """How far the table has moved since `mark`, as it matters to `action`: a clean can only find
        more to delete after a rewrite (commit, compaction, clustering); the others after any instant."""
        return state.completed_after(mark, rewrites_only=action is ServiceAction.CLEAN)

    def _gap(self, item: WorkItem) -> int:
        return 1 if item.action is ServiceAction.CLEAN else self._retry_gap(item.table.name, item.action)

    def _proposable(self, item: WorkItem, states: dict[str, TableState]) -> bool:
        noted = self._not_due.get((item.table.name, item.action.value))
        state = states.get(item.table.name)
        if item.instant is not None or noted is None or state is None:
            return True
        return self._moved(state, item.action, noted) >= self._gap(item)

    @property
    def ready(self) -> bool:
        """Takes new work: started, not draining, claims and table locks reachable, one discovery cycle done."""
        return not self.readiness_problems()

    def readiness_problems(self) -> list[str]:
        """Why this replica takes no new work now (empty when ready): the reasons `/readyz` gives.

        The lock service counts twice over: the claims' ZooKeeper session, and every shared
        ZooKeeper client of the table locks (`lakeward.core.locks.zk_client`), which in the
        daemon's default settings is the same one. A plan whose table lock cannot be taken
        would fail and be quarantined, so a replica that cannot reach either is not ready.
        """
        reasons: list[str] = []
        if not self._started:
            reasons.append("starting: not started")
        if self._draining:
            reasons.append("draining")
        coordinator = self.coordinator
        own = coordinator.shared_client if isinstance(coordinator, ZooKeeperCoordinator) else None
        if not coordinator.connected:
            if isinstance(coordinator, ZooKeeperCoordinator):
                reasons.append(f"cannot reach ZooKeeper: {coordinator.description} is {coordinator.state}")
            else:
                reasons.append("coordinator not connected")
        for shared in self._lock_clients():
            if shared is not own and not shared.connected:
                reasons.append(f"cannot reach ZooKeeper for table locks at {shared.hosts}: session {shared.state}")
        if self._driver is not None and self._driver.starting:
            reasons.append("starting: the Spark driver process is starting its SparkSession")
        if not reasons and self._last is None:
            reasons.append("starting: no discovery cycle yet")
        return reasons

    def _lock_clients(self) -> list[SharedZooKeeperClient]:
        """The ZooKeeper clients in use in this process that the tables' locks go through."""
        found: dict[int, SharedZooKeeperClient] = {}
        for ref in self._known().values():
            lock_options = {k: v for k, v in self.table_options(ref).items() if k.startswith("hoodie.write.lock.")}
            provider = self._lock_probes.get(tuple(sorted(lock_options.items())))
            if provider is None:
                try:
                    provider = lock_provider_for(ref.path, ref.name, lock_options)
                except LakewardError:
                    continue  # a bad lock setting shows when the table is opened
                self._lock_probes[tuple(sorted(lock_options.items()))] = provider
            shared = provider.shared_client if isinstance(provider, ZooKeeperLockProvider) else None
            if shared is None and isinstance(provider, ZooKeeperLockProvider):
                shared = self._watch_lock_ensemble(provider)
            if shared is not None:
                found[id(shared)] = shared
        return list(found.values())

    def _watch_lock_ensemble(self, provider: ZooKeeperLockProvider) -> SharedZooKeeperClient | None:
        """A share of the client for a lock ensemble that only runs' child processes use, so that
        readiness watches it from the daemon too (the children connect on their own); None when
        runs share the daemon's process (its clients are found there once in use)."""
        if self.runner is None or not self.runner.isolated or self._draining:
            return None
        key = client_key(provider.client_options)
        with self._lock:
            shared = self._lock_watches.get(key)
            if shared is None:
                shared = self._lock_watches[key] = acquire_shared_client(provider.client_options)
        try:
            shared.client(0)  # starts connecting; it keeps trying in the background
        except ZooKeeperUnavailableError:
            pass
        return shared

    @property
    def draining(self) -> bool:
        return self._draining

    def drain(self, drain_time_s: float | None = None) -> None:
        """Graceful stop (module doc). Idempotent."""
        with self._lock:
            if self._draining or not self._started:
                self._draining = True
                return
            self._draining = True
        self.metrics.ready.set(0)
        wait = self.settings.drain_time_s if drain_time_s is None else drain_time_s
        log.info("draining: no new work; running plans get %.0fs", wait)
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=True)
        if self.runner is not None:
            self.runner.stop_accepting()
            if not self.runner.wait_idle(wait):
                n = self.runner.cancel_all(Outcome.CANCELLED, "drain time over: the replica is stopping")
                log.warning("drain time over: cancelled %d run(s); their instants stay inflight", n)
                self.runner.wait_idle(30)
            self.runner.close()
        # a load blocked on hung storage never returns: waiting for it would keep the replica from stopping
        self._discovery_pool.shutdown(wait=not self.cache.hung, cancel_futures=True)
        self._health_pool.shutdown(wait=not self.cache.hung, cancel_futures=True)
        self._table_reads.shutdown(wait=not self.cache.hung, cancel_futures=True)
        self.history.stop_view()
        self.control.close()
        self.coordinator.close()
        with self._lock:
            watches, self._lock_watches = list(self._lock_watches.values()), {}
        for shared in watches:
            shared.release()
        if self._driver is not None:
            self._driver.close()
        if self._owns_spark and self._spark is not None:
            try:
                self._spark.stop()
            except Exception as exc:  # Ctrl-C in a terminal signals the JVM too: it may be gone already
                log.info("Spark session already stopped (%s)", type(exc).__name__)
        self._stopped.set()
        log.info("stopped")

    # -- the cycle ---------------------------------------------------------------------------------
    def _watch_versions(self, result: DiscoveryResult) -> None:
        """Alert (metric and log line) when a table's version changed since the last cycle: lakeward never
        changes one by itself, so it was upgraded (or downgraded) by `lakeward upgrade` or a Hudi writer.
        Plans found under the old version are not run (the runner checks `WorkItem.table_version`)."""
        versions = {s.ref.name: s.table_version for s in result.states}
        changes = version_changes(self._versions, versions)
        for change in changes:
            log.warning(
                "table %s changed from table version %d to %d since the last discovery cycle; plans made "
                "under version %d will not run, new ones follow version %d's rules",
                change.table,
                change.before,
                change.after,
                change.before,
                change.after,
            )
        self.metrics.observe_versions_by_table(versions, (c.table for c in changes))
        self._versions = {**self._versions, **versions}

    def cycle(self) -> None:
        """One discovery cycle, then claim and start as much due work as the limits allow."""
        if self._draining or self.runner is None:
            return
        self._record_unrecorded()
        roots = self.settings.tables.roots
        result = discover(
            self.settings.static_tables(),
            [r.path for r in roots],
            self.cache,
            max_depth=max((r.max_depth for r in roots), default=3),
            pool=self._discovery_pool,
            load_timeout_s=self.settings.tables.load_timeout_s,
        )
        now = time.time()
        ages: dict[str, float] = {}
        pending = [p for s in result.states for p in s.pending_plans]
        for state in result.states:
            for plan in state.pending_plans:
                ages[plan.instant] = max(0.0, now - instant_moment(plan.instant, state.timeline_timezone).timestamp())
        refs = [s.ref for s in result.states] + [p.table for p in result.problems]
        self.metrics.observe_discovery(refs, pending, result.problems, result.seconds, now, ages)
        self.metrics.observe_table_versions((s.table_version, s.read_only is not None) for s in result.states)
        self._watch_versions(result)
        for problem in result.problems:
            log.warning("table %s cannot be read: %s", problem.table.name, problem.error)
        with self._lock:
            self._last = result
        self._check_overrides()
        paused = self.control.paused()
        quarantined = self.control.quarantined()
        self._prune_cancel_requests()
        self.metrics.observe_quarantined(quarantined)
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
        self.metrics.ready.set(1 if self.ready else 0)
        policies = {s.ref.name: self._policy(s.ref.name, paused) for s in result.states}
        decisions = plan_decisions(result.states, policies, dt.datetime.now(dt.UTC))
        running = self.runner.running_keys()
        by_key = {d.item.key: d for d in decisions if d.item is not None and d.item.key not in running}
        items = self._queue([d.item for d in by_key.values() if d.runs and d.item is not None], result)
        gate = self._gate(quarantined, {s.ref.name: s for s in result.states}, probe=False)
        skipped = {key: d for key, d in by_key.items() if not d.runs}  # due work the planner holds back
        started = 0
        for item in items:
            admitted = admit(by_key[item.key], gate)
            if admitted.reasons:
                skipped[item.key] = admitted
                continue
            submitted = self.runner.submit(item, quarantined=set(quarantined))
            if submitted.run is None:
                log.info("not running due work %s: %s", item.key, submitted.reason)
            started += submitted.run is not None
        self._log_skipped(skipped)
        log.debug(
            "cycle: %d table(s), %d problem(s), %d item(s), %d started in %.2fs",
            len(result.states),
            len(result.problems),
            len(items),
            started,
            result.seconds,
        )
        self._assess_health(result)

    def _queue(self, due: list[WorkItem], result: DiscoveryResult) -> list[WorkItem]:
        """The cycle's due work in the order to take it (`services/fairness.py`): starving tables
        (by the last cycle's health scores) first, then groups by their fair share."""
        shares = shares_for(self.settings, [s.ref for s in result.states], result.found_under)
        self._shares = shares
        served = self.ledger.served({shares[i.table.name].group for i in due}, {i.table.name for i in due})
        with self._lock:
            scores = {name: float(h.report.score) for name, h in self._health.items() if h.report is not None}
        return order_fairly(due, shares, served, scores, self.settings.scheduling.starving_score)

    def _log_skipped(self, skipped: dict[str, Decision]) -> None:
        """Log each due work item that is not run, with every reason -- once, and again when they change."""
        summaries = {key: d.summary() for key, d in skipped.items()}
        for key, summary in summaries.items():
            if self._skipped.get(key) != summary:
                log.info("not running due work %s", summary)
        self._skipped = summaries

    def _policy(self, name: str, paused: dict[str, PauseEntry]) -> Policy:
        """The planning policy of a table: its settings, and the on-call pause (who, when, why)."""
        entry = paused.get(name)
        note = ""
        if entry is not None:
            since = dt.datetime.fromtimestamp(entry.since, dt.UTC).isoformat()
            note = f"paused by on-call via {entry.replica} since {since}: {entry.reason or 'no reason given'}"
        overridden = name in self.settings.policies.overrides
        return policy_from_settings(self.settings.policy_for(name), entry is not None, note, overridden)

    def _gate(self, quarantined: dict[str, Any], states: dict[str, TableState], *, probe: bool) -> Gate:
        """What stops planned work at claim time. `probe`: also look at live claims and the table
        lock (explain does; the cycle leaves claims to `try_claim` and locks to the run)."""
        assert self.runner is not None
        runner = self.runner

        def held_back(item: WorkItem) -> str | None:
            if item.action is ServiceAction.ORPHAN_CLEAN and item.instant is None:
                spaced = self._orphan_clean_spacing(item.table.name)
                if spaced is not None:
                    return spaced
            if self._proposable(item, states):
                return None
            noted = self._not_due.get((item.table.name, item.action.value), ProgressMark(""))
            state = states.get(item.table.name)
            moved = self._moved(state, item.action, noted) if state is not None else 0
            what = "rewrite(s)" if item.action is ServiceAction.CLEAN else "completed instant(s)"
            return (
                f"its last run found nothing to do (the timeline then ended at {noted}); it is proposed again "
                f"after {self._gap(item)} {what} since ({moved} so far)"
            )

        def unavailable(action: ServiceAction) -> str | None:
            if action in execution.UNAVAILABLE_ACTIONS:
                return f"{action.value} is not available in this version of lakeward"
            if not self.coordinator.connected:  # (claims would fail: not "claimed by another run")
                return f"this replica cannot claim work now: the {self.coordinator.description} are unreachable"
            return None

        if not probe:
            return Gate(quarantined, capacity=runner.refusal, unavailable=unavailable, held_back=held_back)
        locks: dict[str, str | None] = {}  # one probe per table

        def lock(ref: TableRef) -> str | None:
            if ref.name not in locks:
                state = states.get(ref.name)
                locks[ref.name] = self._lock_holder(ref, state.hoodie_name if state is not None else "")
            return locks[ref.name]

        def claimed(key: str) -> tuple[str, float | None] | None:
            try:
                return self.coordinator.claimed_by(key)
            except CoordinatorError:  # unreachable: `unavailable` says so
                return None

        return Gate(
            quarantined,
            claimed=claimed,
            capacity=runner.refusal,
            unavailable=unavailable,
            lock=lock,
            held_back=held_back,
        )

    def _orphan_clean_spacing(self, table: str) -> str | None:
        """Why an orphan search on `table` waits: its last run on this replica is recent (None: it is due)."""
        interval = self.settings.policy_for(table).orphan_clean.interval_s
        last = max(
            (r.created_at for r in self.runs() if r.table.name == table and r.action is ServiceAction.ORPHAN_CLEAN),
            default=None,
        )
        if last is None or time.time() - last >= interval:
            return None
        since = dt.datetime.fromtimestamp(last, dt.UTC).isoformat()
        return (
            f"the last orphan_clean run on this replica started at {since}, within orphan_clean.interval_s={interval:g}"
        )

    def _lock_holder(self, ref: TableRef, hoodie_name: str) -> str | None:
        """Why the table lock cannot be taken now (another writer holds it), None when it is free.

        Takes the lock without waiting and gives it back at once: the lock its writers and the daemon's runs
        take, keyed (unless a lock key is configured) by `hoodie_name`, the table's `hoodie.table.name`.
        """
        options = {k: v for k, v in self.table_options(ref).items() if k.startswith("hoodie.write.lock.")}
        try:
            provider = lock_provider_for(ref.path, hoodie_name or ref.name, options)
        except LakewardError as exc:
            return f"the table lock is misconfigured: {exc}"
        try:
            provider.acquire(timeout_s=0)
        except LockError as exc:
            return f"the table lock is held by another writer: {exc}"
        except Exception as exc:  # ZooKeeper unreachable: a run could not take it either
            return f"the table lock cannot be taken: {type(exc).__name__}: {exc}"
        else:
            provider.release()
        finally:
            provider.close()
        return None

    def _loaded_state(self, ref: TableRef) -> TableState:
        try:
            return load_state(ref, self.cache)
        except Exception as exc:
            raise TableUnreadableError(f"{ref.name} cannot be read: {type(exc).__name__}: {exc}") from None

    def _read_table(self, ref: TableRef, read: Callable[[], _T]) -> _T:
        """`read()` of a table for an API call, within `tables.load_timeout_s`: a hung mount or bucket gets
        the caller a TableUnreadableError (HTTP 409) instead of holding an API thread for ever."""
        try:
            return read_within(self.cache, ref, read, self._table_reads, self.settings.tables.load_timeout_s)
        except HungReadError as exc:
            raise TableUnreadableError(f"{ref.name} cannot be read: {exc}") from None

    def hung_reads(self) -> int:
        """Reads of table storage that outlived their timeout and still have not returned (their threads
        cannot be stopped: a process with some exits without waiting for them)."""
        with self.cache._lock:
            return sum(1 for future, _ in self.cache.hung.values() if not future.done())

    def explain(self, name: str, action: ServiceAction | None = None) -> list[Decision]:
        """For each action on a table (or one), what the daemon would plan or run now and, if not,
        every reason why (the planner's and the claim-time checks'), from the table's current state."""
        if self.runner is None:
            raise TriggerError("the daemon is not started")
        ref = self.table_ref(name)
        state = self._read_table(ref, lambda: self._loaded_state(ref))
        decisions = decide(state, self._policy(name, self.control.paused()), dt.datetime.now(dt.UTC))
        gate = self._gate(self.control.quarantined(), {name: state}, probe=True)
        return [admit(d, gate) for d in decisions if action is None or d.action is action]

    def _assess_health(self, result: DiscoveryResult) -> None:
        """Score every table of the cycle (after its work started: health reads are not urgent)."""
        health = assess_health(
            result.states,
            self.table_options,
            lambda name: self.settings.policy_for(name).health,
            self.cache,
            max_age_s=self.settings.tables.health_refresh_s,
            pool=self._health_pool,
            timeout_s=self.settings.tables.load_timeout_s,
        )
        for name, h in health.items():
            if h.error is not None:
                log.warning("health of table %s cannot be computed: %s", name, h.error)
        self.metrics.observe_health({name: h.report for name, h in health.items()})
        with self._lock:
            self._health = health

    def _check_overrides(self) -> None:
        """Warn (at the first cycle and whenever it changes) about overrides that name no table."""
        unmatched = self.unmatched_overrides()
        if unmatched != self._unmatched_overrides:
            self._unmatched_overrides = unmatched
            if unmatched:
                log.warning(
                    "policies.overrides name no discovered table: %s (tables: %s)",
                    ", ".join(unmatched),
                    ", ".join(sorted(self._known())) or "none",
                )

    def unmatched_overrides(self) -> list[str]:
        """Names under `policies.overrides` that are none of the tables known now (typos, gone tables)."""
        known = self._known()
        return sorted(name for name in self.settings.policies.overrides if name not in known)

    # -- on-call surface -----------------------------------------------------------------------
    def _known(self) -> dict[str, TableRef]:
        with self._lock:
            last = self._last
        refs = {r.name: r for r in self.settings.static_tables()}
        if last is not None:
            refs.update({s.ref.name: s.ref for s in last.states})
            refs.update({p.table.name: p.table for p in last.problems})
        return refs

    def table_ref(self, name: str) -> TableRef:
        ref = self._known().get(name)
        if ref is None:
            raise UnknownTableError(name)
        return ref

    def tables(self) -> list[TableView]:
        with self._lock:
            last = self._last
        states = {s.ref.name: s for s in last.states} if last else {}
        problems = {p.table.name: p.error for p in last.problems} if last else {}
        paused = self.control.paused()
        return [
            TableView(
                ref,
                states.get(name),
                problems.get(name),
                name in paused,
                self.settings.policy_for(name).paused,
                paused.get(name),
            )
            for name, ref in sorted(self._known().items())
        ]

    def table(self, name: str) -> TableView:
        self.table_ref(name)
        return next(t for t in self.tables() if t.ref.name == name)

    def health(self, name: str) -> TableHealth:
        """A table's health as of the last discovery cycle (`error` says why there is no report)."""
        ref = self.table_ref(name)
        with self._lock:
            found = self._health.get(name)
            last = self._last
        if found is not None:
            return found
        problem = next((p.error for p in last.problems if p.table.name == name), None) if last else None
        return TableHealth(ref, None, problem or "not scored yet: no discovery cycle has read this table")

    def healths(self) -> list[TableHealth]:
        """The health of every known table (sorted by name), as of the last cycle."""
        return [self.health(name) for name in sorted(self._known())]

    def runs(self) -> list[RunRecord]:
        return self.runner.runs() if self.runner else []

    def run_dict(self, run: RunRecord) -> dict[str, Any]:
        """A run as the API shows it, with live progress."""
        return run.to_dict(self.runner.progress_of(run) if self.runner else None)

    def deployment_runs(self, limit: int) -> list[dict[str, Any]]:
        """Runs of every replica, newest first: this replica's live from its runner, the others'
        (and its own of earlier starts) from the shared history's view (at most about 1 s old,
        `services/history.py`); at most `limit` of each source."""
        known = self.runs()  # one snapshot of the runner: up to its `recent_runs`, so only `limit` become dicts
        local = [self.run_dict(r) for r in known[:limit]]
        shared = self.history.runs(limit, skip={r["run_id"] for r in local})
        # A run of this replica that started between the two reads (or that the runner knows beyond the
        # first `limit`): its live state, not its recorded one.
        by_id = {r.run_id: r for r in known}
        for i, record in enumerate(shared):
            mine = record["replica"] == self.replica_id
            live = by_id.get(record["run_id"]) if mine else None
            if live is None and mine and record["state"] != "finished" and self.runner is not None:
                live = self.runner.get(record["run_id"])  # started after the snapshot above
            if live is not None:
                shared[i] = self.run_dict(live)
        merged = sorted(local + shared, key=lambda r: float(r["started_at"]), reverse=True)
        return sorted(merged, key=lambda r: r["state"] not in ("running", "waiting_retry"))

    def deployment_run(self, run_id: str) -> dict[str, Any] | None:
        """One run of any replica (live from the runner when it is this replica's), or None."""
        found = self.runner.get(run_id) if self.runner else None
        return self.run_dict(found) if found is not None else self.history.run(run_id)

    def deployment_claims(self) -> list[dict[str, Any]]:
        """Every claim held now in the deployment, with the replica that holds it."""
        out = []
        for key in sorted(self.coordinator.live_claims()):
            owner = self.coordinator.read_owner(key)
            if owner is not None:
                out.append({"key": key, "replica": owner.replica_id, "host": owner.host})
        return out

    def pause_state(self, name: str) -> dict[str, Any]:
        """Whether the table is paused now, and by what: `{"paused": ..., "paused_by": policy|on-call|None}`
        (as `GET /tables/{name}` says it)."""
        by_policy = self.settings.policy_for(name).paused
        on_call = name in self.control.paused()
        by = "policy" if by_policy else ("on-call" if on_call else None)
        return {"paused": by is not None, "paused_by": by}

    def set_paused(self, name: str, paused: bool, reason: str = "") -> bool:
        self.table_ref(name)
        changed = self.control.set_paused(name, paused, self.replica_id, reason)
        log.info("table %s %s by on-call%s", name, "paused" if paused else "resumed", f": {reason}" if reason else "")
        if not paused and self.scheduler is not None:
            self.scheduler.run_soon()
        return changed

    def trigger(
        self,
        name: str,
        action: ServiceAction,
        mode: str = "schedule_and_run",
        instant: str | None = None,
        *,
        dry_run: bool = False,
    ) -> Submitted:
        """Schedule and/or run `action` on a table now (an on-call trigger; compaction is forced).

        `dry_run`: change nothing; the answer is a finished run record (not kept, no claim taken)
        whose `files` and `detail` say what the action would delete or change now.
        """
        if self.runner is None:
            raise TriggerError("the daemon is not started")
        ref = self.table_ref(name)
        table = self._read_table(ref, lambda: execution.open_table(ref, self.table_options(ref)))
        if dry_run:
            return Submitted(self._dry_run(table, ref, action))
        read_only = table.read_only_reason()
        if read_only is not None:
            raise TriggerError(f"{name} is {read_only} (lakeward does not run table services on it)")
        if not table.version.runs_service(action.value):
            raise TriggerError(f"lakeward does not run {action.value} on {table.version} tables yet ({name})")
        execution.check_available(table, action)
        planned = action in execution.PLANNED_ACTIONS
        if not planned and (mode == "schedule" or instant is not None):
            raise TriggerError(f"{action.value} has no plan: trigger it with mode run or schedule_and_run, no instant")
        if instant is not None:
            if mode == "schedule":
                raise TriggerError("mode schedule writes a new plan: do not name an instant")
            if instant not in execution.pending_of(table, action):
                pending = execution.pending_of(table, action)
                raise TriggerError(f"no pending {action.value} plan {instant} on {name}; pending: {pending}")
        elif mode == "run" and planned:
            pending = execution.pending_of(table, action)
            if not pending:
                raise TriggerError(f"no pending {action.value} plan on {name} to run; use mode schedule_and_run")
            instant = pending[0]
        item = WorkItem(ACTION_PRIORITY[action], instant or "", ref, action, instant, "triggered from the API")
        return self.runner.submit(item, trigger=TRIGGER_API, mode=mode, force=True)

    def _dry_run(self, table: Any, ref: TableRef, action: ServiceAction) -> RunRecord:
        try:
            report = execution.dry_run(table, action)
        except execution.ActionUnavailableError as exc:
            raise TriggerError(str(exc)) from None
        item = WorkItem(ACTION_PRIORITY[action], "", ref, action, None, "dry run from the API")
        run = RunRecord(uuid.uuid4().hex[:12], item, TRIGGER_API, "dry_run", False, self.replica_id)
        run.state, run.phase, run.ended_at = "finished", "dry run", time.time()
        run.outcome = Outcome.NOTHING_TO_DO if report.nothing_to_do else Outcome.SUCCEEDED
        run.detail, run.files = report.detail, list(report.files)
        log.info("dry run of %s on %s: %s", action.value, ref.name, report.detail)
        return run

    def cancel(self, run_id: str) -> str | None:
        """Cancel a run of the deployment from the API: its instant stays inflight and the plan is quarantined
        until released. The replica that cancels it (this one, or the one running it, asked through the
        shared control store); None when no replica runs it."""
        if self.runner is None:
            return None
        reason = "cancelled from the API"
        if self.runner.cancel(run_id, Outcome.CANCELLED, reason, quarantine=True):
            return self.replica_id
        found = self.history.run(run_id)
        if found is None or found.get("state") in ENDED or found.get("replica") == self.replica_id:
            return None
        replica = str(found["replica"])
        self.control.request_cancel(run_id, replica, f"{reason} (through {self.replica_id})")
        log.warning("asked replica %s to cancel its run %s", replica, run_id)
        return replica

    def _prune_cancel_requests(self) -> None:
        """Drop cancel requests whose run has ended: a replica that dies between on-call's cancel and
        taking it (`Runner._take_cancel_requests`) leaves its request behind, and nobody else would.
        A request for a run this replica's runner is running stays for the runner to take: the history
        shows a replica's own runs as lost (it is asked only about other runs), and dropping the request
        here let a run cancelled through another replica go on and complete."""
        own = {run.run_id for run in self.runner.running()} if self.runner is not None else set()
        try:
            for run_id in self.control.cancel_requests():
                if run_id in own:
                    continue
                found = self.history.run(run_id)
                if found is None or found.get("state") in ENDED:
                    self.control.drop_cancel_request(run_id)
                    log.info("dropped the cancel request of run %s: the run has ended", run_id)
        except Exception:  # ZooKeeper unreachable: the next cycle tries again
            log.warning("could not prune the cancel requests of ended runs", exc_info=True)

    def release(self, key: str) -> bool:
        released = self.control.release(key)
        if released:
            log.info("released %s from quarantine", key)
            if self.scheduler is not None:
                self.scheduler.run_soon()
        return released

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        return self._stopped.wait(timeout_s)


__all__ = [
    "Daemon",
    "TableUnreadableError",
    "TableView",
    "TriggerError",
    "UnknownTableError",
    "build_spark_session",
    "plan_dict",
    "table_lock_options",
    "table_options_for",
]
