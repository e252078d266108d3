"""Heartbeats of in-flight instants, as Apache Hudi keeps them: `.hoodie/.heartbeat/<instant>`.

A writer creates the file before its requested instant exists (so no other writer ever
sees the instant without it) and rewrites it every `hoodie.client.heartbeat.interval_in_ms`
from a daemon thread, so the file's modification time says the writer is alive. The file
is deleted after the instant completes or is rolled back. An instant whose heartbeat is
missing, or older than `interval * hoodie.client.heartbeat.tolerable.misses`, belongs to a
dead writer (Hudi's HoodieHeartbeatClient and HoodieHeartbeatUtils use the same rule, on
the file's modification time).

Unlike Hudi, lakeward keeps a heartbeat under the EAGER policy too, and the file holds the
writer's identity (`WriterIdentity`, JSON; Hudi's files are empty and Hudi reads only the
modification time). With them a writer tells a write of another live process (which it
must not roll back, and which it must refuse to race with when its lock is process-local)
from one whose process is gone (on the same machine: at once, without waiting for the
heartbeat to expire).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import posixpath
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER

log = logging.getLogger(__name__)

HEARTBEAT_FOLDER = posixpath.join(METAFOLDER, ".heartbeat")


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def heartbeat_path(instant_time: str) -> str:
    return posixpath.join(HEARTBEAT_FOLDER, instant_time)


def last_heartbeat_ms(storage: Storage, instant_time: str) -> int | None:
    """Modification time (epoch ms) of the instant's heartbeat file; None when there is none."""
    try:
        modified = storage.modified_time(heartbeat_path(instant_time))
    except FileNotFoundError:
        return None
    return (modified - _EPOCH) // dt.timedelta(milliseconds=1)


def is_heartbeat_expired(
    storage: Storage, instant_time: str, interval_ms: int, tolerable_misses: int, now_ms: int | None = None
) -> bool:
    """Whether the writer of `instant_time` is gone: no heartbeat, or none for too long."""
    last = last_heartbeat_ms(storage, instant_time)
    if last is None:
        return True
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now - last > interval_ms * tolerable_misses


def delete_heartbeat(storage: Storage, instant_time: str) -> None:
    storage.delete_file(heartbeat_path(instant_time))


def _read_first_line(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class WriterIdentity:
    """Which process writes an instant, stored in its heartbeat file.

    `boot_id` (the kernel's boot id) and `pid_namespace` say whether `pid` can be checked
    from here: only a process on the same running kernel and in the same PID namespace
    sees the same process ids. `token` tells this process from an earlier one with a
    reused pid.
    """

    host: str
    pid: int
    boot_id: str
    pid_namespace: str
    token: str

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode("utf-8")

    @classmethod
    def parse(cls, data: bytes) -> WriterIdentity | None:
        """The identity in a heartbeat file; None for an empty (Hudi) or unreadable one."""
        try:
            fields = json.loads(data.decode("utf-8"))
            return cls(
                host=str(fields["host"]),
                pid=int(fields["pid"]),
                boot_id=str(fields["boot_id"]),
                pid_namespace=str(fields["pid_namespace"]),
                token=str(fields["token"]),
            )
        except (ValueError, KeyError, TypeError):
            return None

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}"

    @property
    def is_this_process(self) -> bool:
        return self == this_process()

    @property
    def is_gone(self) -> bool:
        """True only when the process certainly no longer runs (same kernel and PID namespace, pid
        not running or taken by another process); False when it runs or cannot be checked."""
        me = this_process()
        if not me.boot_id or self.boot_id != me.boot_id or self.pid_namespace != me.pid_namespace:
            return False
        if self.pid == me.pid:
            return self.token != me.token
        return not _pid_running(self.pid)


_IDENTITY: WriterIdentity | None = None
_IDENTITY_GUARD = threading.Lock()


def this_process() -> WriterIdentity:
    """The identity of the calling process (made anew in a forked child)."""
    global _IDENTITY
    with _IDENTITY_GUARD:
        if _IDENTITY is None or _IDENTITY.pid != os.getpid():
            _IDENTITY = WriterIdentity(
                host=socket.gethostname(),
                pid=os.getpid(),
                boot_id=_read_first_line("/proc/sys/kernel/random/boot_id"),
                pid_namespace=_pid_namespace(),
                token=uuid.uuid4().hex,
            )
        return _IDENTITY


def _pid_running(pid: int) -> bool:
    """Whether a process with this id runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _read_first_line(f"/proc/{pid}/stat")
    # `pid (comm) S ...`: the state follows the last ')' (comm may hold spaces and parentheses).
    return not stat.rpartition(")")[2].strip().startswith(("Z", "X"))


@dataclass(frozen=True)
class HeartbeatInfo:
    """What a heartbeat file says: when it was last refreshed, and by whom (None: not recorded)."""

    last_ms: int
    owner: WriterIdentity | None

    def age_ms(self, now_ms: int | None = None) -> int:
        return (int(time.time() * 1000) if now_ms is None else now_ms) - self.last_ms


def read_heartbeat(storage: Storage, instant_time: str) -> HeartbeatInfo | None:
    """The instant's heartbeat file (refresh time and writer), or None when there is none."""
    last = last_heartbeat_ms(storage, instant_time)
    if last is None:
        return None
    try:
        data = storage.read_bytes(heartbeat_path(instant_time))
    except FileNotFoundError:
        return None  # deleted meanwhile: the write completed or was rolled back
    return HeartbeatInfo(last, WriterIdentity.parse(data))


class Heartbeat:
    """Keeps one instant's heartbeat file fresh until `stop()` (which deletes it)."""

    def __init__(self, storage: Storage, instant_time: str, interval_ms: int):
        self.storage = storage
        self.instant_time = instant_time
        self.interval_s = interval_ms / 1000.0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        self.storage.write_bytes(heartbeat_path(self.instant_time), this_process().to_bytes())

    def start(self) -> Heartbeat:
        """Create the file (InstantExistsError if it exists: another writer took this instant
        time) and keep it fresh from a daemon thread."""
        self.storage.create_if_absent(heartbeat_path(self.instant_time), this_process().to_bytes())
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.instant_time}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # a missed beat is tolerated; the next one may succeed
                log.warning("heartbeat of %s could not be refreshed", self.instant_time, exc_info=True)

    def stop(self, keep_file: bool = False) -> None:
        """Stop refreshing and delete the file (idempotent); `keep_file`: leave it to expire (the write
        stays pending, and an expired heartbeat is what marks it as failed for others to roll back)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, self.interval_s * 2))
            self._thread = None
        if keep_file:
            return
        try:
            delete_heartbeat(self.storage, self.instant_time)
        except Exception:
            log.warning("heartbeat of %s could not be deleted", self.instant_time, exc_info=True)
