"""Run one planned clustering and freeze at a chosen point of its execution, for a SIGKILL test.

Usage: python crash_clusterer.py <table path> <point> <clustering instant>

Hooks wrap module attributes of lakeward in this (child) process only. At `<point>` the
script prints `REACHED <point>` and sleeps until the parent test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import lakeward.core.table_services.clustering.execute as execute_mod
from lakeward.core.table import Table

_LOCK = threading.Lock()


def _freeze(point: str) -> None:
    with _LOCK:
        sys.stdout.write(f"REACHED {point}\n")
        sys.stdout.flush()
    while True:  # wait for SIGKILL
        time.sleep(60)


def _after(point: str, fn: Callable[..., Any], nth: int = 1) -> Callable[..., Any]:
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        with _LOCK:
            calls[0] += 1
            hit = calls[0] == nth
        if hit:
            _freeze(point)
        return result

    return wrapper


def _before(point: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _freeze(point)
        return fn(*args, **kwargs)

    return wrapper


HOOKS: dict[str, Callable[[str], None]] = {
    # `.replacecommit.inflight` exists, no file of the clustering yet
    "after_inflight": lambda p: setattr(
        execute_mod, "transition_to_inflight", _after(p, execute_mod.transition_to_inflight)
    ),
    # the first group's new base file is written, the other group's is not
    "after_first_base_file": lambda p: setattr(execute_mod, "write_base_file", _after(p, execute_mod.write_base_file)),
    # one file written, the second has its marker but no file yet
    "marker_without_file": lambda p: setattr(execute_mod, "create_marker", _after(p, execute_mod.create_marker, 2)),
    # every file written (markers reconciled), right before `<t>.replacecommit` is published
    "before_complete": lambda p: setattr(execute_mod, "complete", _before(p, execute_mod.complete)),
}


def main() -> int:
    path, point, instant = sys.argv[1:4]
    if point != "none":
        HOOKS[point](point)
    table = Table.open(path, options={"hoodie.upsert.shuffle.parallelism": 1})
    table.run_clustering(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 0 if point == "none" else 3


if __name__ == "__main__":
    sys.exit(main())
