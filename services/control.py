"""On-call state shared by every replica: paused tables, failure counts, quarantined plans, cancels.

Pausing a table through one replica's API must stop work on all of them, and a plan that
keeps failing must stay quarantined whichever replica would pick it up next; so with
ZooKeeper this state lives in persistent znodes next to the claims:

- `<base>/paused/<table>`: the table is paused (data: who paused it, when, why);
- `<base>/failures/<key>`: failed runs of a work item so far (data: count, last error);
- `<base>/quarantine/<key>`: the work item is quarantined (data: reason, failures, when);
- `<base>/cancels/<run id>`: on-call asked, through another replica, to cancel a run (data: the
  replica that runs it, the reason); that replica cancels it and removes the request.

Keys are `WorkItem.key`s (`table/action/instant`), URL-quoted into one node name. With the
in-process coordinator (one replica) the same state lives in memory. Only the replica
holding a claim records failures of that item, so counts need no compare-and-set.

Every API read and every discovery cycle asks for the paused tables and the quarantine (and
each replica's watch of its runs for the cancel requests, while it runs any), so with
ZooKeeper those folders are read by one background thread every `CACHE_S` and served from
the last read: no request waits on ZooKeeper for them (under plan load the
session also carries the claims' and the run history's writes, each a disk sync on the
server, and requests queued behind them took seconds). A change made through another
replica shows within about `CACHE_S`; one made through this store shows at once (the
folder is read again right after the write).
"""

from __future__ import annotations

import abc
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from lakeward.services.claims import CoordinatorError, ZooKeeperCoordinator

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuarantineEntry:
    """A work item held back until on-call releases it."""

    key: str
    reason: str
    failures: int
    since: float
    replica: str


@dataclass(frozen=True)
class PauseEntry:
    table: str
    since: float
    replica: str
    reason: str = ""


@dataclass(frozen=True)
class CancelRequest:
    run_id: str
    #: The replica that runs the run (and is to cancel it).
    replica: str
    reason: str


class ControlStore(abc.ABC):
    """Paused tables, failure counts and quarantine; thread-safe."""

    # -- pause ------------------------------------------------------------------------------
    @abc.abstractmethod
    def paused(self) -> dict[str, PauseEntry]:
        """Tables paused by on-call, by name."""

    @abc.abstractmethod
    def set_paused(self, table: str, paused: bool, replica: str, reason: str = "") -> bool:
        """Pause or resume a table; True if that changed anything."""

    # -- failures and quarantine ------------------------------------------------------------
    @abc.abstractmethod
    def record_failure(self, key: str, error: str) -> int:
        """One more failed run of `key`; the count so far."""

    @abc.abstractmethod
    def clear_failures(self, key: str) -> None:
        """Forget the failures of `key` (after it succeeded)."""

    @abc.abstractmethod
    def quarantine(self, key: str, reason: str, failures: int, replica: str) -> None:
        """Hold `key` back until released."""

    @abc.abstractmethod
    def quarantined(self) -> dict[str, QuarantineEntry]:
        """Every quarantined key."""

    def close(self) -> None:
        """Stop background work (the ZooKeeper store's refresh thread); the store is not used after."""
        return None

    @abc.abstractmethod
    def release(self, key: str) -> bool:
        """Release `key` from quarantine and reset its failures; False if it was not quarantined."""

    # -- cancel requests --------------------------------------------------------------------
    @abc.abstractmethod
    def request_cancel(self, run_id: str, replica: str, reason: str) -> None:
        """Ask `replica`, which runs `run_id`, to cancel it (a cancel that reached another replica)."""

    @abc.abstractmethod
    def cancel_requests(self) -> dict[str, CancelRequest]:
        """Every pending cancel request, by run id."""

    @abc.abstractmethod
    def drop_cancel_request(self, run_id: str) -> None:
        """Forget the request about `run_id` (done, or its run ended)."""


