"""Freeze a crash-test subprocess at a named point of lakeward's code, for the parent to SIGKILL.

Shared by the `crash_*.py` scripts in this folder (they run as `python <script>`, so this
folder is on their import path). The hooks wrap module attributes from the outside: when
the process reaches the point it prints `REACHED <point>` and sleeps until it is killed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()


def freeze(point: str) -> None:
    """Announce `point` on stdout and wait for SIGKILL."""
    with _LOCK:
        sys.stdout.write(f"REACHED {point}\n")
        sys.stdout.flush()
    while True:
        time.sleep(60)


def after(point: str, fn: Callable[..., Any], nth: int = 1) -> Callable[..., Any]:
    """`fn`, freezing right after its `nth` call returns (counted across threads)."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        with _LOCK:
            calls[0] += 1
            hit = calls[0] == nth
        if hit:
            freeze(point)
        return result

    return wrapper


def before(point: str, fn: Callable[..., Any], nth: int = 1) -> Callable[..., Any]:
    """`fn`, freezing right before its `nth` call (counted across threads)."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            calls[0] += 1
            hit = calls[0] == nth
        if hit:
            freeze(point)
        return fn(*args, **kwargs)

    return wrapper
