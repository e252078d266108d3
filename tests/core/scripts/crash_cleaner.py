"""Run a planned clean or a restore and freeze at a chosen point, for a SIGKILL test.

Usage: python crash_cleaner.py <table path> <point> <clean instant | savepoint instant>

Points `clean_*` run `Table.run_clean(<instant>)`, points `restore_*` run
`Table.restore(<savepoint>)`. When the run reaches `<point>` the script prints
`REACHED <point>` and sleeps until the parent test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import lakeward.core.table_services.clean.execute as clean_mod
import lakeward.core.table_services.savepoint as savepoint_mod
from lakeward.core.table import Table


def _freeze(point: str) -> None:
    sys.stdout.write(f"REACHED {point}\n")
    sys.stdout.flush()
    while True:  # wait for SIGKILL
        time.sleep(60)


def _after(point: str, fn: Callable[..., Any], nth: int = 1) -> Callable[..., Any]:
    """`fn`, freezing right after its `nth` call returns."""
    calls = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        calls[0] += 1
        if calls[0] == nth:
            _freeze(point)
        return result

    return wrapper


def _before(point: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _freeze(point)
        return fn(*args, **kwargs)

    return wrapper


HOOKS: dict[str, Callable[[str], None]] = {
    # `<t>.clean.inflight` written, nothing deleted yet
    "clean_after_inflight": lambda p: setattr(
        clean_mod, "transition_to_inflight", _after(p, clean_mod.transition_to_inflight)
    ),
    # some planned files deleted, others not
    "clean_after_some_deletes": lambda p: setattr(clean_mod, "delete_file", _after(p, clean_mod.delete_file, 3)),
    # every file deleted, `<t>.clean` not published
    "clean_before_complete": lambda p: setattr(clean_mod, "complete", _before(p, clean_mod.complete)),
    # `<r>.restore.inflight` written, nothing rolled back yet
    "restore_after_inflight": lambda p: setattr(
        savepoint_mod, "transition_to_inflight", _after(p, savepoint_mod.transition_to_inflight)
    ),
    # the newest instant after the savepoint rolled back, the others not
    "restore_after_first_rollback": lambda p: setattr(savepoint_mod, "_roll_back", _after(p, savepoint_mod._roll_back)),
    # everything rolled back, `<r>.restore` not published
    "restore_before_complete": lambda p: setattr(savepoint_mod, "complete", _before(p, savepoint_mod.complete)),
}


def main() -> int:
    path, point, instant = sys.argv[1:4]
    HOOKS[point](point)
    table = Table.open(path)
    if point.startswith("clean_"):
        table.run_clean(instant)
    else:
        table.restore(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
