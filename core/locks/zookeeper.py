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

Every provider of the process with the same ensemble and session settings uses one shared
kazoo client (`lakeward.core.locks.zk_client`), taken on first use and given back by
`close()`; a lock node that cannot be deleted while the connection is down is deleted when
the session comes back, or goes when it expires.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.recipe.lock import Lock

from lakeward.core.exceptions import LockError
from lakeward.core.locks.base import LockProvider
from lakeward.core.locks.zk_client import (
    SharedZooKeeperClient,
    ZooKeeperUnavailableError,
    acquire_shared_client,
    find_shared_client,
    kazoo_client_options,
)

log = logging.getLogger(__name__)

#: Node-name marker of Curator's InterProcessMutex (Hudi's ZookeeperBasedLockProvider).
CURATOR_LOCK_PATTERN = "-lock-"


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
        self._shared: SharedZooKeeperClient | None = None
        self._closed = False
        self._lock: Lock | None = None
        self._session_id: int | None = None
        self._generation = 0

    @property
    def description(self) -> str:
        return f"ZooKeeper lock {self.lock_path} at {self.hosts}"

    @property
    def client_options(self) -> dict[str, Any]:
        """The kazoo client settings; providers with the same ones share a client (`zk_client`)."""
        return dict(self._client_options)

    @property
    def shared_client(self) -> SharedZooKeeperClient | None:
        """The process's client for these settings if one is in use (this provider's or another's)."""
        return self._shared or find_shared_client(self._client_options)

    @property
    def _client(self) -> KazooClient | None:
        """The kazoo client this provider uses now (shared with the process's other users)."""
        return self._shared.current if self._shared is not None else None

    # -- connection ------------------------------------------------------------------------
    def _connect(self) -> KazooClient:
        """The connected shared client: a share taken on first use, waited for while reconnecting."""
        if self._closed:
            raise LockError(f"the {self.description} is closed")
        if self._shared is None:
            self._shared = acquire_shared_client(self._client_options)
        try:
            return self._shared.client(self.connection_timeout_s)
        except ZooKeeperUnavailableError:
            raise LockError(
                f"cannot connect to ZooKeeper at {self.hosts} within "
                f"{self.connection_timeout_s:g}s (hoodie.write.lock.zookeeper.url, "
                "hoodie.write.lock.zookeeper.connection_timeout_ms)"
            ) from None

    def _session_changed(self, shared: SharedZooKeeperClient) -> bool:
        return shared.generation != self._generation or shared.session_id != self._session_id

    def _await_connection(self, shared: SharedZooKeeperClient) -> bool:
        """Wait up to the connection timeout for a suspended connection to come back."""
        return shared.wait_connected(self.connection_timeout_s)

    # -- LockProvider ------------------------------------------------------------------------
    def _acquire(self, timeout_s: float) -> bool:
        client = self._connect()
        shared = self._shared
        assert shared is not None
        generation = shared.generation  # before the node exists: a loss from here on counts
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
        session = shared.session_id
        if owner is None or session is None or owner != session or shared.generation != generation:
            self._best_effort_release(lock)
            return False
        self._session_id = owner
        self._generation = generation
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
        shared = self._shared
        client = shared.current if shared is not None else None
        if lock is None or shared is None:
            return
        if client is None:  # its session was ended (`close_shared_clients`), the lock node with it
            raise LockError(self._lost_message())
        try:
            if not self._await_connection(shared):
                raise LockError(
                    f"lost the connection to ZooKeeper while holding the {self.description}; "
                    "the lock was lost when the session expired or goes when it expires, and "
                    "the work done under it may not have been exclusive"
                )
            lost = self._session_changed(shared) or (self._node_owner(client, lock) != self._session_id)
        except LockError:
            # The session may still be alive and keep our node: it is deleted when the
            # shared session comes back (or goes when the session expires).
            self._abandon(lock)
            raise
        if lost:
            raise LockError(self._lost_message())
        try:
            lock.release()
        except KazooException as exc:
            self._abandon(lock)
            raise LockError(f"cannot release the {self.description}: {exc!r}") from exc

    def _abandon(self, lock: Lock) -> None:
        """Hand our lock node to the shared client, to delete once our session is reachable again."""
        if self._shared is not None and lock.node is not None and self._session_id is not None:
            self._shared.abandon_node(f"{self.lock_path}/{lock.node}", self._session_id)

    def _check(self) -> None:
        lock, shared = self._lock, self._shared
        client = shared.current if shared is not None else None
        if lock is None or shared is None:
            raise LockError(f"the {self.description} is not held")
        if client is None:  # its session was ended (`close_shared_clients`), the lock node with it
            raise LockError(self._lost_message())
        if not self._await_connection(shared):
            raise LockError(
                f"no connection to ZooKeeper for {self.connection_timeout_s:g}s while holding "
                f"the {self.description}; cannot confirm it is still held"
            )
        if self._session_changed(shared) or self._node_owner(client, lock) != self._session_id:
            raise LockError(self._lost_message())

    def _holder(self) -> str | None:
        shared = self._shared
        client = shared.current if shared is not None else None
        if shared is None or client is None or not shared.connected:
            return None
        try:
            contenders = client.Lock(self.lock_path, extra_lock_patterns=(CURATOR_LOCK_PATTERN,)).contenders()
        except KazooException:
            return None
        return contenders[0] if contenders and contenders[0] else None

    def _close(self) -> None:
        """Give the share of the process's ZooKeeper client back (idempotent)."""
        self._closed = True
        self._lock = None
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.release()

    @staticmethod
    def _best_effort_release(lock: Lock) -> None:
        try:
            lock.release()
        except KazooException:
            log.debug("could not delete a stale lock node", exc_info=True)
