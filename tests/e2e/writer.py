"""An ingestion writer of the daemon end-to-end test, run as its own process.

Usage: python writer.py <options json> <tables json> <stop file> <out file> [pause s]

`tables` is a list of [table index, path]. Round r = 1, 2, ... upserts `batch(index, r)`
into each of its tables in turn (the tables' lock options are the daemon's, so writer and
daemons exclude each other), until the stop file exists; a round always finishes. A write
that fails (a conflict, a lock timeout) is retried with the same batch: the batches are
deterministic, so the test knows every table's expected rows from the last round each
table committed. After each write it pauses `pause s` (default 0.4). One JSON line per
committed write goes to the out file:
`{"table": index, "round": r, "instant": t, "attempts": n, "errors": [...]}`.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pyarrow as pa

KEYS = 240
PARTITIONS = ("p0", "p1", "p2")
UPDATES_PER_ROUND = 24
MAX_ATTEMPTS = 10
PAUSE_S = 0.4


def partition_of(key: int) -> str:
    return PARTITIONS[key % len(PARTITIONS)]


def amount(table: int, round_no: int, key: int) -> float:
    return float(round_no * 100_000 + table * 1_000 + key) / 4


def seed_batch(table: int) -> pa.Table:
    """Every key once (round 0): later upserts are updates, which a merge-on-read table logs."""
    keys = list(range(KEYS))
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "part": [partition_of(k) for k in keys],
            "amount": [amount(table, 0, k) for k in keys],
            "ts": pa.array([0] * KEYS, pa.int64()),
        }
    )


def batch(table: int, round_no: int) -> pa.Table:
    """The upsert of round `round_no` (>= 1) into table `table`: distinct existing keys, new values."""
    keys = sorted(random.Random(f"{table}-{round_no}").sample(range(KEYS), UPDATES_PER_ROUND))
    return pa.table(
        {
            "id": pa.array(keys, pa.int64()),
            "part": [partition_of(k) for k in keys],
            "amount": [amount(table, round_no, k) for k in keys],
            "ts": pa.array([round_no] * len(keys), pa.int64()),
        }
    )


def expected_rows(table: int, rounds: int) -> list[dict[str, object]]:
    """The table's rows after the seed and rounds 1..rounds, sorted by id."""
    rows = {r["id"]: r for r in seed_batch(table).to_pylist()}
    for round_no in range(1, rounds + 1):
        rows.update({r["id"]: r for r in batch(table, round_no).to_pylist()})
    return [rows[k] for k in sorted(rows)]


def main() -> int:
    from lakeward.core.exceptions import LakewardError
    from lakeward.core.table import Table

    options = json.loads(sys.argv[1])
    tables = [(int(i), str(p)) for i, p in json.loads(sys.argv[2])]
    stop_file, out_file = Path(sys.argv[3]), Path(sys.argv[4])
    pause_s = float(sys.argv[5]) if len(sys.argv) > 5 else PAUSE_S
    opened = {i: Table.open(p, options=options) for i, p in tables}
    round_no = 0
    with open(out_file, "a", encoding="utf-8") as out:
        while not stop_file.exists():
            round_no += 1
            for index, _ in tables:
                errors: list[str] = []
                for attempt in range(1, MAX_ATTEMPTS + 1):
                    try:
                        instant = opened[index].upsert(batch(index, round_no)).instant_time
                    except LakewardError as exc:
                        errors.append(f"{type(exc).__name__}: {exc}")
                        time.sleep(0.2 * attempt)
                        continue
                    line = {"table": index, "round": round_no, "instant": instant, "attempts": attempt}
                    out.write(json.dumps({**line, "errors": errors}) + "\n")
                    out.flush()
                    break
                else:
                    sys.stderr.write(f"table {index} round {round_no}: gave up after {MAX_ATTEMPTS} attempts\n")
                    sys.stderr.write("\n".join(errors) + "\n")
                    return 1
                time.sleep(pause_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
