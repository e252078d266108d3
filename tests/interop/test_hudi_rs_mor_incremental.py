"""Incremental (latest_state) reads of merge-on-read tables: lakeward and hudi-rs agree.

Log files carry updates and deletes written in the range; the read merges each touched
file group as of the range's end and keeps the rows whose commit time lies in the range.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from tests.interop.compare import incremental_mismatches, incremental_ranges, write_instants
from tests.interop.test_hudi_rs_mor_fixtures import MOR_FIXTURES


def _batch(ids: range, ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "city": [("sf", "nyc", "la")[i % 3] for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": [f"{tag}{i}" for i in ids],
        }
    )


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_incremental_over_log_updates_and_deletes(tmp_path: Path, block_format: str) -> None:
    path = str(tmp_path / "mor")
    table = Table.create(
        path,
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        options={"hoodie.logfile.data.block.format": block_format},
    )
    table.insert(_batch(range(60), 1, "a"))
    table.upsert(_batch(range(0, 60, 4), 2, "b"))  # updates into logs
    table.delete(keys=list(range(1, 60, 10)))  # delete blocks
    table.upsert(_batch(range(50, 80), 3, "c"))  # updates and inserts
    instants = write_instants(Table.open(path))
    assert len(instants) == 4
    latest = Table.open(path).read_incremental(instants[2], instants[3])
    assert sorted(latest.column("v").to_pylist()) == sorted(f"c{i}" for i in range(50, 80))
    problems = incremental_mismatches(path, incremental_ranges(instants))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("kind", "name"), MOR_FIXTURES)
def test_fixture_incremental_like_hudi_rs(fixture_table, kind: str, name: str) -> None:
    path = str(fixture_table(kind, name))
    problems = incremental_mismatches(path, incremental_ranges(write_instants(Table.open(path))))
    assert not problems, "\n".join(problems)
