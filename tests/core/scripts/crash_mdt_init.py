"""Initialise a table's metadata table and die by SIGKILL at a chosen point, for a crash test.

Usage: python crash_mdt_init.py <table path> <point>

Points: `before_mdt_complete` (the `files` partition's HFile is written, the metadata table's
delta commit is still inflight), `before_properties` (the metadata table is complete, the data
table's `hoodie.properties` does not list it yet). The process kills itself at the point, so
nothing after it runs; it exits 3 if the point was never reached.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import lakeward.core.metadata_table.bootstrap as bootstrap_mod
from lakeward.core.table import Table


def _killed_before(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args, **kwargs)

    return wrapper


def main() -> int:
    path, point = sys.argv[1], sys.argv[2]
    name = {"before_mdt_complete": "complete", "before_properties": "update_table_properties"}[point]
    setattr(bootstrap_mod, name, _killed_before(getattr(bootstrap_mod, name)))
    Table.open(path).initialize_metadata_table()
    return 3


if __name__ == "__main__":
    sys.exit(main())
