"""Run one upsert with the given options and freeze it while in flight, for heartbeat tests.

Usage: python heartbeat_writer.py <table path> <options json> <batch.parquet>

The writer stops right after its inflight instant exists (its heartbeat thread keeps
beating: a slow but live writer), prints `REACHED <instant>` and sleeps until killed.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pyarrow.parquet as pq

import lakeward.core.write.client as client_mod
from lakeward.core.table import Table


def main() -> int:
    path, options, batch_path = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    original = client_mod.transition_to_inflight

    def frozen(storage: Any, requested: Any, *args: Any, **kwargs: Any) -> Any:
        original(storage, requested, *args, **kwargs)
        sys.stdout.write(f"REACHED {requested.time}\n")
        sys.stdout.flush()
        while True:  # wait for SIGKILL
            time.sleep(60)

    client_mod.transition_to_inflight = frozen  # type: ignore[assignment]
    Table.open(path, options=options).upsert(pq.read_table(batch_path))
    return 3


if __name__ == "__main__":
    sys.exit(main())
