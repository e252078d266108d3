"""The run history and the audit log every replica shares, durable across restarts.

Each replica's runner knows only its own runs, live; behind a load balancer the operator
needs the deployment's. So every run is also written to a shared, retained log of small
JSON records -- at its start (running, on which replica), once it has written its plan (the
instant: a lost run still names it) and at its end (outcome, timings, error) -- and so is
every mutating API call (the audit log). With ZooKeeper the records
are persistent znodes under the coordinator's base path, next to the claims:

- `<base>/history/runs/<started ms>-<run id>`: one run (`RunRecord.to_dict()` plus the
  replica's incarnation);
- `<base>/history/audit/<time ms>-<random>`: one mutating API call;
- `<base>/replicas/<replica id>`: EPHEMERAL, one per live replica, holding its incarnation
  (a random id per process start). A run recorded as running whose replica has no node
  any more, or one of another incarnation (the pod restarted under the same name), was
  lost with its replica: it is shown with state `lost`, never as running forever.

Node names start with the record's time in milliseconds, so the newest records and the
ones past `history.*_max_age_s` are found from the names alone; retention (count and age)
is applied after each write, at most every `PRUNE_EVERY_S`. A record is capped at
`history.record_max_bytes`: its longest texts are shortened until it fits. Without
ZooKeeper (one replica) the same logs live in memory.

Reads of the runs (`/api/v1/runs`, a run by id, the plans running anywhere) are served from a
`RunsView`: the newest `history.runs_max_count` records and the live replicas, refreshed in the
background every `RunsView.REFRESH_S` (1 s) by one thread, so no API request waits on
ZooKeeper for them. A refresh lists the folder and reads only the records it has not seen
finished (a finished run's record does not change again). Another replica's run shows, or
shows its end, within about a second; this replica's own runs are live from its runner
(`Daemon.deployment_runs`). A run id the view does not hold is looked up in ZooKeeper
directly, so a run that just started elsewhere is not answered 404.
"""

from __future__ import annotations

import abc
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from lakeward.services.claims import Coordinator, SessionEvent, ZooKeeperCoordinator
from lakeward.services.settings import HistorySettings

log = logging.getLogger(__name__)

#: A run whose replica is gone (or restarted) while the history says it was running.
LOST = "lost"
#: States of a recorded run after which it changes no more.
ENDED = frozenset({"finished", LOST})


@dataclass(frozen=True)
class Retention:
    """How many records a log keeps, and for how long."""

    max_count: int
    max_age_s: float
    max_bytes: int


