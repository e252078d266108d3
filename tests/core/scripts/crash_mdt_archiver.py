"""Run one upsert whose inline metadata-table services archive the metadata table, and freeze
during that archival, for a SIGKILL test.

Usage: python crash_mdt_archiver.py <table path> <point> <options json> <rows json>

Points: `after_history_file` (the metadata table's LSM history holds the archived instants, none of
their timeline files is deleted yet), `after_some_deletes` (a few of them are deleted). The data
commit has completed by then (the services run after it). The script prints `REACHED <point>` and
sleeps until the parent kills it; `FINISHED` (exit 3) if the write ended without reaching the point.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa
from freeze_points import after, freeze  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.archival as archival_mod
from lakeward.core.table import Table


def _deleting(point: str, nth: int) -> None:
    calls = [0]
    original = archival_mod.instant_path

    def wrapper(instant: Any) -> str:
        calls[0] += 1
        if calls[0] == nth:  # the (nth-1) files before this one are deleted
            freeze(point)
        return original(instant)

    archival_mod.instant_path = wrapper  # type: ignore[assignment]


def main() -> int:
    path, point, options, rows = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    if point == "after_history_file":
        archival_mod.append_history_file = after(point, archival_mod.append_history_file)  # type: ignore[assignment]
    elif point == "after_some_deletes":
        _deleting(point, 4)
    else:
        raise SystemExit(f"unknown point {point}")
    Table.open(path, options=options).upsert(pa.Table.from_pylist(rows))
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
