"""Heartbeats of in-flight instants, as Apache Hudi keeps them: `.hoodie/.heartbeat/<instant>`.

A writer creates the (empty) file right after its requested instant exists and rewrites
it every `hoodie.client.heartbeat.interval_in_ms` from a daemon thread, so the file's
modification time says the writer is alive. The file is deleted when the instant
completes or is rolled back. An instant whose heartbeat is missing, or older than
`interval * hoodie.client.heartbeat.tolerable.misses`, belongs to a dead writer: under the
LAZY failed-writes policy only such instants are rolled back (Hudi's HoodieHeartbeatClient
and HoodieHeartbeatUtils use the same rule, on the file's modification time).
"""

from __future__ import annotations

import logging
import posixpath
import threading
import time

import pyarrow.fs as pafs

from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER

log = logging.getLogger(__name__)

HEARTBEAT_FOLDER = posixpath.join(METAFOLDER, ".heartbeat")


def heartbeat_path(instant_time: str) -> str:
    return posixpath.join(HEARTBEAT_FOLDER, instant_time)


def last_heartbeat_ms(storage: Storage, instant_time: str) -> int | None:
    """Modification time (epoch ms) of the instant's heartbeat file; None when there is none."""
    info = storage.fs.get_file_info(storage.full_path(heartbeat_path(instant_time)))
    if info.type != pafs.FileType.File or info.mtime_ns is None:
        return None
    return info.mtime_ns // 1_000_000


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


class Heartbeat:
    """Keeps one instant's heartbeat file fresh until `stop()` (which deletes it)."""

    def __init__(self, storage: Storage, instant_time: str, interval_ms: int):
        self.storage = storage
        self.instant_time = instant_time
        self.interval_s = interval_ms / 1000.0
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        self.storage.write_bytes(heartbeat_path(self.instant_time), b"")

    def start(self) -> Heartbeat:
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self.instant_time}", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self.interval_s):
            try:
                self.beat()
            except Exception:  # a missed beat is tolerated; the next one may succeed
                log.warning("heartbeat of %s could not be refreshed", self.instant_time, exc_info=True)

    def stop(self) -> None:
        """Stop refreshing and delete the file (idempotent)."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, self.interval_s * 2))
            self._thread = None
        try:
            delete_heartbeat(self.storage, self.instant_time)
        except Exception:
            log.warning("heartbeat of %s could not be deleted", self.instant_time, exc_info=True)
