"""The embedded demo of `lakeward serve --demo`: two small tables, a writer that keeps them busy, a config.

- `orders`: MERGE_ON_READ, partitioned by region; every write is a delta commit, so the
  daemon has compactions to schedule and run, then cleans and archival.
- `customers`: COPY_ON_WRITE; every write adds file slices for the cleaner.

The writer runs in the daemon's process (a thread) with the in-process table lock that the
daemon's in-process coordinator pairs with, so no ZooKeeper is needed.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml

from lakeward.core.table import Table

log = logging.getLogger(__name__)

DEMO_TOKEN = "demo-token"
REGIONS = ("emea", "amer", "apac")


def demo_config(folder: Path, port: int = 8080) -> dict[str, Any]:
    """The daemon settings of the demo (written to `<folder>/lakeward-demo.yaml`)."""
    return {
        "tables": {
            "static": [{"path": str(folder / "orders")}, {"path": str(folder / "customers")}],
            "refresh_interval_s": 3,
        },
        "policies": {
            "defaults": {
                "compaction": {"max_delta_commits": 3},
                "clean": {"commits_retained": 2, "min_commits_between": 3},
                "archival": {"keep_min_commits": 6, "keep_max_commits": 10},
            }
        },
        "concurrency": {"max_running": 2},
        "spark": {"master": "local[2]", "conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False}},
        "http": {"host": "127.0.0.1", "port": port, "api_tokens": [DEMO_TOKEN]},
        "log": {"format": "text"},
        "drain_time_s": 20,
    }


def create_demo_tables(folder: Path) -> list[Table]:
    """Create (or open) the demo tables under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    tables = []
    for name, kind, partition in (("orders", "MERGE_ON_READ", "region"), ("customers", "COPY_ON_WRITE", None)):
        path = folder / name
        if (path / ".hoodie" / "hoodie.properties").exists():
            tables.append(Table.open(str(path)))
        else:
            table = Table.create(
                str(path), record_key="id", partition_by=partition, ordering_field="ts", table_type=kind
            )
            # Every key exists from the start: the writer's upserts are updates, which a
            # merge-on-read table appends to log files (inserts would go to small base files).
            table.bulk_insert(_batch(random.Random(0), 0, KEYS, list(range(KEYS))))
            tables.append(table)
    return tables


def write_config(folder: Path, port: int = 8080) -> Path:
    path = folder / "lakeward-demo.yaml"
    path.write_text(
        "# written by `lakeward serve --demo`\n" + yaml.safe_dump(demo_config(folder, port), sort_keys=False)
    )
    return path


KEYS = 2_000


def _batch(rng: random.Random, round_no: int, rows: int, ids: list[int] | None = None) -> pa.Table:
    ids = ids if ids is not None else [rng.randrange(0, KEYS) for _ in range(rows)]
    rows = len(ids)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "region": [REGIONS[i % len(REGIONS)] for i in ids],
            "amount": [round(rng.uniform(1, 500), 2) for _ in ids],
            "ts": pa.array([round_no] * rows, pa.int64()),
        }
    )


class DemoWriter:
    """Upserts a small batch into each demo table every `interval_s` seconds, in a thread."""

    def __init__(self, tables: list[Table], interval_s: float = 4.0, rows: int = 200, seed: int = 7):
        self.tables = tables
        self.interval_s = interval_s
        self.rows = rows
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="demo-writer", daemon=True)
        self.commits = 0

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        round_no = int(time.time())
        while not self._stop.wait(self.interval_s):
            round_no += 1
            for table in self.tables:
                try:
                    result = table.upsert(_batch(self._rng, round_no, self.rows))
                    self.commits += 1
                    log.info("demo writer: upserted %d rows into %s at %s", self.rows, table.name, result.instant_time)
                except Exception:
                    log.exception("demo writer: upsert into %s failed (retrying next round)", table.name)


__all__ = ["DEMO_TOKEN", "KEYS", "DemoWriter", "create_demo_tables", "demo_config", "write_config"]