class MemoryControlStore(ControlStore):
    """For the in-process coordinator (one replica)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: dict[str, PauseEntry] = {}
        self._failures: dict[str, int] = {}
        self._quarantine: dict[str, QuarantineEntry] = {}
        self._cancels: dict[str, CancelRequest] = {}

    def paused(self) -> dict[str, PauseEntry]:
        with self._lock:
            return dict(self._paused)

    def set_paused(self, table: str, paused: bool, replica: str, reason: str = "") -> bool:
        with self._lock:
            if paused == (table in self._paused):
                return False
            if paused:
                self._paused[table] = PauseEntry(table, time.time(), replica, reason)
            else:
                del self._paused[table]
            return True

    def record_failure(self, key: str, error: str) -> int:
        with self._lock:
            self._failures[key] = self._failures.get(key, 0) + 1
            return self._failures[key]

    def clear_failures(self, key: str) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def quarantine(self, key: str, reason: str, failures: int, replica: str) -> None:
        with self._lock:
            self._quarantine[key] = QuarantineEntry(key, reason, failures, time.time(), replica)

    def quarantined(self) -> dict[str, QuarantineEntry]:
        with self._lock:
            return dict(self._quarantine)

    def release(self, key: str) -> bool:
        with self._lock:
            self._failures.pop(key, None)
            return self._quarantine.pop(key, None) is not None

    def request_cancel(self, run_id: str, replica: str, reason: str) -> None:
        with self._lock:
            self._cancels[run_id] = CancelRequest(run_id, replica, reason)

    def cancel_requests(self) -> dict[str, CancelRequest]:
        with self._lock:
            return dict(self._cancels)

    def drop_cancel_request(self, run_id: str) -> None:
        with self._lock:
            self._cancels.pop(run_id, None)


class ZooKeeperControlStore(ControlStore):
    """Persistent znodes under the coordinator's base path (module doc)."""

    #: Seconds between two background reads of the pause and quarantine folders (module doc).
    CACHE_S = 1.0

    def __init__(self, coordinator: ZooKeeperCoordinator):
        self.coordinator = coordinator
        #: folder -> its records as of the last read (replaced whole); a folder is read in the
        #: background once it was asked for.
        self._cache: dict[str, dict[str, dict[str, Any]]] = {}
        #: folder -> the number of the read it holds: a read that began earlier never replaces a later one
        #: (a background read racing a read after this store's own write).
        self._read_no: dict[str, int] = {}
        self._reads = 0
        self._cache_lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        base = coordinator.base_path
        self.paused_path = f"{base}/paused"
        self.failures_path = f"{base}/failures"
        self.quarantine_path = f"{base}/quarantine"
        self.cancels_path = f"{base}/cancels"

    @property
    def _zk(self) -> KazooClient:
        return self.coordinator.client

    @staticmethod
    def _node(key: str) -> str:
        return quote(key, safe="")

    def _read_all(self, folder: str) -> dict[str, dict[str, Any]]:
        """The folder's records as of the last read; read now only the first time it is asked for."""
        with self._cache_lock:
            hit = self._cache.get(folder)
        return hit if hit is not None else self._reread(folder)

    def _read_and_keep(self, folder: str) -> dict[str, dict[str, Any]]:
        """Read the folder from ZooKeeper now and keep the read unless a later one is kept already."""
        with self._cache_lock:
            self._reads += 1
            number = self._reads
        found = self._read_folder(folder)
        with self._cache_lock:
            if number > self._read_no.get(folder, 0):
                self._cache[folder], self._read_no[folder] = found, number
            return self._cache[folder]

    def _reread(self, folder: str) -> dict[str, dict[str, Any]]:
        """Read the folder from ZooKeeper now, keep it, and make sure the background reads run."""
        found = self._read_and_keep(folder)
        with self._cache_lock:
            start = self._thread is None and not self._closed.is_set()
            if start:
                self._thread = threading.Thread(target=self._refresh_loop, name="control-view", daemon=True)
        if start:
            assert self._thread is not None
            self._thread.start()
        return found

    def _refresh_loop(self) -> None:
        """Every `CACHE_S`, read again each folder asked for so far (a failure only logs, once per streak)."""
        while not self._closed.wait(self.CACHE_S):
            if self.coordinator.state == "closed":
                return
            if not self.coordinator.connected:
                continue  # the last read stands until ZooKeeper is back (kazoo would queue the reads)
            with self._cache_lock:
                folders = list(self._cache)
            try:
                for folder in folders:
                    self._read_and_keep(folder)
            except Exception:
                if not self._failing:
                    log.warning("could not read the pause and quarantine state; serving the last read", exc_info=True)
                self._failing = True
            else:
                self._failing = False

    def close(self) -> None:
        self._closed.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _after_write(self, path: str) -> None:
        """Read the written path's folder again when it is one the reads serve (module doc)."""
        folder = path.rsplit("/", 1)[0]
        with self._cache_lock:
            cached = folder in self._cache
        if cached:
            self._reread(folder)

    def _read_folder(self, folder: str) -> dict[str, dict[str, Any]]:
        zk = self._zk
        try:
            names = zk.get_children(folder)
        except NoNodeError:
            return {}
        out: dict[str, dict[str, Any]] = {}
        for name in names:
            try:
                data, _ = zk.get(f"{folder}/{name}")
            except NoNodeError:
                continue
            try:
                out[unquote(name)] = json.loads(data.decode("utf-8") or "{}")
            except ValueError:
                out[unquote(name)] = {}
        return out

    def _put(self, path: str, value: dict[str, Any]) -> None:
        data = json.dumps(value).encode("utf-8")
        zk = self._zk
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)
        self._after_write(path)

    def _delete(self, path: str) -> bool:
        try:
            self._zk.delete(path)
        except NoNodeError:
            return False
        self._after_write(path)
        return True

    def paused(self) -> dict[str, PauseEntry]:
        return {
            table: PauseEntry(table, float(v.get("since", 0)), str(v.get("replica", "")), str(v.get("reason", "")))
            for table, v in self._read_all(self.paused_path).items()
        }

    def set_paused(self, table: str, paused: bool, replica: str, reason: str = "") -> bool:
        path = f"{self.paused_path}/{self._node(table)}"
        if not paused:
            return self._delete(path)
        entry = PauseEntry(table, time.time(), replica, reason)
        try:
            self._zk.create(path, json.dumps(asdict(entry)).encode("utf-8"), makepath=True)
        except NodeExistsError:
            return False
        self._after_write(path)
        return True

    def record_failure(self, key: str, error: str) -> int:
        path = f"{self.failures_path}/{self._node(key)}"
        try:
            data, _ = self._zk.get(path)
            count = int(json.loads(data.decode("utf-8")).get("count", 0)) + 1
        except (NoNodeError, ValueError):
            count = 1
        self._put(path, {"count": count, "last_error": error[:2000], "time": time.time()})
        return count

    def clear_failures(self, key: str) -> None:
        # After every successful run: look first (a read), delete only a count that exists (a write,
        # which the server syncs to disk, queued ahead of every other request of the session).
        # Not while ZooKeeper is unreachable: kazoo would queue the read, and the finished run
        # would keep its slot until ZooKeeper is back.
        if not self.coordinator.connected:
            raise CoordinatorError(f"not connected to ZooKeeper ({self.coordinator.state})")
        path = f"{self.failures_path}/{self._node(key)}"
        if self._zk.exists(path) is not None:
            self._delete(path)

    def quarantine(self, key: str, reason: str, failures: int, replica: str) -> None:
        entry = QuarantineEntry(key, reason[:2000], failures, time.time(), replica)
        self._put(f"{self.quarantine_path}/{self._node(key)}", asdict(entry))

    def quarantined(self) -> dict[str, QuarantineEntry]:
        return {
            key: QuarantineEntry(
                key,
                str(v.get("reason", "")),
                int(v.get("failures", 0)),
                float(v.get("since", 0)),
                str(v.get("replica", "")),
            )
            for key, v in self._read_all(self.quarantine_path).items()
        }

    def release(self, key: str) -> bool:
        self.clear_failures(key)
        return self._delete(f"{self.quarantine_path}/{self._node(key)}")

    def request_cancel(self, run_id: str, replica: str, reason: str) -> None:
        self._put(f"{self.cancels_path}/{self._node(run_id)}", {"replica": replica, "reason": reason[:2000]})

    def cancel_requests(self) -> dict[str, CancelRequest]:
        return {
            run_id: CancelRequest(run_id, str(v.get("replica", "")), str(v.get("reason", "")))
            for run_id, v in self._read_all(self.cancels_path).items()
        }

    def drop_cancel_request(self, run_id: str) -> None:
        self._delete(f"{self.cancels_path}/{self._node(run_id)}")


__all__ = [
    "CancelRequest",
    "ControlStore",
    "MemoryControlStore",
    "PauseEntry",
    "QuarantineEntry",
    "ZooKeeperControlStore",
]
