"""Instants being written by this process, per table: no writer may roll back a write that
is still running next to it (e.g. two Table objects, or two threads, writing one table).

Tables are keyed by their normalised base path, so two spellings of one table (`s3a://`
and `s3://`, a relative and an absolute path) share one entry: a write of this process
must never look like a leftover of this process under another spelling.
"""

from __future__ import annotations

import threading
from collections import defaultdict

from lakeward.core.locks.in_process import normalize_base_path

_lock = threading.Lock()
_active: dict[str, set[str]] = defaultdict(set)


def register(table_uri: str, instant_time: str) -> None:
    """Record that this process writes `instant_time` on the table."""
    with _lock:
        _active[normalize_base_path(table_uri)].add(instant_time)


def unregister(table_uri: str, instant_time: str) -> None:
    """The write of `instant_time` ended (completed, rolled back or abandoned)."""
    with _lock:
        _active[normalize_base_path(table_uri)].discard(instant_time)


def active_instants(table_uri: str) -> set[str]:
    """The instants this process writes on the table now."""
    with _lock:
        return set(_active[normalize_base_path(table_uri)])
