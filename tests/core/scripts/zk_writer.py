"""One writer process of the ZooKeeper multi-writer test: several rounds of upserts.

Usage: python zk_writer.py <table path> <options json> <writer id> <rounds>

Round r upserts keys `w<id>-<r>-<k>` into the writer's own partition (disjoint from the
others) and, on odd rounds, keys `shared-<k>` into the partition every writer updates
(overlapping), all with value `w<id>r<r>`. Prints one JSON line per round:
`{"round": r, "instant": <time or null>, "error": <class name or null>, "failed": <instant or null>}`.
"""

from __future__ import annotations

import json
import re
import sys

import pyarrow as pa

from lakeward.core.exceptions import ConcurrentWriteError
from lakeward.core.table import Table


def batch(writer: int, round_: int) -> pa.Table:
    keys = [f"w{writer}-{round_}-{k}" for k in range(3)]
    parts = [f"p{writer}"] * 3
    if round_ % 2 == 1:
        keys += [f"shared-{k}" for k in range(2)]
        parts += ["shared"] * 2
    return pa.table({"id": keys, "part": parts, "ts": [0] * len(keys), "v": [f"w{writer}r{round_}"] * len(keys)})


def main() -> int:
    path, options, writer, rounds = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    table = Table.open(path, options=options)
    for round_ in range(rounds):
        out: dict[str, object] = {"round": round_, "instant": None, "error": None, "failed": None}
        try:
            out["instant"] = table.upsert(batch(writer, round_)).instant_time
        except ConcurrentWriteError as exc:
            out["error"] = type(exc).__name__
            m = re.search(r"instant (\d{17})", str(exc))
            out["failed"] = m.group(1) if m else None
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
