"""Claims: exactly one replica runs each work item.

A replica runs a plan only while it holds the plan's *claim*. Two coordinators:

- `ZooKeeperCoordinator` (several replicas): a claim is the EPHEMERAL znode
  `<base>/claims/<table>/<action>/<instant>` holding the owner's identity as JSON
  (replica id, host, pid, started at). Whoever creates it first holds it; it goes away on
  `release`, when the replica's client closes, or when its session expires (a dead replica
  frees its claims after the session timeout, and recovery picks its inflight plans up).
- `InProcessCoordinator` (one replica): a dict under a lock. It refuses to start while
  another in-process coordinator (in this or another process on this machine) looks after
  any of the same tables, through one exclusive `flock` per table in a lock directory
  (default `$TMPDIR/lakeward-coordinator-locks`, file named after the SHA-256 of the table
  path). A lock directory rather than a file under each table root: table roots may be
  object stores (s3://, gs://) where no lock file can be held, and `flock` locks vanish
  with the process, so a crashed daemon never leaves a stale lock behind.

Fencing. The ZooKeeper session is watched: when it is SUSPENDED (connection lost, session
maybe alive) or LOST (expired), registered callbacks are called (off kazoo's thread) with a
`SessionEvent` -- the runner cancels the Spark job group of every running plan -- and every
claim taken before that moment counts as invalid from then on, even if the same session
comes back (the runner has cancelled their work; it releases them and the plans are picked
up again). After an expiry kazoo reconnects with a new session: the old claims are gone
(ephemeral), which is reported as `SessionEvent.NEW_SESSION` and as `lost` entries in the
claim log. `is_valid` is the check right before completing an instant: the connection is up,
no suspension since the claim, and the node still exists and belongs to our session.
"""

from __future__ import annotations

import abc
import collections
import enum
import fcntl
import hashlib
import json
import logging
import os
import queue
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote, unquote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from lakeward.core.exceptions import LakewardError
from lakeward.core.locks.zk_client import (
    SharedZooKeeperClient,
    ZooKeeperUnavailableError,
    acquire_shared_client,
    client_key,
    kazoo_client_options,
)
from lakeward.services.model import Claim, TableRef, table_location

log = logging.getLogger(__name__)

DEFAULT_BASE_PATH = "/lakeward"
DEFAULT_LOCK_DIR = Path(tempfile.gettempdir()) / "lakeward-coordinator-locks"


class CoordinatorError(LakewardError):
    """The coordinator cannot work: no ZooKeeper, closed, or another instance owns the tables."""


class StartAborted(CoordinatorError):
    """`start(abort=...)` gave up waiting for ZooKeeper because `abort` was set (a SIGTERM at start-up)."""


#: How often a start that waits for ZooKeeper looks at its `abort` event.
ABORT_CHECK_S = 0.2


class SessionEvent(str, enum.Enum):
    """What happened to the coordinator's session, as passed to session callbacks."""

    SUSPENDED = "suspended"  # connection lost; session maybe alive; claims count as invalid
    LOST = "lost"  # session expired: every claim is gone
    RECONNECTED = "reconnected"  # the same session is back (old claims stay invalid)
    NEW_SESSION = "new_session"  # connected with a new session after a loss: old claims are gone


@dataclass(frozen=True)
class OwnerInfo:
    """Who holds a claim: stored as JSON in the claim node."""

    replica_id: str
    host: str
    pid: int
    started_at: float

    @classmethod
    def current(cls, replica_id: str | None = None) -> OwnerInfo:
        host, pid = socket.gethostname(), os.getpid()
        return cls(replica_id or f"{host}-{pid}-{uuid.uuid4().hex[:8]}", host, pid, time.time())

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> OwnerInfo:
        raw = json.loads(data.decode("utf-8"))
        return cls(str(raw["replica_id"]), str(raw["host"]), int(raw["pid"]), float(raw["started_at"]))


@dataclass(frozen=True)
class ClaimLogEntry:
    """One line of the claim log: `event` is claimed, conflict, released, lost or invalid."""

    time: float
    key: str
    owner: str
    event: str


