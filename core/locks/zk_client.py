"""One kazoo client per process and ZooKeeper ensemble, shared by every lock and the daemon's claims.

A kazoo client is one TCP connection, one ZooKeeper session and three threads. Opening one
per table lock leaked them all (a `Table` that was never closed kept its client), until
ZooKeeper's per-address connection cap (`maxClientCnxns`) refused new ones. kazoo clients
are thread-safe, so every user in the process with the same *client key* shares one:

    shared = acquire_shared_client(kazoo_client_options(hosts, ...))
    client = shared.client(timeout_s)   # started on first use, waited for while reconnecting
    ...
    shared.release()                    # the last release stops the client

The key is what makes two sessions different: the hosts (a port added where none is given)
and chroot, the session timeout, auth and default ACL. The other settings (connection and
command retries) are those of the first user.

The shared client is reference-counted: `ZooKeeperLockProvider.close()` (and so
`Table.close()`) and `ZooKeeperCoordinator.close()` release their share; a lock whose table
is never closed keeps its share until the process exits (one connection, not one per table),
and an exit handler closes what is left so that the session's ephemeral nodes go at once
(`close_shared_clients` does the same for a process that goes on without the ensemble).

Sessions. kazoo reconnects by itself: after a connection loss with the same session, and
after an expiry with a new one. Every loss of a session (LOST) bumps `generation`, which is
how users notice that what they held on the old session (lock nodes, claims) is gone even
when the new session is up. A client that stops for good (authentication failed, closed
under us) or belongs to the parent of a forked process is replaced by a new one on the next
`client()` call, with a new generation. Listeners added with `add_listener` get kazoo's
state changes of whichever client is current, and LOST when a client is replaced.

A client cut off from the ensemble for longer than its session timeout treats its session
as expired, as Apache Curator does: every server has expired it by then (or, after an
ensemble was rebuilt from scratch, no server knows it and each refuses it: "client must
try another server", for ever). The client is replaced by one with a new session, and users
get LOST. A session that a restarted server restored from its data directory is given up
too: what was held on it must be taken again, which is what a lock holder has to assume
after that long anyway.

A lock node that its user could not delete because the connection was down
(`abandon_node`) is deleted when the same session reconnects, so it does not hold the lock
against other writers until the session ends.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import KeeperState

log = logging.getLogger(__name__)

DEFAULT_PORT = 2181

StateListener = Callable[[str], None]

#: kazoo states after which a client never reconnects by itself.
_DEAD_STATES = (KeeperState.AUTH_FAILED, KeeperState.CLOSED)


class ZooKeeperUnavailableError(Exception):
    """No connection to ZooKeeper within the time asked for (callers raise their own error)."""


def kazoo_client_options(
    hosts: str,
    *,
    session_timeout_s: float = 60.0,
    connection_timeout_s: float = 15.0,
    num_retries: int = 15,
    retry_wait_s: float = 1.0,
    retry_max_wait_s: float = 16.0,
    auth_data: Sequence[tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for `KazooClient`: session timeout, reconnection and command retries.

    Shared by the table lock and the daemon's claims (`lakeward.services.claims`), so both
    reconnect and retry the same way (and share one client). `hosts` may end with a chroot
    (`h1:2181,h2:2181/app`); `auth_data` is kazoo's list of (scheme, credential), e.g.
    `[("digest", "user:secret")]`.
    """
    options: dict[str, Any] = {
        "hosts": hosts,
        "timeout": session_timeout_s,
        # Reconnect forever (a session outlives short outages) but often enough that
        # a session is not lost to backoff alone.
        "connection_retry": {
            "max_tries": -1,
            "delay": 0.1,
            "backoff": 2,
            "max_delay": max(0.2, min(retry_max_wait_s, session_timeout_s / 3)),
        },
        # Hudi's num_retries / wait_time_ms_between_retry / max_wait_time_ms_between_retry
        # bound the retries of each ZooKeeper operation, as they bound Curator's.
        "command_retry": {
            "max_tries": num_retries,
            "delay": retry_wait_s,
            "backoff": 2,
            "max_delay": retry_max_wait_s,
            "deadline": connection_timeout_s,
        },
    }
    if auth_data:
        options["auth_data"] = list(auth_data)
    return options


