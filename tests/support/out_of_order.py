"""Two optimistic-concurrency writers that complete out of order, on a CDC-enabled table.

On table versions 8+ a range is in completion time. Writer A is requested first but held
just before it completes (before `reconcile_markers`, outside the table lock) while writer B,
requested later, completes; then A completes. So A's instant time is before B's, its
completion time after B's: the range (B.completion, A.completion] holds A only, though
A's instant time (the `ts_ms` of its changes) is before the range's begin.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

import lakeward.core.write.client as client_mod
from lakeward import Table

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
OPTIONS = {
    "hoodie.table.cdc.enabled": "true",
    "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE_AFTER",
    "hoodie.metadata.enable": "false",
    "hoodie.write.concurrency.mode": "OPTIMISTIC_CONCURRENCY_CONTROL",
}


def rows(*changes: tuple[str, str, int, int]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, c, strict=True)) for c in changes], schema=SCHEMA)


@dataclass(frozen=True)
class OutOfOrder:
    """The table and its three writes: `first`, then A (requested before B, completed after it)."""

    path: str
    first: str
    a: str
    b: str
    completion: dict[str, str]  # instant time -> completion time


def write_out_of_order(path: str, version: int, table_type: str) -> OutOfOrder:
    """`first` (keys a, b), then A (updates a, inserts c, in p0) and B (updates b, in p1) out of order."""
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
                         table_version=version, options=OPTIONS)  # fmt: skip
    first = table.upsert(rows(("a", "p0", 1, 1), ("b", "p1", 1, 1))).instant_time
    reached, release = threading.Event(), threading.Event()
    original = client_mod.reconcile_markers

    def held(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "writer-A":
            reached.set()
            if not release.wait(60):
                raise TimeoutError("writer A was never released")
        return original(*args, **kwargs)

    done: dict[str, Any] = {}
    writer_a, writer_b = Table.open(path, options=OPTIONS), Table.open(path, options=OPTIONS)

    def write_a() -> None:
        try:
            done["A"] = writer_a.upsert(rows(("a", "p0", 2, 20), ("c", "p0", 2, 30))).instant_time
        except BaseException as exc:  # handed to the calling thread
            done["error"] = exc

    client_mod.reconcile_markers = held  # type: ignore[assignment]
    try:
        thread = threading.Thread(target=write_a, name="writer-A", daemon=True)
        thread.start()
        assert reached.wait(60), "writer A never reached its completion"
        b = writer_b.upsert(rows(("b", "p1", 2, 200))).instant_time
        release.set()
        thread.join(60)
    finally:
        release.set()
        client_mod.reconcile_markers = original  # type: ignore[assignment]
    if "error" in done:
        raise done["error"]
    a = done["A"]
    completion = Table.open(path).timeline().completion_times()
    assert a < b and completion[b] < completion[a], ("not out of order", a, b, completion)
    return OutOfOrder(path, first, a, b, completion)
