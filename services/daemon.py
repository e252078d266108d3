"""The daemon: composition root and lifecycle of one replica.

`Daemon(settings)` wires the pieces (coordinator and control store, Spark session and
engine, metrics, runner, scheduler); `start()` connects and starts the discovery cycles;
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

import atexit
import datetime as dt
import logging
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lakeward.core.engine.spark import python_worker_conf
from lakeward.core.exceptions import LakewardError
from lakeward.core.locks import LockProvider, ZooKeeperLockProvider, lock_provider_for
from lakeward.core.locks.zk_client import (
    SharedZooKeeperClient,
    ZooKeeperUnavailableError,
    acquire_shared_client,
    client_key,
)
from lakeward.services import execution
from lakeward.services.claims import Coordinator, InProcessCoordinator, OwnerInfo, SessionEvent, ZooKeeperCoordinator
from lakeward.services.control import ControlStore, MemoryControlStore, PauseEntry, ZooKeeperControlStore
from lakeward.services.discovery import DiscoveryCache, DiscoveryResult, TableState, discover
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import ACTION_PRIORITY, Outcome, PendingPlan, ServiceAction, TableRef, WorkItem
from lakeward.services.planning import instant_moment, plan_work, policy_from_settings
from lakeward.services.runner import TRIGGER_API, Runner, RunRecord, Submitted
from lakeward.services.scheduler import CycleScheduler
from lakeward.services.settings import DaemonSettings, SparkSettings

log = logging.getLogger(__name__)


class UnknownTableError(KeyError):
    """The name is not one of the tables this daemon looks after."""


class TriggerError(ValueError):
    """A trigger that cannot be carried out as asked (bad mode for the action, no such plan...)."""


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
    zk = settings.zookeeper
    if zk.hosts is None:
        return {}
    base = "" if zk.chroot == "/" else zk.chroot
    return {
        "hoodie.write.lock.provider": "zookeeper",
        "hoodie.write.lock.zookeeper.url": zk.hosts,
        "hoodie.write.lock.zookeeper.base_path": f"{base}/locks",
        "hoodie.write.lock.zookeeper.session_timeout_ms": str(int(zk.session_timeout_s * 1000)),
        "hoodie.write.lock.zookeeper.connection_timeout_ms": str(int(zk.connection_timeout_s * 1000)),
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
    }


def build_spark_session(spark: SparkSettings, scratch: Path | None = None) -> Any:
    """The replica's SparkSession: master and conf from settings, FAIR scheduling with one pool per action."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(spark.master).appName(spark.app_name)
    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC"}
    conf.update(python_worker_conf(spark.conf))  # Python workers run this interpreter: they can import lakeward
    if spark.fair_scheduler:
        folder = scratch
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="lakeward-spark-"))
            # Spark reads the allocation file when the session starts; the folder goes when this process exits.
            atexit.register(shutil.rmtree, folder, True)
        pools = "".join(
            f'  <pool name="{p}"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>\n'
            for p in spark.pools
        )
        allocation = folder / "fairscheduler.xml"
        allocation.write_text(f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n')
        conf["spark.scheduler.mode"] = "FAIR"
        conf["spark.scheduler.allocation.file"] = str(allocation)
    conf.update(spark.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class Daemon:
    """One replica of the table-services daemon (module doc)."""

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
        self.coordinator = coordinator or self._build_coordinator()
        self.control: ControlStore = (
            ZooKeeperControlStore(self.coordinator)
            if isinstance(self.coordinator, ZooKeeperCoordinator)
            else MemoryControlStore()
        )
        self.cache = DiscoveryCache()
        self._last: DiscoveryResult | None = None
        #: (table, action) -> completed instants on the table when a new plan of it was found not due:
        #: not proposed again until the table has `_retry_gap` more (else an idle table would be
        #: retried every cycle, and a busy one would keep its slot on no-op runs).
        self._not_due: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
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
        if self.settings.spark.engine == "local":
            return "local"
        from lakeward.core.engine.spark import SparkEngine

        if self._spark is None:
            self._spark = build_spark_session(self.settings.spark)
            self._owns_spark = True
        return SparkEngine(self._spark)

    def table_options(self, ref: TableRef) -> dict[str, str]:
        """The `hoodie.*` options a table is opened with: the daemon's lock defaults, then the policy's."""
        options = table_lock_options(self.settings)
        policy_options = self.settings.policy_for(ref.name).table_options()
        if any(k.startswith("hoodie.write.lock.") for k in policy_options):
            options = {}
        options.update(policy_options)
        return options

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect, start the Spark session (if the engine is spark) and the discovery cycles."""
        with self._lock:
            if self._started:
                return
            self._started = True
        log.info("starting replica %s (%s)", self.replica_id, type(self.coordinator).__name__)
        self.coordinator.start()
        self.coordinator.add_session_listener(self._on_session)
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
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
            resources=self.settings.resources,
            child_logging=(self.settings.log.format, self.settings.log.level, self.replica_id),
        )
        tables = self.settings.tables
        self.scheduler = CycleScheduler(self.cycle, tables.refresh_interval_s, tables.refresh_jitter)
        self.scheduler.start()

    def _on_session(self, event: SessionEvent) -> None:
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
        self.metrics.ready.set(1 if self.ready else 0)

    def _run_finished(self, run: RunRecord) -> None:
        if run.item.instant is None and run.outcome is Outcome.NOTHING_TO_DO:
            with self._lock:
                last = self._last
            state = next((s for s in last.states if s.ref == run.table), None) if last else None
            if state is not None:
                self._not_due[(run.table.name, run.action.value)] = self._progress_mark(state, run.action)
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
    def _progress_mark(state: TableState, action: ServiceAction) -> int:
        """How far the table has moved, as it matters to `action`: a clean can only find more to
        delete after a rewrite (commit, compaction, clustering); the others after any instant."""
        return state.rewrites_since_clean if action is ServiceAction.CLEAN else state.completed_count

    def _proposable(self, item: WorkItem, states: dict[str, TableState]) -> bool:
        noted = self._not_due.get((item.table.name, item.action.value))
        state = states.get(item.table.name)
        if item.instant is not None or noted is None or state is None:
            return True
        moved = self._progress_mark(state, item.action) - noted
        gap = 1 if item.action is ServiceAction.CLEAN else self._retry_gap(item.table.name, item.action)
        return moved >= gap

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
        self.coordinator.close()
        with self._lock:
            watches, self._lock_watches = list(self._lock_watches.values()), {}
        for shared in watches:
            shared.release()
        if self._owns_spark and self._spark is not None:
            try:
                self._spark.stop()
            except Exception as exc:  # Ctrl-C in a terminal signals the JVM too: it may be gone already
                log.info("Spark session already stopped (%s)", type(exc).__name__)
        self._stopped.set()
        log.info("stopped")

    # -- the cycle ---------------------------------------------------------------------------------
    def cycle(self) -> None:
        """One discovery cycle, then claim and start as much due work as the limits allow."""
        if self._draining or self.runner is None:
            return
        roots = self.settings.tables.roots
        result = discover(
            self.settings.static_tables(),
            [r.path for r in roots],
            self.cache,
            max_depth=max((r.max_depth for r in roots), default=3),
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
        for problem in result.problems:
            log.warning("table %s cannot be read: %s", problem.table.name, problem.error)
        with self._lock:
            self._last = result
        paused = self.control.paused()
        quarantined = self.control.quarantined()
        self.metrics.quarantined.clear()
        counts: dict[tuple[str, str], int] = {}
        for key in quarantined:
            table, action, _ = key.rsplit("/", 2)
            counts[(table, action)] = counts.get((table, action), 0) + 1
        for (table, action), n in counts.items():
            self.metrics.quarantined.labels(table, action).set(n)
        self.metrics.zookeeper_connected.set(1 if self.coordinator.connected else 0)
        self.metrics.ready.set(1 if self.ready else 0)
        policies = {
            s.ref.name: policy_from_settings(self.settings.policy_for(s.ref.name), s.ref.name in paused)
            for s in result.states
        }
        items = plan_work(result.states, policies, dt.datetime.now(dt.UTC), self.runner.running_keys())
        by_name = {s.ref.name: s for s in result.states}
        items = [i for i in items if self._proposable(i, by_name)]
        started = 0
        for item in items:
            if item.action in execution.UNAVAILABLE_ACTIONS or item.key in quarantined:
                continue
            if not self.runner.has_capacity(item.table):
                continue
            submitted = self.runner.submit(item, quarantined=set(quarantined))
            started += submitted.run is not None
        log.debug(
            "cycle: %d table(s), %d problem(s), %d item(s), %d started in %.2fs",
            len(result.states),
            len(result.problems),
            len(items),
            started,
            result.seconds,
        )

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

    def runs(self) -> list[RunRecord]:
        return self.runner.runs() if self.runner else []

    def run_dict(self, run: RunRecord) -> dict[str, Any]:
        """A run as the API shows it, with live progress."""
        return run.to_dict(self.runner.progress_of(run) if self.runner else None)

    def set_paused(self, name: str, paused: bool, reason: str = "") -> bool:
        self.table_ref(name)
        changed = self.control.set_paused(name, paused, self.replica_id, reason)
        log.info("table %s %s by on-call%s", name, "paused" if paused else "resumed", f": {reason}" if reason else "")
        if not paused and self.scheduler is not None:
            self.scheduler.run_soon()
        return changed

    def trigger(
        self, name: str, action: ServiceAction, mode: str = "schedule_and_run", instant: str | None = None
    ) -> Submitted:
        """Schedule and/or run `action` on a table now (an on-call trigger; compaction is forced)."""
        if self.runner is None:
            raise TriggerError("the daemon is not started")
        ref = self.table_ref(name)
        table = execution.open_table(ref, self.table_options(ref))
        if not table.version.writable:
            raise TriggerError(
                f"{name} is read-only: {table.version} (lakeward runs table services on version 6 tables only)"
            )
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

    def cancel(self, run_id: str) -> bool:
        """Cancel a run from the API: its instant stays inflight and the plan is quarantined until released."""
        if self.runner is None:
            return False
        return self.runner.cancel(run_id, Outcome.CANCELLED, "cancelled from the API", quarantine=True)

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
    "TableView",
    "TriggerError",
    "UnknownTableError",
    "build_spark_session",
    "plan_dict",
    "table_lock_options",
]
