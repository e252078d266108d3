"""On-call state shared by every replica: paused tables, failure counts, quarantined plans.

Pausing a table through one replica's API must stop work on all of them, and a plan that
keeps failing must stay quarantined whichever replica would pick it up next; so with
ZooKeeper this state lives in persistent znodes next to the claims:

- `<base>/paused/<table>`: the table is paused (data: who paused it, when, why);
- `<base>/failures/<key>`: failed runs of a work item so far (data: count, last error);
- `<base>/quarantine/<key>`: the work item is quarantined (data: reason, failures, when).

Keys are `WorkItem.key`s (`table/action/instant`), URL-quoted into one node name. With the
in-process coordinator (one replica) the same state lives in memory. Only the replica
holding a claim records failures of that item, so counts need no compare-and-set.
"""

from __future__ import annotations

import abc
import json
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from lakeward.services.claims import ZooKeeperCoordinator


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

    @abc.abstractmethod
    def release(self, key: str) -> bool:
        """Release `key` from quarantine and reset its failures; False if it was not quarantined."""


class MemoryControlStore(ControlStore):
    """For the in-process coordinator (one replica)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: dict[str, PauseEntry] = {}
        self._failures: dict[str, int] = {}
        self._quarantine: dict[str, QuarantineEntry] = {}

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


class ZooKeeperControlStore(ControlStore):
    """Persistent znodes under the coordinator's base path (module doc)."""

    #: Reads of the pause and quarantine folders are cached this long (every API call and cycle
    #: reads them; a change made on another replica shows within this time).
    CACHE_S = 1.0

    def __init__(self, coordinator: ZooKeeperCoordinator):
        self.coordinator = coordinator
        self._cache: dict[str, tuple[float, dict[str, dict[str, Any]]]] = {}
        self._cache_lock = threading.Lock()
        base = coordinator.base_path
        self.paused_path = f"{base}/paused"
        self.failures_path = f"{base}/failures"
        self.quarantine_path = f"{base}/quarantine"

    @property
    def _zk(self) -> KazooClient:
        return self.coordinator.client

    @staticmethod
    def _node(key: str) -> str:
        return quote(key, safe="")

    def _read_all(self, folder: str) -> dict[str, dict[str, Any]]:
        now = time.monotonic()
        with self._cache_lock:
            hit = self._cache.get(folder)
            if hit is not None and now - hit[0] < self.CACHE_S:
                return hit[1]
        found = self._read_folder(folder)
        with self._cache_lock:
            self._cache[folder] = (now, found)
        return found

    def _forget(self) -> None:
        with self._cache_lock:
            self._cache.clear()

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
        self._forget()
        data = json.dumps(value).encode("utf-8")
        zk = self._zk
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)

    def _delete(self, path: str) -> bool:
        self._forget()
        try:
            self._zk.delete(path)
            return True
        except NoNodeError:
            return False

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
        self._forget()
        try:
            self._zk.create(path, json.dumps(asdict(entry)).encode("utf-8"), makepath=True)
            return True
        except NodeExistsError:
            return False

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
        self._delete(f"{self.failures_path}/{self._node(key)}")

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


__all__ = ["ControlStore", "MemoryControlStore", "PauseEntry", "QuarantineEntry", "ZooKeeperControlStore"]