_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:/\[\],\s]+)(?::(\d+))?")


def client_key(options: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells two ZooKeeper sessions apart: hosts (with ports) and chroot, session timeout, auth, ACL."""
    hosts, slash, chroot = str(options["hosts"]).partition("/")
    normalized = []
    for host in hosts.split(","):
        match = _HOST.fullmatch(host.strip())
        if match is None:
            normalized.append(host.strip())
        else:
            normalized.append(f"{match.group(1)}:{match.group(2) or DEFAULT_PORT}")
    chroot = (slash + chroot).rstrip("/")
    auth = tuple(tuple(a) for a in options.get("auth_data") or ())
    acl = tuple(repr(a) for a in options.get("default_acl") or ())
    return (",".join(normalized), chroot, float(options.get("timeout", 10.0)), auth, acl)


class SharedZooKeeperClient:
    """One kazoo client shared by the users of one client key (module doc). Thread-safe."""

    def __init__(self, key: tuple[Any, ...], options: Mapping[str, Any]):
        self.key = key
        self.hosts = str(options["hosts"])
        self._options = dict(options)
        self._mutex = threading.Lock()
        self._refs = 0
        self._client: KazooClient | None = None
        self._pid = os.getpid()
        self._generation = 0
        self._connected = threading.Event()
        self._listeners: list[StateListener] = []
        self._orphans: dict[str, int] = {}  # node path -> session that owns it
        self._dead: KazooClient | None = None  # the current client, once it stopped for good
        self._suspensions = 0  # counts SUSPENDED and CONNECTED: a timer acts only on the suspension it watches

    # -- sharing ---------------------------------------------------------------------------
    @property
    def refs(self) -> int:
        """How many users hold a share."""
        return self._refs

    def _retain(self) -> None:
        with self._mutex:
            self._refs += 1

    def release(self) -> None:
        """Give one share back; the last one stops the client and ends its session."""
        with _REGISTRY_GUARD:
            with self._mutex:
                self._refs = max(0, self._refs - 1)
                if self._refs:
                    return
                client, self._client = self._client, None
                self._connected.clear()
            if _REGISTRY.get(self.key) is self:
                del _REGISTRY[self.key]
        _stop(client, self._pid)

    # -- state -----------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Bumped whenever a session is lost (expired, closed, client replaced)."""
        return self._generation

    @property
    def current(self) -> KazooClient | None:
        """The kazoo client now in use (None before the first `client()` call)."""
        return self._client

    @property
    def connected(self) -> bool:
        """The current client is connected (requests can be served now)."""
        client = self._client
        return client is not None and client.connected and self._pid == os.getpid()

    @property
    def session_id(self) -> int | None:
        """The current session's id (None while not connected)."""
        client = self._client
        if client is None or not client.connected:
            return None
        client_id = client.client_id
        return int(client_id[0]) if client_id else None

    @property
    def state(self) -> str:
        """connected, suspended, lost (never connected or session gone) -- for readiness."""
        client = self._client
        if client is None:
            return "lost"
        return str(client.state).lower()

    def add_listener(self, listener: StateListener) -> None:
        """Call `listener(kazoo_state)` on every state change (on kazoo's thread: never block there)."""
        with self._mutex:
            self._listeners.append(listener)

    def remove_listener(self, listener: StateListener) -> None:
        with self._mutex:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _on_state(self, client: KazooClient, state: str) -> None:
        # kazoo's event thread: record and notify; ZooKeeper calls go to a thread of their own.
        current = self._client
        if current is None or client is not current:
            return
        if state == KazooState.CONNECTED:
            self._suspensions += 1
            self._connected.set()
            if self._orphans:
                threading.Thread(target=self._delete_orphans, name="lakeward-zk-orphans", daemon=True).start()
        else:
            self._connected.clear()
            if state == KazooState.SUSPENDED:
                self._watch_suspension(client)
            if state == KazooState.LOST:
                self._generation += 1
                if client.client_state in _DEAD_STATES:  # not an expiry: kazoo stopped connecting
                    self._dead = client
        self._notify(state)

    def _watch_suspension(self, client: KazooClient) -> None:
        """Replace `client` if it is still the current one and has stayed suspended since, once its
        session must have expired (module doc: sessions)."""
        self._suspensions += 1
        timer = threading.Timer(self._session_timeout_s(), self._expire_suspended, (client, self._suspensions))
        timer.name = "lakeward-zk-suspended"
        timer.daemon = True
        timer.start()

    def _session_timeout_s(self) -> float:
        """The session timeout asked for (a server grants it, or shorter: expires the session no later)."""
        return float(self._options.get("timeout", 10.0))

    def _expire_suspended(self, client: KazooClient, suspension: int) -> None:
        with self._mutex:
            if (
                client.connected
                or self._client is not client
                or self._pid != os.getpid()
                or self._suspensions != suspension
            ):
                return  # reconnected (perhaps suspended again since), replaced or closed meanwhile
            self._generation += 1
            replacement = self._client = self._new_client()
            self._connected.clear()
        log.warning(
            "no connection to ZooKeeper at %s for the session timeout (%.0fs): the session is taken as "
            "expired and a new one is opened",
            self.hosts,
            self._session_timeout_s(),
        )
        # users hear LOST before the new session's CONNECTED: the new client starts only now
        self._notify(KazooState.LOST)
        replacement.start_async()
        _stop(client, self._pid)

    def _new_client(self) -> KazooClient:
        """A kazoo client of this key, listened to and not started yet."""
        client = KazooClient(**self._options)
        client.add_listener(lambda state, c=client: self._on_state(c, state))
        return client

    def _notify(self, state: str) -> None:
        with self._mutex:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(state)
            except Exception:
                log.exception("ZooKeeper state listener %r failed on %s", listener, state)

    # -- the client ------------------------------------------------------------------------
    def client(self, timeout_s: float) -> KazooClient:
        """The connected client: started on first use (or replaced if dead), waited for up to `timeout_s`.

        Raises ZooKeeperUnavailableError if no connection comes within `timeout_s`; the client
        keeps trying in the background (a later call may succeed without a new connection).
        """
        replaced: KazooClient | None = None
        started: KazooClient | None = None
        with self._mutex:
            client = self._client
            if client is None or self._pid != os.getpid() or client is self._dead:
                replaced, replaced_pid = client, self._pid
                if client is not None:
                    self._generation += 1
                started = self._client = self._new_client()
                self._pid = os.getpid()
                self._connected.clear()
        if replaced is not None:
            log.warning("the ZooKeeper client for %s stopped for good; replaced it", self.hosts)
            _stop(replaced, replaced_pid)
            self._notify(KazooState.LOST)  # before the new session's CONNECTED
        if started is not None:
            # Asynchronous start: a failed first connection keeps retrying in the background.
            started.start_async()
        connected = self._connected_client(timeout_s)
        if connected is not None:
            return connected
        raise ZooKeeperUnavailableError(f"no connection to ZooKeeper at {self.hosts} within {timeout_s:g}s")

    def _connected_client(self, timeout_s: float) -> KazooClient | None:
        """The current client once connected, waited for up to `timeout_s`: whichever client is current
        then (one replaced meanwhile, closed, is never returned)."""
        deadline = time.monotonic() + timeout_s
        while True:
            client = self._client
            if client is not None and client.connected:
                return client
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self._connected.wait(min(remaining, 0.5)) and not (self._client is not None and self._client.connected):
                time.sleep(0.01)  # the event of a client being replaced: let the replacement's state arrive

    def wait_connected(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the current client to be connected."""
        return self._client is not None and self._connected_client(timeout_s) is not None

    def end_session(self, notify: bool = True) -> bool:
        """Stop the current client and end its session (`close_shared_clients`); the shares stay,
        and the next `client()` call opens a new session. False if no client was running."""
        with self._mutex:
            client, self._client = self._client, None
            self._connected.clear()
            if client is None:
                return False
            self._generation += 1
            pid = self._pid
        _stop(client, pid)
        if notify:
            self._notify(KazooState.LOST)
        return True

    # -- lock nodes that could not be deleted -------------------------------------------------
    def abandon_node(self, path: str, session_id: int) -> None:
        """Delete `path` (an ephemeral node of `session_id`) as soon as that session is reachable again."""
        with self._mutex:
            self._orphans[path] = session_id
        if self.connected:
            self._delete_orphans()

    def _delete_orphans(self) -> None:
        client = self._client
        with self._mutex:
            orphans, self._orphans = self._orphans, {}
        if client is None:
            return
        session = self.session_id
        for path, owner in orphans.items():
            if owner != session:
                continue  # that session is gone, and its ephemeral nodes with it
            try:
                stat = client.exists(path)
                if stat is not None and int(stat.ephemeralOwner) == owner:
                    client.delete(path)
            except NoNodeError:
                pass
            except KazooException:
                with self._mutex:
                    self._orphans.setdefault(path, owner)
                log.debug("could not delete the abandoned lock node %s yet", path, exc_info=True)

    def __repr__(self) -> str:
        return f"<SharedZooKeeperClient {self.hosts} refs={self._refs} generation={self._generation}>"


_REGISTRY: dict[tuple[Any, ...], SharedZooKeeperClient] = {}
_REGISTRY_GUARD = threading.Lock()


def acquire_shared_client(options: Mapping[str, Any]) -> SharedZooKeeperClient:
    """A share of this process's client for `options` (`kazoo_client_options`); `release()` it once."""
    key = client_key(options)
    with _REGISTRY_GUARD:
        shared = _REGISTRY.get(key)
        if shared is None or shared._pid != os.getpid():
            shared = _REGISTRY[key] = SharedZooKeeperClient(key, options)
        shared._retain()
        return shared


def shared_clients() -> list[SharedZooKeeperClient]:
    """The shared clients of this process now (for readiness checks and tests)."""
    with _REGISTRY_GUARD:
        return [s for s in _REGISTRY.values() if s._pid == os.getpid()]


def find_shared_client(options: Mapping[str, Any]) -> SharedZooKeeperClient | None:
    """The shared client for `options` if one is in use, without taking a share."""
    with _REGISTRY_GUARD:
        shared = _REGISTRY.get(client_key(options))
    return shared if shared is not None and shared._pid == os.getpid() else None


def _stop(client: KazooClient | None, pid: int) -> None:
    """Stop and close `client` (ends its session); in a forked child only forget it."""
    if client is None or pid != os.getpid():
        return
    try:
        client.stop()
    except Exception:  # best effort: a client that stopped by itself may fail to stop again
        log.debug("stopping a ZooKeeper client failed", exc_info=True)
    try:
        client.close()
    except Exception:
        log.debug("closing a ZooKeeper client failed", exc_info=True)


def close_shared_clients(hosts: str | None = None) -> int:
    """End the ZooKeeper sessions of this process's shared clients: every one, or those of the
    ensemble `hosts` (chroots aside). Returns how many sessions were ended.

    What interpreter exit does (so that ephemeral nodes go at once), for a process that is done
    with an ensemble but goes on: without it, the share of a `Table` that is never closed keeps
    its client reconnecting, to a decommissioned ensemble too, until the process exits. Users
    keep their shares; a later use opens a new session, and its new `generation` tells them
    that what they held on the ended one (lock nodes, claims) is gone.
    """
    wanted = None if hosts is None else client_key({"hosts": hosts})[0]
    return sum(shared.end_session() for shared in shared_clients() if wanted in (None, shared.key[0]))


def _close_all_at_exit() -> None:
    with _REGISTRY_GUARD:
        found = [s for s in _REGISTRY.values() if s._pid == os.getpid()]
        _REGISTRY.clear()
    for shared in found:
        shared.end_session(notify=False)  # nobody is left to tell


atexit.register(_close_all_at_exit)

__all__ = [
    "SharedZooKeeperClient",
    "ZooKeeperUnavailableError",
    "acquire_shared_client",
    "client_key",
    "close_shared_clients",
    "find_shared_client",
    "kazoo_client_options",
    "shared_clients",
]
