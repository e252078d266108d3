"""Run one upsert in its own process and hold it after its data files are written, until told to go on.

Usage: python held_writer.py <table path> <batch.parquet>

The writer stops right before it reconciles its markers (its log and base files are
written, its instant is inflight, it does not hold the table lock), prints `HELD <instant>`
and waits for a line on stdin. Then it finishes the write and prints `DONE <instant>`, or
`ERROR <exception class>: <message>` (exit status 1) when the write fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq

import lakeward.core.write.client as client_mod
from lakeward.core.table import Table


def _held(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(storage: Any, instant_time: str, *args: Any, **kwargs: Any) -> Any:
        sys.stdout.write(f"HELD {instant_time}\n")
        sys.stdout.flush()
        sys.stdin.readline()
        return fn(storage, instant_time, *args, **kwargs)

    return wrapper


def main() -> int:
    path, batch_path = sys.argv[1:3]
    client_mod.reconcile_markers = _held(client_mod.reconcile_markers)  # type: ignore[assignment]
    table = Table.open(path, options={"hoodie.parquet.small.file.limit": 0})
    try:
        result = table.upsert(pq.read_table(batch_path))
    except Exception as exc:  # reported to the parent test
        sys.stdout.write(f"ERROR {type(exc).__name__}: {exc}\n")
        sys.stdout.flush()
        return 1
    sys.stdout.write(f"DONE {result.instant_time}\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