SessionCallback = Callable[[SessionEvent], None]


def split_key(item_key: str) -> tuple[str, str, str]:
    """`table/action/instant` -> its parts (the table name may itself hold slashes)."""
    parts = item_key.rsplit("/", 2)
    if len(parts) != 3 or not all(parts) or any(p in (".", "..") for p in parts[1:]):
        raise ValueError(f"work item key {item_key!r} is not table/action/instant")
    return parts[0], parts[1], parts[2]


@dataclass
class _Held:
    claim: Claim
    epoch: int
    session_id: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Coordinator(abc.ABC):
    """Claims work items so that one replica runs each. Thread-safe."""

    def __init__(self, owner: OwnerInfo | None = None, *, claim_log_size: int = 10_000):
        self.owner = owner or OwnerInfo.current()
        self._mutex = threading.RLock()
        self._held: dict[str, _Held] = {}
        self._log: collections.deque[ClaimLogEntry] = collections.deque(maxlen=claim_log_size)
        self._callbacks: list[SessionCallback] = []

    @property
    def replica_id(self) -> str:
        return self.owner.replica_id

    # -- lifecycle --------------------------------------------------------------------------
    @abc.abstractmethod
    def start(self, abort: threading.Event | None = None) -> None:
        """Connect / take the guard. Idempotent. A wait for the connection ends early, with
        :class:`StartAborted`, once `abort` is set."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release every claim and disconnect. Idempotent."""

    def __enter__(self) -> Coordinator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- claims -----------------------------------------------------------------------------
    @abc.abstractmethod
    def try_claim(self, item_key: str, owner_info: OwnerInfo | None = None) -> Claim | None:
        """Claim `item_key` (WorkItem.key); None if someone (this replica included) holds it."""

    @abc.abstractmethod
    def release(self, claim: Claim) -> bool:
        """Give the claim up; True if it was still ours and is now deleted."""

    @abc.abstractmethod
    def is_valid(self, claim: Claim) -> bool:
        """Fencing check right before completion: the claim still exists and is ours."""

    def invalid_reason(self, claim: Claim) -> str | None:
        """Why `is_valid(claim)` is False (for the run's record and log); None when the claim is valid."""
        return None if self.is_valid(claim) else "no longer held by this replica"

    @abc.abstractmethod
    def live_claims(self) -> set[str]:
        """Keys claimed by anyone right now."""

    @abc.abstractmethod
    def read_owner(self, item_key: str) -> OwnerInfo | None:
        """Who holds `item_key` (None if nobody)."""

    def claimed_by(self, item_key: str) -> tuple[str, float | None] | None:
        """Who holds `item_key` and since when (epoch seconds, None if unknown); None if nobody.

        The time is that of this coordinator's claim log (claims it took); a ZooKeeper
        coordinator reads the claim node's creation time.
        """
        owner = self.read_owner(item_key)
        if owner is None:
            return None
        with self._mutex:
            since = next((e.time for e in reversed(self._log) if e.key == item_key and e.event == "claimed"), None)
        return owner.replica_id, since

    def held_claims(self) -> list[Claim]:
        """The claims this coordinator took and has not released (valid or not)."""
        with self._mutex:
            return [h.claim for h in self._held.values()]

    @property
    def claim_log(self) -> list[ClaimLogEntry]:
        """The most recent claim events of this coordinator, oldest first."""
        with self._mutex:
            return list(self._log)

    def _record(self, key: str, owner: str, event: str, at: float | None = None) -> None:
        with self._mutex:
            self._log.append(ClaimLogEntry(time.time() if at is None else at, key, owner, event))

    # -- session ----------------------------------------------------------------------------
    def add_session_listener(self, callback: SessionCallback) -> None:
        """Call `callback(event)` on every session change (never on ZooKeeper's own thread)."""
        with self._mutex:
            self._callbacks.append(callback)

    def remove_session_listener(self, callback: SessionCallback) -> None:
        with self._mutex:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    @property
    @abc.abstractmethod
    def connected(self) -> bool:
        """Claims can be taken and validated now."""

    @property
    def description(self) -> str:
        """What holds the claims, for messages."""
        return "in-process claims"


