"""The ZooKeeper table lock, over kazoo's `Lock` recipe.

Every writer of a table creates an ephemeral sequential znode under
`<hoodie.write.lock.zookeeper.base_path>/<lock_key>`; the lowest sequence number holds
the lock. The node goes away when the holder releases, closes its client, or its
session expires (a crashed holder frees the lock after the session timeout). Nodes
that Apache Hudi's `ZookeeperBasedLockProvider` (Curator's `InterProcessMutex`,
`..._c_<uuid>-lock-<seq>`) creates under the same path count as contenders too, so
lakeward and Hudi writers exclude each other.

A lock is lost if the ZooKeeper session expires while it is held; `ensure_held` and
`release` then raise LockError. While the connection is suspended (session maybe still
alive) they wait up to the connection timeout for it to come back.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.lock import Lock

from lakeward.core.exceptions import LockError
from lakeward.core.locks.base import LockProvider

log = logging.getLogger(__name__)

#: Node-name marker of Curator's InterProcessMutex (Hudi's ZookeeperBasedLockProvider).
CURATOR_LOCK_PATTERN = "-lock-"


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
    reconnect and retry the same way. `hosts` may end with a chroot (`h1:2181,h2:2181/app`);
    `auth_data` is kazoo's list of (scheme, credential), e.g. `[("digest", "user:secret")]`.
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


class ZooKeeperLockProvider(LockProvider):
    """Table lock shared by every process that reaches the same ZooKeeper ensemble."""

    def __init__(
        self,
        hosts: str,
        lock_path: str,
        *,
        session_timeout_s: float = 60.0,
        connection_timeout_s: float = 15.0,
        num_retries: int = 15,
        retry_wait_s: float = 1.0,
        retry_max_wait_s: float = 16.0,
        default_timeout_s: float = 60.0,
        client_num_retries: int = 0,
        client_retry_wait_s: float = 5.0,
    ):
        super().__init__(
            default_timeout_s=default_timeout_s,
            client_num_retries=client_num_retries,
            client_retry_wait_s=client_retry_wait_s,
        )
        if not lock_path.startswith("/") or lock_path.endswith("/") or "//" in lock_path:
            raise ValueError(f"ZooKeeper lock path {lock_path!r} must be absolute, like /hudi/locks/t")
        self.hosts = hosts
        self.lock_path = lock_path
        self.connection_timeout_s = connection_timeout_s
        self.identifier = f"{socket.gethostname()}:{os.getpid()}"
        self._client_options = kazoo_client_options(
            hosts,
            session_timeout_s=session_timeout_s,
            connection_timeout_s=connection_timeout_s,
            num_retries=num_retries,
            retry_wait_s=retry_wait_s,
            retry_max_wait_s=retry_max_wait_s,
        )
        self._client: KazooClient | None = None
        self._closed = False
        self._connected = threading.Event()
        self._session_lost = threading.Event()
        self._lock: Lock | None = None
        self._session_id: int | None = None

    @property
    def description(self) -> str:
        return f"ZooKeeper lock {self.lock_path} at {self.hosts}"

    # -- connection ------------------------------------------------------------------------
    def _on_state(self, client: KazooClient, state: str) -> None:
        # Runs on kazoo's event thread: record, never block. Ignore dropped clients.
        if client is not self._client:
            return
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
            if state == KazooState.LOST:
                self._session_lost.set()

    def _connect(self) -> KazooClient:
        """The connected client; started on first use, waited for while reconnecting."""
        if self._closed:
            raise LockError(f"the {self.description} is closed")
        client = self._client
        if client is not None:
            if client.connected or self._connected.wait(self.connection_timeout_s):
                return client
            raise LockError(
                f"no connection to ZooKeeper at {self.hosts} for "
                f"{self.connection_timeout_s:g}s (hoodie.write.lock.zookeeper.url, "
                "hoodie.write.lock.zookeeper.connection_timeout_ms)"
            )
        client = self._client = KazooClient(**self._client_options)
        client.add_listener(lambda state: self._on_state(client, state))
        try:
            client.start(timeout=self.connection_timeout_s)  # stops and closes on timeout
        except KazooTimeoutError:
            self._client = None
            raise LockError(
                f"cannot connect to ZooKeeper at {self.hosts} within "
                f"{self.connection_timeout_s:g}s (hoodie.write.lock.zookeeper.url, "
                "hoodie.write.lock.zookeeper.connection_timeout_ms)"
            ) from None
        self._connected.set()
        return client

    def _drop_client(self) -> None:
        """End the session (its ephemeral nodes go when it ends or expires)."""
        client, self._client = self._client, None
        self._connected.clear()
        if client is not None:
            try:
                client.stop()
            finally:
                client.close()

    def _session_changed(self, client: KazooClient) -> bool:
        client_id = client.client_id
        current = client_id[0] if client_id else None
        return self._session_lost.is_set() or current != self._session_id

    def _await_connection(self, client: KazooClient) -> bool:
        """Wait up to the connection timeout for a suspended connection to come back."""
        return client.connected or self._connected.wait(self.connection_timeout_s)

    # -- LockProvider ------------------------------------------------------------------------
    def _acquire(self, timeout_s: float) -> bool:
        client = self._connect()
        self._session_lost.clear()
        lock = client.Lock(self.lock_path, self.identifier, extra_lock_patterns=(CURATOR_LOCK_PATTERN,))
        try:
            if timeout_s > 0:
                acquired = lock.acquire(blocking=True, timeout=timeout_s)
            else:
                acquired = lock.acquire(blocking=False)
        except LockTimeout:
            acquired = False
        except KazooException as exc:
            raise LockError(f"cannot acquire the {self.description}: {exc!r}") from exc
        if not acquired:
            return False
        # Our node must belong to the session we have now: if the session expired while
        # the lock was being taken, the node is gone and the lock is not ours.
        try:
            owner = self._node_owner(client, lock)
        except LockError:
            self._best_effort_release(lock)
            raise
        client_id = client.client_id
        if owner is None or client_id is None or owner != client_id[0]:
            self._best_effort_release(lock)
            return False
        self._session_id = owner
        self._lock = lock
        return True

    def _node_owner(self, client: KazooClient, lock: Lock) -> int | None:
        """The session that owns our lock node (None if the node is gone)."""
        if lock.node is None:
            return None
        try:
            stat = client.exists(f"{self.lock_path}/{lock.node}")
        except KazooException as exc:
            raise LockError(
                f"cannot confirm the {self.description} is held: no answer from ZooKeeper ({exc!r})"
            ) from exc
        return None if stat is None else int(stat.ephemeralOwner)

    def _lost_message(self) -> str:
        return (
            f"the ZooKeeper session expired while holding the {self.description}: the lock "
            "was lost, and another writer may have taken it meanwhile"
        )

    def _release(self) -> None:
        lock, self._lock = self._lock, None
        client = self._client
        if lock is None or client is None:
            return
        try:
            if not self._await_connection(client):
                raise LockError(
                    f"lost the connection to ZooKeeper while holding the {self.description}; "
                    "the lock was lost when the session expired or goes when it expires, and "
                    "the work done under it may not have been exclusive"
                )
            lost = self._session_changed(client) or (self._node_owner(client, lock) != self._session_id)
        except LockError:
            # The session may still be alive and keep our node: end it, so that the node
            # goes when the session ends rather than when this process exits.
            self._drop_client()
            raise
        if lost:
            raise LockError(self._lost_message())
        try:
            lock.release()
        except KazooException as exc:
            self._drop_client()
            raise LockError(f"cannot release the {self.description}: {exc!r}") from exc

    def _check(self) -> None:
        lock, client = self._lock, self._client
        if lock is None or client is None:
            raise LockError(f"the {self.description} is not held")
        if not self._await_connection(client):
            raise LockError(
                f"no connection to ZooKeeper for {self.connection_timeout_s:g}s while holding "
                f"the {self.description}; cannot confirm it is still held"
            )
        if self._session_changed(client) or self._node_owner(client, lock) != self._session_id:
            raise LockError(self._lost_message())

    def _holder(self) -> str | None:
        client = self._client
        if client is None or not client.connected:
            return None
        try:
            contenders = client.Lock(self.lock_path, extra_lock_patterns=(CURATOR_LOCK_PATTERN,)).contenders()
        except KazooException:
            return None
        return contenders[0] if contenders and contenders[0] else None

    def _close(self) -> None:
        self._closed = True
        self._lock = None
        self._drop_client()

    @staticmethod
    def _best_effort_release(lock: Lock) -> None:
        try:
            lock.release()
        except KazooException:
            log.debug("could not delete a stale lock node", exc_info=True)