def cap_record(record: dict[str, Any], max_bytes: int) -> bytes:
    """`record` as JSON of at most `max_bytes`: its longest string values are shortened until it fits."""
    record = dict(record)
    data = json.dumps(record, default=str).encode("utf-8")
    while len(data) > max_bytes:
        texts = [(len(v), k) for k, v in record.items() if isinstance(v, str) and len(v) > 16]
        if not texts:
            raise ValueError(f"a history record does not fit in {max_bytes} bytes: {sorted(record)}")
        length, key = max(texts)
        record[key] = record[key][: max(8, length // 2 - 8)] + "...[cut]"
        data = json.dumps(record, default=str).encode("utf-8")
    return data


def record_name(at: float, ident: str) -> str:
    """A record's node name: its time in ms first, so names sort by time."""
    return f"{int(at * 1000):013d}-{ident}"


def _name_time(name: str) -> float:
    try:
        return int(name.split("-", 1)[0]) / 1000.0
    except ValueError:
        return 0.0


def _run_id(name: str) -> str:
    """The id part of a record's node name (`record_name`)."""
    return name.split("-", 1)[-1]


def answer(coordinator: ZooKeeperCoordinator, request: Any) -> Any:
    """The answer to one asynchronous kazoo request, waiting at most the coordinator's connection
    timeout (KazooTimeoutError after it): while ZooKeeper is unreachable kazoo queues requests, and
    neither a run's thread (nor the drain waiting for it) nor an API read may wait for the server
    to come back."""
    return request.get(timeout=coordinator.connection_timeout_s)


class RecordLog(abc.ABC):
    """A retained folder of small JSON records named `<time ms>-<id>`. Thread-safe."""

    def __init__(self, retention: Retention):
        self.retention = retention

    @abc.abstractmethod
    def put(self, at: float, ident: str, record: dict[str, Any]) -> None:
        """Write (or overwrite) the record `ident` of time `at`, then apply the retention."""

    @abc.abstractmethod
    def names(self) -> list[str]:
        """Every record's name, oldest first."""

    @abc.abstractmethod
    def read_named(self, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """(name, record) of each of `names` (in that order; gone ones left out)."""

    def read(self, names: list[str]) -> list[dict[str, Any]]:
        """The records of `names` (in that order; gone ones left out)."""
        return [record for _, record in self.read_named(names)]

    @abc.abstractmethod
    def delete(self, names: list[str]) -> None:
        """Remove these records."""

    def newest(self, limit: int, keep: Callable[[str], bool] = lambda name: True) -> list[dict[str, Any]]:
        """Up to `limit` records, newest first, among those whose name `keep` accepts."""
        chosen = [n for n in reversed(self.names()) if keep(n)][:limit]
        return self.read(chosen)

    def get(self, ident: str) -> dict[str, Any] | None:
        """The record `ident` (the newest, should there be two), or None."""
        found = self.newest(1, lambda name: _run_id(name) == ident)
        return found[0] if found else None

    def prune(self, now: float | None = None) -> int:
        """Delete the records past the retention (too old, or beyond the newest max_count); how many."""
        now = time.time() if now is None else now
        names = self.names()
        cutoff = now - self.retention.max_age_s
        doomed = [n for n in names if _name_time(n) < cutoff]
        kept = [n for n in names if _name_time(n) >= cutoff]
        doomed += kept[: max(0, len(kept) - self.retention.max_count)]
        if doomed:
            self.delete(doomed)
        return len(doomed)


class MemoryRecordLog(RecordLog):
    """Records in memory: the in-process coordinator (one replica, nothing shared, not durable)."""

    def __init__(self, retention: Retention):
        super().__init__(retention)
        self._lock = threading.Lock()
        self._records: dict[str, bytes] = {}

    def put(self, at: float, ident: str, record: dict[str, Any]) -> None:
        data = cap_record(record, self.retention.max_bytes)
        with self._lock:
            self._records[record_name(at, ident)] = data
        self.prune()

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._records)

    def read_named(self, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            found = [(n, self._records.get(n)) for n in names]
        return [(n, json.loads(d)) for n, d in found if d is not None]

    def delete(self, names: list[str]) -> None:
        with self._lock:
            for name in names:
                self._records.pop(name, None)


class ZooKeeperRecordLog(RecordLog):
    """Records as persistent znodes in `folder` (module doc)."""

    #: Retention runs after a write at most this often (a prune lists the folder).
    PRUNE_EVERY_S = 10.0

    def __init__(self, coordinator: ZooKeeperCoordinator, folder: str, retention: Retention):
        super().__init__(retention)
        self.coordinator = coordinator
        self.folder = folder
        self._last_prune = 0.0
        self._prune_lock = threading.Lock()

    @property
    def _zk(self) -> KazooClient:
        return self.coordinator.client

    def _answer(self, request: Any) -> Any:
        return answer(self.coordinator, request)

    def put(self, at: float, ident: str, record: dict[str, Any]) -> None:
        data = cap_record(record, self.retention.max_bytes)
        path = f"{self.folder}/{record_name(at, ident)}"
        zk = self._zk
        try:
            self._answer(zk.create_async(path, data, makepath=True))
        except NodeExistsError:
            self._answer(zk.set_async(path, data))
        now = time.monotonic()
        with self._prune_lock:
            due = now - self._last_prune >= self.PRUNE_EVERY_S
            if due:
                self._last_prune = now
        if due:
            self.prune()

    def names(self) -> list[str]:
        try:
            return sorted(self._answer(self._zk.get_children_async(self.folder)))
        except NoNodeError:
            return []

    def read_named(self, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
        zk = self._zk
        pending = [(n, zk.get_async(f"{self.folder}/{n}")) for n in names]  # one round trip for all
        out: list[tuple[str, dict[str, Any]]] = []
        for name, request in pending:
            try:
                data, _ = self._answer(request)
            except NoNodeError:
                continue  # pruned meanwhile
            try:
                out.append((name, json.loads(data.decode("utf-8"))))
            except ValueError:
                continue
        return out

    def delete(self, names: list[str]) -> None:
        zk = self._zk
        for request in [zk.delete_async(f"{self.folder}/{n}") for n in names]:
            try:
                self._answer(request)
            except NoNodeError:
                pass


class Replicas(abc.ABC):
    """Which replicas are alive now, and in which incarnation (module doc)."""

    @abc.abstractmethod
    def register(self) -> None:
        """Announce this replica (again, after a new session)."""

    @abc.abstractmethod
    def live(self) -> dict[str, str]:
        """Live replica id -> its incarnation, read now. Callers read it after the run records they judge:
        a replica registers before it writes a run, so a running record whose replica is missing then
        was really lost (a cached list older than the record would call a new replica's run lost)."""


class LocalReplicas(Replicas):
    """One replica, the in-process coordinator: only this one is alive."""

    def __init__(self, replica: str, incarnation: str):
        self.replica, self.incarnation = replica, incarnation

    def register(self) -> None:
        return None

    def live(self) -> dict[str, str]:
        return {self.replica: self.incarnation}


class ZooKeeperReplicas(Replicas):
    """EPHEMERAL `<base>/replicas/<replica id>` nodes, re-created after a new session."""

    def __init__(self, coordinator: ZooKeeperCoordinator, replica: str, incarnation: str):
        self.coordinator = coordinator
        self.replica, self.incarnation = replica, incarnation
        self.folder = f"{coordinator.base_path}/replicas"

    def register(self) -> None:
        zk = self.coordinator.client
        path = f"{self.folder}/{quote(self.replica, safe='')}"
        data = json.dumps({"incarnation": self.incarnation, "since": time.time()}).encode("utf-8")
        try:
            zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            # A node of an earlier session of this replica that has not expired yet: ours now.
            zk.delete(path)
            zk.create(path, data, ephemeral=True, makepath=True)

    def on_session(self, event: SessionEvent) -> None:
        """After a session loss the ephemeral node is gone: announce this replica again."""
        if event is SessionEvent.NEW_SESSION:
            try:
                self.register()
            except KazooException:
                log.warning("could not announce replica %s again", self.replica, exc_info=True)

    def live(self) -> dict[str, str]:
        zk = self.coordinator.client
        try:
            names = answer(self.coordinator, zk.get_children_async(self.folder))
        except NoNodeError:
            names = []
        found: dict[str, str] = {}
        for name, request in [(n, zk.get_async(f"{self.folder}/{n}")) for n in names]:
            try:
                data, _ = answer(self.coordinator, request)
                found[unquote(name)] = str(json.loads(data.decode("utf-8")).get("incarnation", ""))
            except (NoNodeError, ValueError):
                continue
        return found


class RunsView:
    """The newest run records and the live replicas as of the last refresh, refreshed by a background
    thread (module doc). Thread-safe; before its first refresh it holds nothing (`ready` is False)."""

    #: Seconds between two refreshes: the bound on how stale another replica's runs are shown.
    REFRESH_S = 1.0

    def __init__(self, log: RecordLog, replicas: Replicas, limit: int):
        self.log, self.replicas, self.limit = log, replicas, limit
        self._lock = threading.Lock()
        #: (name, record) newest first, and the live replicas, of the last refresh (replaced whole).
        self._snapshot: tuple[list[tuple[str, dict[str, Any]]], dict[str, str]] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    @property
    def ready(self) -> bool:
        return self._snapshot is not None

    def snapshot(self) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, str]] | None:
        """(name, record) newest first and the live replicas, as of the last refresh (None before it).
        The records are shared: callers copy one before changing it."""
        return self._snapshot

    def refresh(self) -> None:
        """List the records, read the new ones and those not finished when last read, and the live replicas."""
        names = self.log.names()[-self.limit :]
        known = dict(self._snapshot[0]) if self._snapshot is not None else {}
        again = [n for n in names if known.get(n, {}).get("state") != "finished"]
        fresh = dict(self.log.read_named(again))
        # After the records (`Replicas.live`).
        live = self.replicas.live()
        records = [(n, fresh.get(n) or known[n]) for n in reversed(names) if n in fresh or n in known]
        with self._lock:
            self._snapshot = (records, live)

    def start(self) -> None:
        """Refresh now and then every `REFRESH_S` on a daemon thread until `stop` (a failure only logs)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="history-view", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _loop(self) -> None:
        self._refresh_logged()
        while not self._stop.wait(self.REFRESH_S):
            self._refresh_logged()

    def _refresh_logged(self) -> None:
        try:
            self.refresh()
        except Exception:
            if not self._failing:  # once per streak of failures (ZooKeeper down: every second)
                log.warning("could not refresh the view of the shared run history; serving the last one", exc_info=True)
            self._failing = True
        else:
            self._failing = False


class SharedHistory:
    """The deployment's run history and audit log, as one replica reads and writes them (module doc)."""

    def __init__(self, runs: RecordLog, audit: RecordLog, replicas: Replicas, incarnation: str, view_limit: int):
        self.runs_log = runs
        self.audit_log = audit
        self.replicas = replicas
        self.incarnation = incarnation
        #: The runs as reads see them once `start_view()` ran (module doc); until then reads go to the log.
        self.view = RunsView(runs, replicas, view_limit)

    @classmethod
    def for_coordinator(cls, coordinator: Coordinator, settings: HistorySettings) -> SharedHistory:
        """In ZooKeeper next to the claims, or in memory for the in-process coordinator."""
        incarnation = uuid.uuid4().hex[:12]
        runs = Retention(settings.runs_max_count, settings.runs_max_age_s, settings.record_max_bytes)
        audit = Retention(settings.audit_max_count, settings.audit_max_age_s, settings.record_max_bytes)
        if isinstance(coordinator, ZooKeeperCoordinator):
            base = f"{coordinator.base_path}/history"
            replicas = ZooKeeperReplicas(coordinator, coordinator.replica_id, incarnation)
            coordinator.add_session_listener(replicas.on_session)
            return cls(
                ZooKeeperRecordLog(coordinator, f"{base}/runs", runs),
                ZooKeeperRecordLog(coordinator, f"{base}/audit", audit),
                replicas,
                incarnation,
                settings.runs_max_count,
            )
        return cls(
            MemoryRecordLog(runs),
            MemoryRecordLog(audit),
            LocalReplicas(coordinator.replica_id, incarnation),
            incarnation,
            settings.runs_max_count,
        )

    def start_view(self) -> None:
        """Serve run reads from the background-refreshed `RunsView` (module doc)."""
        self.view.start()

    def stop_view(self) -> None:
        self.view.stop()

    # -- runs --------------------------------------------------------------------------------
    def record_run(self, run: dict[str, Any]) -> None:
        """Write a run of this replica (`RunRecord.to_dict()`): at its start and at its end."""
        self.runs_log.put(float(run["started_at"]), str(run["run_id"]), {**run, "incarnation": self.incarnation})

    def _shown(self, record: dict[str, Any], live: dict[str, str]) -> dict[str, Any]:
        """The record as the API shows it; a run still marked running whose replica is gone (or is
        this very process, whose runner no longer knows it: callers ask only for other runs) is lost."""
        incarnation = record.pop("incarnation", None)
        alive = live.get(str(record.get("replica"))) == incarnation and incarnation != self.incarnation
        if record.get("state") != "finished" and not alive:
            record["state"] = LOST
            record["phase"] = record["progress"] = f"lost: replica {record.get('replica')} is gone"
        return record

    def runs(self, limit: int, skip: set[str] | None = None) -> list[dict[str, Any]]:
        """Up to `limit` recorded runs, newest first, without the run ids in `skip` (the runs this
        replica's runner knows: it is the source of their live state)."""
        skip = skip or set()
        snapshot = self.view.snapshot()
        if snapshot is None:
            live = self.replicas.live()
            found = self.runs_log.newest(limit, lambda name: _run_id(name) not in skip)
            return [self._shown(r, live) for r in found]
        records, live = snapshot
        chosen = [r for n, r in records if _run_id(n) not in skip][:limit]
        return [self._shown(dict(r), live) for r in chosen]

    def run(self, run_id: str) -> dict[str, Any] | None:
        """One recorded run (not one this replica's runner knows), or None: from the view, else (not in
        it, or no view yet) from the log."""
        snapshot = self.view.snapshot()
        if snapshot is not None:
            records, live = snapshot
            found = next((r for n, r in records if _run_id(n) == run_id), None)
            if found is not None:
                return self._shown(dict(found), live)
        found = self.runs_log.get(run_id)
        return None if found is None else self._shown(found, self.replicas.live())

    # -- audit -------------------------------------------------------------------------------
    def record_call(self, entry: dict[str, Any]) -> None:
        """Write one audit entry (a mutating API call)."""
        at = float(entry["time"])
        self.audit_log.put(at, uuid.uuid4().hex[:10], entry)

    def audit(self, limit: int) -> list[dict[str, Any]]:
        """Up to `limit` audit entries, newest first."""
        return self.audit_log.newest(limit)


__all__ = [
    "ENDED",
    "LOST",
    "LocalReplicas",
    "MemoryRecordLog",
    "RecordLog",
    "Replicas",
    "RunsView",
    "Retention",
    "SharedHistory",
    "ZooKeeperRecordLog",
    "ZooKeeperReplicas",
    "cap_record",
    "record_name",
]
