"""Instants being written by this process, per table: the EAGER failed-writes policy must
never roll back a write that is still running next to it (e.g. two Table objects, or two
threads, writing one table)."""

from __future__ import annotations

import threading
from collections import defaultdict

_lock = threading.Lock()
_active: dict[str, set[str]] = defaultdict(set)


def register(table_uri: str, instant_time: str) -> None:
    with _lock:
        _active[table_uri].add(instant_time)


def unregister(table_uri: str, instant_time: str) -> None:
    with _lock:
        _active[table_uri].discard(instant_time)


def active_instants(table_uri: str) -> set[str]:
    with _lock:
        return set(_active[table_uri])
