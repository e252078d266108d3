"""The table lock: what every lock provider offers.

Writers and table services hold the table lock only around plan scheduling and commit
(optimistic concurrency does the rest). A provider is used as

    with provider:              # acquire(), waiting up to the configured time
        provider.ensure_held()  # before completing an instant: is it still ours?
        ...

`acquire` raises LockError when the lock cannot be had in time; `release` and
`ensure_held` raise LockError when the lock was lost while held (a ZooKeeper session
expired), because the work done under it was then not protected.

Within one provider the lock is re-entrant for the thread that holds it (nested `with`
blocks are counted); other threads of the process wait like any other writer.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from lakeward.core.exceptions import LockError
from lakeward.core.storage import read_cache

log = logging.getLogger(__name__)


class LockProvider(ABC):
    """A mutual-exclusion lock on one table, shared by every writer of that table."""

    def __init__(
        self,
        *,
        default_timeout_s: float = 60.0,
        client_num_retries: int = 0,
        client_retry_wait_s: float = 5.0,
    ):
        if default_timeout_s < 0 or client_num_retries < 0 or client_retry_wait_s < 0:
            raise ValueError("lock timeouts and retry counts must not be negative")
        self.default_timeout_s = default_timeout_s
        self.client_num_retries = client_num_retries
        self.client_retry_wait_s = client_retry_wait_s
        # Serialises the threads of this process that share this provider; the
        # provider's own mechanism then serialises processes.
        self._guard = threading.Lock()
        self._owner: int | None = None
        self._depth = 0

    # -- what a provider implements ------------------------------------------------------
    @property
    @abstractmethod
    def description(self) -> str:
        """What is locked, for messages: e.g. `ZooKeeper lock /hudi/locks/trips at zk:2181`."""

    @abstractmethod
    def _acquire(self, timeout_s: float) -> bool:
        """Take the underlying lock within `timeout_s` (0: do not wait); False on timeout."""

    @abstractmethod
    def _release(self) -> None:
        """Give the underlying lock back; raise LockError if it had been lost."""

    def _check(self) -> None:  # noqa: B027 - optional hook: most locks cannot be lost
        """Raise LockError if the underlying lock is no longer held (default: never lost)."""

    def _close(self) -> None:  # noqa: B027 - optional hook: most locks hold no resources
        """Free connections and other resources (default: nothing)."""

    def _holder(self) -> str | None:
        """Who holds the lock now, if the provider can tell (for timeout messages)."""
        return None

    # -- the API ----------------------------------------------------------------------------
    @property
    def is_held(self) -> bool:
        """True if the calling thread holds the lock through this provider."""
        return self._owner == threading.get_ident()

    def acquire(self, timeout_s: float | None = None) -> None:
        """Block until the lock is held; raise LockError if it cannot be had in time.

        Without `timeout_s`, wait the configured time (`hoodie.write.lock.wait_time_ms`),
        retried `hoodie.write.lock.client.num_retries` more times with a pause of
        `hoodie.write.lock.client.wait_time_ms_between_retry`. With `timeout_s`, make one
        attempt of at most that many seconds (0: do not wait).
        """
        if self.is_held:
            self._depth += 1
            return
        if timeout_s is not None:
            if timeout_s < 0:
                raise ValueError(f"timeout_s must not be negative, got {timeout_s}")
            attempts, per_attempt = 1, timeout_s
        else:
            attempts, per_attempt = 1 + self.client_num_retries, self.default_timeout_s
        began = time.monotonic()
        for attempt in range(attempts):
            if attempt:
                time.sleep(self.client_retry_wait_s)
            if self._try_acquire(per_attempt):
                self._owner = threading.get_ident()
                self._depth = 1
                read_cache.forget()  # other writers may have changed the table until now
                return
            if attempt + 1 < attempts:
                log.info("%s is busy; retrying (%d/%d)", self.description, attempt + 1, attempts - 1)
        holder = self._holder()
        raise LockError(
            f"timed out after {time.monotonic() - began:.1f}s waiting for the {self.description}"
            + (f"; it is held by {holder}" if holder else "; another writer or table service holds it")
            + " (wait longer with hoodie.write.lock.wait_time_ms)"
        )

    def _try_acquire(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        if not self._guard.acquire(timeout=timeout_s):
            return False
        try:
            acquired = self._acquire(max(0.0, deadline - time.monotonic()))
        except BaseException:
            self._guard.release()
            raise
        if not acquired:
            self._guard.release()
        return acquired

    def release(self) -> None:
        """Release the lock (the outermost release of nested acquires gives it back).

        Raises LockError if the calling thread does not hold it, or if it was lost while
        held; in the latter case the lock is given up all the same.
        """
        if not self.is_held:
            raise LockError(f"cannot release the {self.description}: this thread does not hold it")
        self._depth -= 1
        if self._depth:
            return
        self._owner = None
        try:
            self._release()
        finally:
            self._guard.release()

    def ensure_held(self) -> None:
        """Raise LockError unless the calling thread still holds the lock.

        Call it right before an irreversible step (completing an instant): a ZooKeeper
        lock can be lost while held when the session expires.
        """
        if not self.is_held:
            raise LockError(f"the {self.description} is not held by this thread")
        self._check()

    @contextmanager
    def confirmed(self) -> Iterator[None]:
        """A scope around an irreversible step taken under this lock (completing an instant): entered only
        once `ensure_held` has confirmed the calling thread still holds it (LockError otherwise)."""
        self.ensure_held()
        yield

    def close(self) -> None:
        """Release the lock if the calling thread holds it, then free resources."""
        try:
            if self.is_held:
                self._depth = 1
                try:
                    self.release()
                except LockError as exc:
                    log.warning("closing %s: %s", self.description, exc)
        finally:
            self._close()

    def __enter__(self) -> LockProvider:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            try:
                self.release()
            except LockError as release_error:
                # The work under the lock is done (what completes an instant confirmed the lock right
                # before): failing now would report a completed commit as failed, and a caller that
                # retries would write it twice. A lock node left behind goes with its session.
                log.warning("the work under %s completed; releasing it failed: %s", self.description, release_error)
            return
        # An error is already on its way out: do not hide it behind a lock error.
        try:
            self.release()
        except LockError as release_error:
            log.warning("releasing %s after an error: %s", self.description, release_error)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description}>"
