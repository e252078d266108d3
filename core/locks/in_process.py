"""The in-process table lock: one lock per table base path, shared within the process.

Like Apache Hudi's `InProcessLockProvider`, it serialises writers and table services
running in one process (threads); it does nothing against other processes. The lock is
re-entrant: a thread that holds it through one provider can take it again through
another provider of the same table without deadlocking itself.
"""

from __future__ import annotations

import os
import threading
from urllib.parse import urlparse

from lakeward.core.locks.base import LockProvider

_TABLE_LOCKS: dict[str, threading.RLock] = {}
_TABLE_LOCKS_GUARD = threading.Lock()


def normalize_base_path(base_path: str) -> str:
    """One spelling per table: absolute local paths, `s3a://` as `s3://`, no trailing `/`."""
    parsed = urlparse(base_path)
    if parsed.scheme in ("", "file"):
        local = parsed.path if parsed.scheme else base_path
        return os.path.normpath(os.path.abspath(os.path.expanduser(local)))
    scheme = "s3" if parsed.scheme == "s3a" else parsed.scheme
    return f"{scheme}://{parsed.netloc}{parsed.path}".rstrip("/")


def _table_lock(key: str) -> threading.RLock:
    with _TABLE_LOCKS_GUARD:
        lock = _TABLE_LOCKS.get(key)
        if lock is None:
            lock = _TABLE_LOCKS[key] = threading.RLock()
        return lock


class InProcessLockProvider(LockProvider):
    """Table lock for writers in one process; every provider of a table shares one lock."""

    def __init__(
        self,
        table_base_path: str,
        *,
        default_timeout_s: float = 60.0,
        client_num_retries: int = 0,
        client_retry_wait_s: float = 5.0,
    ):
        super().__init__(
            default_timeout_s=default_timeout_s,
            client_num_retries=client_num_retries,
            client_retry_wait_s=client_retry_wait_s,
        )
        self.table_base_path = normalize_base_path(table_base_path)
        self._lock = _table_lock(self.table_base_path)

    @property
    def description(self) -> str:
        return f"in-process lock of table {self.table_base_path}"

    def _acquire(self, timeout_s: float) -> bool:
        return self._lock.acquire(timeout=timeout_s)

    def _release(self) -> None:
        self._lock.release()