# ------------------------------------------------------------------------------------------
# ZooKeeper
# ------------------------------------------------------------------------------------------


class ZooKeeperCoordinator(Coordinator):
    """Claims as ephemeral znodes `<base>/claims/<table>/<action>/<instant>` (see module doc)."""

    def __init__(
        self,
        hosts: str,
        *,
        chroot: str | None = None,
        base_path: str = DEFAULT_BASE_PATH,
        session_timeout_s: float = 30.0,
        connection_timeout_s: float = 15.0,
        auth_data: Sequence[tuple[str, str]] | None = None,
        default_acl: Sequence[Any] | None = None,
        owner: OwnerInfo | None = None,
        claim_log_size: int = 10_000,
        private_client: bool = False,
    ):
        super().__init__(owner, claim_log_size=claim_log_size)
        for name, value in (("base_path", base_path), ("chroot", chroot)):
            if value is not None and (
                not value.startswith("/") or "//" in value or (value != "/" and value.endswith("/"))
            ):
                raise ValueError(f"ZooKeeper {name} {value!r} must be absolute, like /lakeward")
        self.hosts = hosts
        self.chroot = chroot if chroot not in (None, "/") else None
        # Absolute paths on an unchrooted client: the same client serves the table locks,
        # whose nodes live under `<chroot>/locks` (the daemon's `table_lock_options`).
        self.base_path = (self.chroot or "") + (base_path.rstrip("/") or "")
        self.claims_path = f"{self.base_path}/claims"
        self.connection_timeout_s = connection_timeout_s
        self.private_client = private_client
        options = kazoo_client_options(
            hosts,
            session_timeout_s=session_timeout_s,
            connection_timeout_s=connection_timeout_s,
            auth_data=auth_data,
        )
        if default_acl is not None:
            options["default_acl"] = list(default_acl)
        self._client_options = options
        self._shared: SharedZooKeeperClient | None = None
        self._closed = False
        self._state = KazooState.LOST  # before start
        self._epoch = 0  # bumped on every SUSPENDED / LOST: claims of older epochs are invalid
        self._session_id: int | None = None
        self._events: queue.Queue[SessionEvent | None] = queue.Queue()
        self._dispatcher: threading.Thread | None = None
        self._lifecycle = threading.Lock()
        #: (path, session) of claim nodes released while ZooKeeper was unreachable: deleted once the
        #: session reconnects (else they would stay, refusing the key to every other replica, as long
        #: as the session lives); an ended session took them with it.
        self._unreleased: list[tuple[str, int]] = []

    @property
    def description(self) -> str:
        return f"ZooKeeper claims at {self.hosts}{self.claims_path}"

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def connected(self) -> bool:
        client = self._client
        return client is not None and client.connected and self._state == KazooState.CONNECTED

    @property
    def state(self) -> str:
        """connected, suspended, lost or closed (for metrics and /readyz)."""
        if self._closed:
            return "closed"
        return str(self._state).lower()

    @property
    def _client(self) -> KazooClient | None:
        """The kazoo client in use (shared with the process's table locks unless `private_client`)."""
        shared = self._shared
        return shared.current if shared is not None else None

    @property
    def shared_client(self) -> SharedZooKeeperClient | None:
        """The shared client this coordinator holds a share of (None before start and after close)."""
        return self._shared

    # -- lifecycle --------------------------------------------------------------------------
    def _connect(self, shared: SharedZooKeeperClient, abort: threading.Event | None) -> KazooClient:
        """The connected client, waited for up to `connection_timeout_s`, or until `abort` is set."""
        if abort is None:
            return shared.client(self.connection_timeout_s)
        deadline = time.monotonic() + self.connection_timeout_s
        while True:
            try:
                return shared.client(max(0.0, min(ABORT_CHECK_S, deadline - time.monotonic())))
            except ZooKeeperUnavailableError:
                if abort.is_set():
                    raise StartAborted(f"stopped while waiting for ZooKeeper at {self.hosts}") from None
                if time.monotonic() >= deadline:
                    raise

    def start(self, abort: threading.Event | None = None) -> None:
        # The lifecycle lock, not the state mutex: kazoo's listener takes the mutex, so no
        # ZooKeeper call may wait while holding it.
        with self._lifecycle:
            if self._closed:
                raise CoordinatorError(f"the {self.description} is closed")
            if self._shared is not None:
                return
            if self.private_client:
                shared = SharedZooKeeperClient(client_key(self._client_options), self._client_options)
                shared._retain()
            else:
                shared = acquire_shared_client(self._client_options)
            with self._mutex:
                self._shared = shared
            shared.add_listener(self._on_state)
            try:
                client = self._connect(shared, abort)
                client.ensure_path(self.claims_path)  # the chroot too: the client is not chrooted
            except (ZooKeeperUnavailableError, KazooException, StartAborted) as exc:
                with self._mutex:
                    self._shared = None
                shared.remove_listener(self._on_state)
                shared.release()
                if isinstance(exc, StartAborted):
                    raise
                if isinstance(exc, ZooKeeperUnavailableError):
                    raise CoordinatorError(
                        f"cannot connect to ZooKeeper at {self.hosts} within {self.connection_timeout_s:g}s"
                    ) from None
                raise CoordinatorError(f"cannot create {self.claims_path} in ZooKeeper: {exc!r}") from exc
            with self._mutex:
                self._state = KazooState.CONNECTED if shared.connected else KazooState.SUSPENDED
                self._session_id = shared.session_id
            self._dispatcher = threading.Thread(target=self._dispatch, name="lakeward-claims-session", daemon=True)
            self._dispatcher.start()

    def close(self) -> None:
        with self._lifecycle:
            if self._closed:
                return
            for claim in self.held_claims():
                try:
                    self.release(claim)
                except Exception:  # best effort: the session's end deletes the nodes anyway
                    log.debug("could not release %s on close", claim.key, exc_info=True)
            self._closed = True
            shared, self._shared = self._shared, None
            if shared is not None:
                shared.remove_listener(self._on_state)
                shared.release()  # the last share ends the session
            self._events.put(None)
            if self._dispatcher is not None and self._dispatcher is not threading.current_thread():
                self._dispatcher.join(timeout=5)

    # -- session watching -------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        """kazoo's listener (its event thread): record and queue, never block or call ZooKeeper."""
        client = self._client
        if self._closed or client is None:
            return
        event: SessionEvent | None = None
        with self._mutex:
            previous, self._state = self._state, state
            if state in (KazooState.SUSPENDED, KazooState.LOST):
                self._epoch += 1
                event = SessionEvent.SUSPENDED if state == KazooState.SUSPENDED else SessionEvent.LOST
                if state == KazooState.LOST:
                    self._mark_all_lost()
            elif state == KazooState.CONNECTED and previous != KazooState.CONNECTED:
                session = client.client_id[0] if client.client_id else None
                if session != self._session_id:
                    self._session_id = session
                    self._mark_all_lost()
                    event = SessionEvent.NEW_SESSION
                else:
                    event = SessionEvent.RECONNECTED
        if event is not None:
            log.warning("ZooKeeper claims session: %s (%s)", event.value, self.description)
            self._events.put(event)

    def _delete_unreleased(self) -> None:
        """Delete the claim nodes released while ZooKeeper was unreachable, that this session still
        owns and no claim of this replica holds again (on the dispatcher thread, not kazoo's)."""
        with self._mutex:
            leftovers, self._unreleased = self._unreleased, []
            held = {h.claim.path for h in self._held.values()}
            session = self._session_id
        client = self._client
        for path, owner in leftovers:
            if client is None or owner != session or path in held:
                continue
            try:
                stat = client.exists(path)
                if stat is not None and int(stat.ephemeralOwner) == owner:
                    client.delete(path, version=stat.version)
                    log.info("deleted claim node %s, released while ZooKeeper was unreachable", path)
            except NoNodeError:
                pass
            except KazooException as exc:
                log.warning("could not delete claim node %s (it stays until the session ends): %r", path, exc)

    def _mark_all_lost(self) -> None:
        for key, held in self._held.items():
            if not held.extra.get("lost"):
                held.extra["lost"] = True
                self._log.append(ClaimLogEntry(time.time(), key, held.claim.owner, "lost"))

    def _dispatch(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            if event is SessionEvent.RECONNECTED:
                self._delete_unreleased()
            elif event in (SessionEvent.LOST, SessionEvent.NEW_SESSION):
                with self._mutex:
                    self._unreleased.clear()  # ephemeral: gone with the session
            with self._mutex:
                callbacks = list(self._callbacks)
            for callback in callbacks:
                try:
                    callback(event)
                except Exception:
                    log.exception("claims session callback %r failed on %s", callback, event.value)

    # -- paths ------------------------------------------------------------------------------
    def path_of(self, item_key: str) -> str:
        table, action, instant = split_key(item_key)
        return f"{self.claims_path}/{quote(table, safe='')}/{action}/{instant}"

    @property
    def client(self) -> KazooClient:
        """The started kazoo client (for the daemon's other shared state under `base_path`)."""
        return self._require_client()

    def _require_client(self) -> KazooClient:
        client = self._client
        if self._closed:
            raise CoordinatorError(f"the {self.description} is closed")
        if client is None:
            raise CoordinatorError(f"the {self.description} is not started")
        return client

    # -- claims -----------------------------------------------------------------------------
    def try_claim(self, item_key: str, owner_info: OwnerInfo | None = None) -> Claim | None:
        owner = owner_info or self.owner
        path = self.path_of(item_key)
        client = self._require_client()
        with self._mutex:
            if item_key in self._held:
                self._log.append(ClaimLogEntry(time.time(), item_key, owner.replica_id, "conflict"))
                return None
            if not self.connected:
                return None
            epoch = self._epoch
        session = client.client_id[0] if client.client_id else None
        try:
            client.create(path, owner.to_json(), ephemeral=True, makepath=True)
        except NodeExistsError:
            # Ours only if an earlier attempt of this very call created it (a retried create).
            if not self._owned_by(client, path, session, owner.replica_id):
                self._record(item_key, owner.replica_id, "conflict")
                return None
        except KazooException as exc:
            log.warning("cannot claim %s: %r", item_key, exc)
            return None
        claim = Claim(key=item_key, owner=owner.replica_id, path=path)
        with self._mutex:
            wavered = self._epoch != epoch or session != self._session_id
            if not wavered:
                self._held[item_key] = _Held(claim, epoch=epoch, session_id=session)
                self._log.append(ClaimLogEntry(time.time(), item_key, owner.replica_id, "claimed"))
                return claim
        # The session wavered while the node was being created: do not trust it; give it up.
        self._record(item_key, owner.replica_id, "invalid")
        try:
            if self._owned_by(client, path, session, owner.replica_id):
                client.delete(path)
        except KazooException:
            log.debug("could not delete the untrusted claim node %s", path, exc_info=True)
        return None

    @staticmethod
    def _owned_by(client: KazooClient, path: str, session: int | None, replica_id: str) -> bool:
        """The node is ours: our session's and our replica's (one session may serve several coordinators)."""
        try:
            data, stat = client.get(path)
        except KazooException:
            return False
        if session is None or int(stat.ephemeralOwner) != session:
            return False
        try:
            return OwnerInfo.from_json(data).replica_id == replica_id
        except (ValueError, KeyError):
            return False

    def release(self, claim: Claim) -> bool:
        with self._mutex:
            held = self._held.get(claim.key)
            if held is None or held.claim != claim:
                return False
            del self._held[claim.key]
        client = self._client
        released = False
        # Logged with the time before the delete: another replica's claim of the key, logged after
        # its create returned, then never appears to overlap this one in the claim logs.
        before_delete = time.time()
        deferred = held.session_id is not None and not self._closed
        if client is not None and client.connected and held.session_id is not None:
            try:
                stat = client.exists(claim.path)
                if stat is not None and int(stat.ephemeralOwner) == held.session_id:
                    client.delete(claim.path, version=stat.version)
                    released = True
                deferred = False
            except NoNodeError:
                deferred = False
            except KazooException as exc:
                log.warning("could not delete claim node %s: %r", claim.path, exc)
        if deferred and held.session_id is not None:
            # Deleted once the session reconnects; an ended session takes it with it.
            with self._mutex:
                self._unreleased.append((claim.path, held.session_id))
            log.warning("claim node %s is released once ZooKeeper is reachable again", claim.path)
        self._record(claim.key, claim.owner, "released" if released else "lost", before_delete)
        return released

    def is_valid(self, claim: Claim) -> bool:
        return self.invalid_reason(claim) is None

    def invalid_reason(self, claim: Claim) -> str | None:
        client = self._client
        with self._mutex:
            held = self._held.get(claim.key)
            if held is None or held.claim != claim:
                return "this replica released it (or never held it)"
            if held.extra.get("lost"):
                return "marked lost: the ZooKeeper session it was taken in ended"
            if held.epoch != self._epoch:
                return "the ZooKeeper connection was suspended since it was taken"
            if held.session_id != self._session_id:
                return "taken in another ZooKeeper session than the current one"
            if not self.connected or client is None:
                return f"not connected to ZooKeeper (state {self._state})"
        try:
            data, stat = client.get(claim.path)
        except NoNodeError:
            return f"its node {claim.path} no longer exists"
        except KazooException as exc:
            return f"its node could not be read: {exc!r}"
        if int(stat.ephemeralOwner) != held.session_id:
            return f"its node belongs to ZooKeeper session {stat.ephemeralOwner}, not {held.session_id}"
        try:
            owner = OwnerInfo.from_json(data).replica_id
        except (ValueError, KeyError):
            return "its node's owner cannot be parsed"
        return None if owner == claim.owner else f"its node names {owner} as its owner"

    def _reachable_client(self) -> KazooClient:
        """The client, when ZooKeeper answers now: kazoo would queue a read until it is back, and
        an API request or an explain would wait with it."""
        client = self._require_client()
        if not self.connected:
            raise CoordinatorError(f"the {self.description} cannot be read now: not connected ({self.state})")
        return client

    def live_claims(self) -> set[str]:
        """Every claimed key, by anyone: three levels of children, each level read in parallel."""
        client = self._reachable_client()
        try:
            tables = client.get_children(self.claims_path)
            action_reqs = [(t, client.get_children_async(f"{self.claims_path}/{t}")) for t in tables]
            actions = [(t, a) for t, req in action_reqs for a in _children(req)]
            instant_reqs = [(t, a, client.get_children_async(f"{self.claims_path}/{t}/{a}")) for t, a in actions]
            return {f"{unquote(t)}/{a}/{i}" for t, a, req in instant_reqs for i in _children(req)}
        except NoNodeError:
            return set()
        except KazooException as exc:
            raise CoordinatorError(f"cannot list the {self.description}: {exc!r}") from exc

    def read_owner(self, item_key: str) -> OwnerInfo | None:
        client = self._reachable_client()
        try:
            data, _ = client.get(self.path_of(item_key))
        except NoNodeError:
            return None
        return OwnerInfo.from_json(data)

    def claimed_by(self, item_key: str) -> tuple[str, float | None] | None:
        client = self._reachable_client()
        try:
            data, stat = client.get(self.path_of(item_key))
        except NoNodeError:
            return None
        return OwnerInfo.from_json(data).replica_id, stat.ctime / 1000


def _children(request: Any) -> list[str]:
    try:
        return list(request.get())
    except NoNodeError:  # deleted between the two reads
        return []


# ------------------------------------------------------------------------------------------
# In process
# ------------------------------------------------------------------------------------------


class InProcessCoordinator(Coordinator):
    """Claims for a single replica: a dict under a lock, guarded per table by `flock` (module doc)."""

    def __init__(
        self,
        tables: Iterable[TableRef | str],
        *,
        lock_dir: str | Path | None = None,
        owner: OwnerInfo | None = None,
        claim_log_size: int = 10_000,
    ):
        super().__init__(owner, claim_log_size=claim_log_size)
        self.table_paths = sorted({t.path if isinstance(t, TableRef) else str(t) for t in tables})
        self.lock_dir = Path(lock_dir) if lock_dir is not None else DEFAULT_LOCK_DIR
        self._guards: list[IO[str]] = []
        self._started = False
        self._closed = False
        self._claims: dict[str, OwnerInfo] = {}

    @property
    def connected(self) -> bool:
        return self._started and not self._closed

    def guard_file(self, table_path: str) -> Path:
        # the table's location, not its spelling: /x/t and file:///x/t take one guard
        digest = hashlib.sha256(table_location(table_path).encode("utf-8")).hexdigest()[:32]
        return self.lock_dir / f"{digest}.lock"

    def start(self, abort: threading.Event | None = None) -> None:
        with self._mutex:
            if self._closed:
                raise CoordinatorError("the in-process coordinator is closed")
            if self._started:
                return
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            try:
                for table_path in self.table_paths:
                    handle = open(self.guard_file(table_path), "a+")  # noqa: SIM115 (held until close)
                    try:
                        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        handle.seek(0)
                        holder = handle.read().strip() or "unknown"
                        handle.close()
                        raise CoordinatorError(
                            f"another in-process coordinator already looks after table {table_path} "
                            f"({holder}); run one daemon per table set, or use ZooKeeper claims "
                            "for several replicas"
                        ) from None
                    handle.seek(0)
                    handle.truncate()
                    handle.write(json.dumps({"table": table_path, **asdict(self.owner)}))
                    handle.flush()
                    self._guards.append(handle)
            except BaseException:
                self._release_guards()
                raise
            self._started = True

    def _release_guards(self) -> None:
        guards, self._guards = self._guards, []
        for handle in guards:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
            finally:
                handle.close()

    def close(self) -> None:
        with self._mutex:
            if self._closed:
                return
            for held in list(self._held.values()):
                self.release(held.claim)
            self._closed = True
            self._release_guards()

    def _require_started(self) -> None:
        if self._closed:
            raise CoordinatorError("the in-process coordinator is closed")
        if not self._started:
            raise CoordinatorError("the in-process coordinator is not started")

    def try_claim(self, item_key: str, owner_info: OwnerInfo | None = None) -> Claim | None:
        split_key(item_key)
        owner = owner_info or self.owner
        with self._mutex:
            self._require_started()
            if item_key in self._claims:
                self._record(item_key, owner.replica_id, "conflict")
                return None
            self._claims[item_key] = owner
            claim = Claim(key=item_key, owner=owner.replica_id, path=f"memory:{item_key}")
            self._held[item_key] = _Held(claim, epoch=0)
            self._record(item_key, owner.replica_id, "claimed")
            return claim

    def release(self, claim: Claim) -> bool:
        with self._mutex:
            held = self._held.get(claim.key)
            if held is None or held.claim != claim:
                return False
            del self._held[claim.key]
            self._claims.pop(claim.key, None)
            self._record(claim.key, claim.owner, "released")
            return True

    def is_valid(self, claim: Claim) -> bool:
        with self._mutex:
            held = self._held.get(claim.key)
            return self.connected and held is not None and held.claim == claim

    def live_claims(self) -> set[str]:
        with self._mutex:
            return set(self._claims)

    def read_owner(self, item_key: str) -> OwnerInfo | None:
        with self._mutex:
            return self._claims.get(item_key)


__all__ = [
    "ClaimLogEntry",
    "Coordinator",
    "CoordinatorError",
    "InProcessCoordinator",
    "OwnerInfo",
    "SessionCallback",
    "SessionEvent",
    "StartAborted",
    "ZooKeeperCoordinator",
    "split_key",
]
