"""One writer process of the multi-process writer test: several rounds of upserts to one table.

Usage: python mp_writer.py <table uri> <json: {"options", "storage_options"}> <writer id> <rounds>

It opens the table, prints `READY` and waits for a line on stdin (so that the test starts
every writer process at once, after their imports), then runs the rounds. Round r upserts the keys
`w<id>-<r>-<k>` into the writer's own partition `p<id>` (disjoint from the others) and, on
odd rounds, the keys `shared-<k>` into the partition `shared` every writer updates
(overlapping), all with value `w<id>r<r>`. It prints one JSON line per round:
`{"round": r, "instant": <time or null>, "error": <class name or null>, "message": <text or null>}`.
An error other than a LakewardError ends the process with a traceback (the test fails).
"""

from __future__ import annotations

import json
import sys
import traceback

import pyarrow as pa

from lakeward.core.exceptions import LakewardError
from lakeward.core.table import Table


def batch(writer: int, round_: int) -> pa.Table:
    """The rows of one round (the test rebuilds them to compute what the table must hold)."""
    keys = [f"w{writer}-{round_}-{k}" for k in range(3)]
    parts = [f"p{writer}"] * 3
    if round_ % 2 == 1:
        keys += [f"shared-{k}" for k in range(2)]
        parts += ["shared"] * 2
    return pa.table({"id": keys, "part": parts, "ts": [0] * len(keys), "v": [f"w{writer}r{round_}"] * len(keys)})


def main() -> int:
    uri, setup, writer, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    table = Table.open(uri, options=setup["options"], storage_options=setup["storage_options"])
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    sys.stdin.readline()
    for round_ in range(rounds):
        out: dict[str, object] = {"round": round_, "instant": None, "error": None, "message": None}
        try:
            out["instant"] = table.upsert(batch(writer, round_)).instant_time
        except LakewardError as exc:
            out["error"] = type(exc).__name__
            out["message"] = str(exc)
            out["trace"] = traceback.format_exc()
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
