"""Expected table contents worked out from the input batches alone, and what is on disk.

`ExpectedTable` is a deliberately tiny model of Hudi's write operations for tables with
one record key field and plain (simple-key-generator) partitioning. It knows nothing of
lakeward: it applies each batch to a dict keyed by (partition path, record key), so tests
can compare what lakeward and hudi-rs read with rows derived from the input data.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

Row = dict[str, Any]
IS_DELETED = "_hoodie_is_deleted"
COMMIT_STEP = "_hoodie_commit_time"  # in expected rows: the index of the step that wrote the row


class ExpectedTable:
    """Table state implied by the input batches: (partition path, key) -> (step index, data row).

    Operations (as Hudi defines them, with the default `hoodie.combine.before.*`):
    insert / bulk_insert add rows (the model refuses keys that already exist, so a test never
    relies on duplicates); upsert de-duplicates the batch by the largest ordering value, then
    deletes rows flagged `_hoodie_is_deleted` and writes the others; delete removes keys;
    insert_overwrite replaces the partitions present in the batch; insert_overwrite_table
    replaces everything; delete_partition drops partitions.
    """

    def __init__(self, key: str, partition: str | None = None, ordering: str | None = None, hive: bool = False):
        self.key, self.partition, self.ordering, self.hive = key, partition, ordering, hive
        self.rows: dict[tuple[str, str], tuple[int, Row]] = {}
        self.steps = 0

    def partition_path(self, row: Mapping[str, Any]) -> str:
        if self.partition is None:
            return ""
        value = str(row[self.partition])
        return f"{self.partition}={value}" if self.hive else value

    def _id(self, row: Mapping[str, Any]) -> tuple[str, str]:
        return self.partition_path(row), str(row[self.key])

    def _combined(self, batch: Sequence[Row]) -> list[Row]:
        best: dict[tuple[str, str], Row] = {}
        for row in batch:
            current = best.get(self._id(row))
            if current is not None and self.ordering is not None:
                assert row[self.ordering] != current[self.ordering], "the model does not decide ordering ties"
                if row[self.ordering] < current[self.ordering]:
                    continue
            best[self._id(row)] = row
        return list(best.values())

    def _add(self, step: int, batch: Iterable[Row]) -> None:
        for row in batch:
            assert self._id(row) not in self.rows, f"the model does not hold duplicate keys: {self._id(row)}"
            self.rows[self._id(row)] = (step, dict(row))

    def apply(self, op: str, batch: Sequence[Row] = (), partitions: Sequence[str] = ()) -> None:
        step, self.steps = self.steps, self.steps + 1
        if op in ("insert", "bulk_insert"):
            self._add(step, batch)
        elif op == "upsert":
            for row in self._combined(batch):
                if row.get(IS_DELETED):
                    self.rows.pop(self._id(row), None)
                else:
                    self.rows[self._id(row)] = (step, dict(row))
        elif op == "delete":
            for row in batch:
                self.rows.pop(self._id(row), None)
        elif op == "insert_overwrite":
            replaced = {self.partition_path(r) for r in batch}
            self.rows = {k: v for k, v in self.rows.items() if k[0] not in replaced}
            self._add(step, batch)
        elif op == "insert_overwrite_table":
            self.rows = {}
            self._add(step, batch)
        elif op == "delete_partition":
            self.rows = {k: v for k, v in self.rows.items() if k[0] not in set(partitions)}
        else:
            raise ValueError(f"unknown operation {op}")

    def expected(self, columns: Sequence[str]) -> list[Row]:
        """Rows with the step index as commit time, the key and partition path, and `columns`."""
        out = [
            {COMMIT_STEP: step, "_hoodie_record_key": key, "_hoodie_partition_path": part}
            | {c: row.get(c) for c in columns}
            for (part, key), (step, row) in self.rows.items()
        ]
        return sort_rows(out)


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (str(r.get("_hoodie_partition_path")), str(r.get("_hoodie_record_key")), repr(r)))


def as_steps(rows: Iterable[Row], instants: Sequence[str], columns: Sequence[str]) -> list[Row]:
    """Rows read back, with the commit time replaced by the index of the step that made it."""
    out = []
    for row in rows:
        commit = row["_hoodie_commit_time"]
        assert commit in instants, f"row {row} has commit time {commit}, which no step produced"
        out.append(
            {
                COMMIT_STEP: instants.index(commit),
                "_hoodie_record_key": row["_hoodie_record_key"],
                "_hoodie_partition_path": row["_hoodie_partition_path"],
            }
            | {c: row[c] for c in columns}
        )
    return sort_rows(out)


def arrow_rows(data: Any) -> list[Row]:
    """Rows of a pyarrow Table, a list of RecordBatches (hudi-rs) or a Spark DataFrame."""
    if hasattr(data, "toArrow"):
        data = data.toArrow()
    if not isinstance(data, pa.Table):
        batches = list(data)
        if not batches:
            return []
        data = pa.Table.from_batches(batches)
    return data.to_pylist()


# -- what is on disk ---------------------------------------------------------------------
def data_files(path: str | Path) -> set[str]:
    """Relative paths of every Parquet file under the table, outside `.hoodie/`."""
    root = Path(path)
    out = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (Path(folder) == root and d == ".hoodie")]
        out |= {os.path.relpath(os.path.join(folder, f), root) for f in files if f.endswith(".parquet")}
    return out


def disk_state(path: str | Path) -> dict[str, str]:
    """Every file and folder under `path` (`.hoodie/` included) -> sha256 of the content ("<dir>" for folders)."""
    root = Path(path)
    if not root.exists():
        return {}
    out: dict[str, str] = {}
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(folder, d), root)] = "<dir>"
        for f in files:
            full = os.path.join(folder, f)
            out[os.path.relpath(full, root)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return out
