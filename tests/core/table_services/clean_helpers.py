"""Shared pieces of the cleaning and savepoint/restore tests: small tables with many tiny commits,
expected rows kept from the input batches, both readers (lakeward and hudi-rs) compared with them,
and a SIGKILL harness for `tests/core/scripts/crash_cleaner.py`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa

from lakeward.core.table import Table
from tests.support import crash

COLUMNS = ("id", "part", "ts", "val")
KEYS = {"a": [1, 2, 3], "b": [4, 5]}  # two file groups (one per partition) for small upserts


@dataclass
class Scenario:
    path: str
    table: Table
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    #: instant -> the expected rows as of it
    states: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    writes: list[str] = field(default_factory=list)

    def upsert(self, round_: int, keys: Mapping[str, list[int]] = KEYS) -> str:
        recs = [(k, p, round_, f"v{round_}-{k}") for p, ks in keys.items() for k in ks]
        batch = pa.table({c: [r[i] for r in recs] for i, c in enumerate(COLUMNS)})
        instant = self.table.upsert(batch).instant_time
        self.rows.update({r[0]: r for r in recs})
        return self._record(instant)

    def overwrite_partition(self, round_: int, part: str, keys: list[int]) -> str:
        recs = [(k, part, round_, f"o{round_}-{k}") for k in keys]
        batch = pa.table({c: [r[i] for r in recs] for i, c in enumerate(COLUMNS)})
        instant = self.table.insert_overwrite(batch).instant_time
        self.rows = {k: r for k, r in self.rows.items() if r[1] != part}
        self.rows.update({r[0]: r for r in recs})
        return self._record(instant)

    def _record(self, instant: str) -> str:
        self.states[instant] = self.expected()
        self.writes.append(instant)
        return instant

    def expected(self) -> list[tuple[Any, ...]]:
        return sorted(self.rows.values())

    def reopen(self, options: Mapping[str, Any] | None = None) -> Table:
        self.table = Table.open(self.path, options=options)
        return self.table

    def assert_both_readers(self, as_of: str | None = None, what: str = "") -> None:
        want = self.states[as_of] if as_of else self.expected()
        ours = as_tuples(Table.open(self.path).read(as_of=as_of))
        assert ours == want, f"lakeward {what} as of {as_of}"
        assert as_tuples(hudi_read(self.path, as_of)) == want, f"hudi-rs {what} as of {as_of}"


def new_scenario(path: Path, table_type: str = "COPY_ON_WRITE", table_version: int = 6, **options: Any) -> Scenario:
    table = Table.create(
        str(path),
        table_version=table_version,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        options=options,
    )
    return Scenario(str(path), table)


def hudi_read(path: str, as_of: str | None = None) -> pa.Table:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(options)
    return pa.Table.from_batches(batches) if batches else pa.table({c: [] for c in COLUMNS})


def as_tuples(data: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(tuple(r[c] for c in COLUMNS) for r in data.select(list(COLUMNS)).to_pylist())


def data_files(path: str) -> set[str]:
    """Relative paths of every base and log file of the table."""
    out = set()
    for root, _, names in os.walk(path):
        if "/.hoodie" in root:
            continue
        for name in names:
            if name.endswith(".parquet") or ".log." in name:
                out.add(os.path.relpath(os.path.join(root, name), path))
    return out


def base_instants(path: str) -> dict[str, list[str]]:
    """Partition -> sorted instant times of its base files (one file group per partition here)."""
    out: dict[str, list[str]] = {}
    for rel in data_files(path):
        if rel.endswith(".parquet"):
            part, name = rel.split("/")
            out.setdefault(part, []).append(name.rsplit("_", 1)[1].removesuffix(".parquet"))
    return {k: sorted(v) for k, v in out.items()}


def timeline_files(path: str) -> list[str]:
    return sorted(n for n in os.listdir(os.path.join(path, ".hoodie")) if n[0].isdigit())


def run_and_kill(path: str, point: str, instant: str, timeout: float = 60.0) -> None:
    """Start the crash script, wait until it reports `point`, SIGKILL it."""
    crash.run_and_kill("crash_cleaner.py", path, point, instant, timeout=timeout)
