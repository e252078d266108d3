"""`hoodie.index.type=RECORD_INDEX` on the Spark engine (issue 17): the Spark data plane locates the
batch's keys through the metadata table's `record_index` partition (not its join with the stored
keys), and the commit keeps that partition from what the tagging found.

Randomised against a model on copy-on-write and merge-on-read: every upsert's and delete's tagging
(updates vs inserts, deletes found) is the model's, including keys that live only in log files and
deleted keys inserted again; after each step the record index maps every key ever written exactly
as the table's latest slices hold it (deleted keys: nowhere), the change the write gave the record
index equals the one derived by re-reading the files it wrote, and lakeward and hudi-rs read the
model's rows.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.metadata_table import writer
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.record_index import (
    RecordIndex,
    RecordIndexChange,
    live_slice_keys,
    record_index_change,
)
from lakeward.core.write.plane.spark import SparkDataPlane
from tests.support.keyed_rows import Model, batch, bucket_table_with_log_keys, check_rows, random_upsert

pytestmark = pytest.mark.spark


def _slices_map(table: Table) -> dict[str, tuple[str, str]]:
    """Key -> (partition, file id) of every key the table's latest slices hold live."""
    committed = CommittedInstants.of(table.timeline())
    out: dict[str, tuple[str, str]] = {}
    for s in table.file_slices():
        for key in live_slice_keys(table.storage, s, committed, table.config).to_pylist():
            assert key not in out, key
            out[key] = (s.partition_path, s.file_id)
    return out


def _check(path: str, model: Model, gone: set[str]) -> None:
    """The record index equals the slices' key -> file group map (deleted keys: absent); rows agree."""
    table = Table.open(path)
    held = _slices_map(table)
    assert sorted(held) == sorted(model)
    keys = sorted(model) + sorted(gone)
    partitions, file_ids = RecordIndex(table.storage).locate(pa.array(keys, pa.string()))
    indexed = dict(zip(keys, zip(partitions.to_pylist(), file_ids.to_pylist(), strict=True), strict=True))
    assert indexed == {**{k: held[k] for k in model}, **dict.fromkeys(gone, (None, None))}
    assert compare_files_partition(table.storage).ok
    check_rows(path, model)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_record_index_tagging_matches_the_model(
    spark: Any, tmp_path: Path, table_type: str, monkeypatch: pytest.MonkeyPatch
):
    seen: list[tuple[RecordIndexChange | None, RecordIndexChange]] = []
    real = writer.write_files_delta_commit

    def spy(storage: Any, timezone: str, instant_time: str, change: Any) -> Any:
        if change.commit is not None and (change.commit.operationType or "").lower() in ("upsert", "delete"):
            tagged = change.record_index() if change.record_index is not None else None
            seen.append((tagged, record_index_change(storage, instant_time, change.commit)))
        return real(storage, timezone, instant_time, change)

    def no_join(*args: Any) -> Any:
        raise AssertionError("RECORD_INDEX tagging fell back to the join with the stored keys")

    rng = random.Random(170 if table_type == "COPY_ON_WRITE" else 171)
    path = str(tmp_path / "t")
    model = bucket_table_with_log_keys(path, table_type, 9, inserted=24, appended=12)
    Table.open(path, options={"hoodie.index.type": "RECORD_INDEX"}).initialize_metadata_table()
    monkeypatch.setattr(writer, "write_files_delta_commit", spy)
    monkeypatch.setattr(SparkDataPlane, "_tag_by_join", no_join)
    table = Table.open(path, engine=SparkEngine(spark), options={"hoodie.index.type": "RECORD_INDEX"})
    gone: set[str] = set()
    next_key = 36
    for step in range(4):
        fresh = [f"k{next_key + i}" for i in range(3)]
        next_key += 3
        rows, updates, reinserts = random_upsert(rng, model, gone, fresh, updates=5, ts=step + 2)
        result = table.upsert(spark.createDataFrame(batch(rows).to_pandas()))
        assert (result.num_updates, result.num_inserts) == (len(updates), len(reinserts) + len(fresh)), step
        model |= rows
        gone -= set(reinserts)
        deleted = {k: model.pop(k) for k in rng.sample(sorted(model), 3)}
        never = {f"x{step}": ("p0", 1, 0)}  # a key the table never held: deletes nothing
        assert table.delete(spark.createDataFrame(batch(deleted | never).to_pandas())).num_deletes == 3
        gone |= set(deleted)
        if step == 1 and table_type == "MERGE_ON_READ":
            instant = table.schedule_compaction(force=True)
            assert instant is not None
            table.run_compaction(instant)
        _check(path, model, gone)
    assert len(seen) == 8
    for tagged, derived in seen:
        assert tagged is not None  # the write's own change, not a re-read of the files
        assert (tagged.upserts, tagged.deletes) == (derived.upserts, derived.deletes)

    with pytest.raises(ConfigError, match="global index"):  # the record index is global
        key = sorted(model)[0]
        moved = {key: ("p0" if model[key][0] != "p0" else "p1", 9, 0)}
        table.upsert(spark.createDataFrame(batch(moved).to_pandas()))
    with pytest.raises(ConfigError, match="global index"):  # also into a partition without file groups
        table.upsert(spark.createDataFrame(batch({sorted(model)[0]: ("p-new", 9, 0)}).to_pandas()))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_spark_record_index_batch_with_one_new_key_in_two_partitions_keeps_one(
    spark: Any, tmp_path: Path, table_type: str
):
    """As on the local engine: the record index is global, so the batch is de-duplicated by key alone
    (the latest ordering value wins), also when no partition holds a key twice."""
    from tests.support.keyed_rows import SCHEMA

    path = str(tmp_path / "t")
    options = {"hoodie.index.type": "RECORD_INDEX"}
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=9
    )
    table = Table.open(path, engine=SparkEngine(spark), options=options)
    table.upsert(spark.createDataFrame(batch({"k1": ("p1", 1, 1)}).to_pandas()))
    rows = [
        {"id": "k2", "part": "p1", "ts": 5, "val": 1},
        {"id": "k2", "part": "p2", "ts": 7, "val": 2},
        {"id": "k3", "part": "p2", "ts": 9, "val": 3},
        {"id": "k3", "part": "p1", "ts": 8, "val": 4},
    ]
    result = table.upsert(spark.createDataFrame(pa.Table.from_pylist(rows, schema=SCHEMA).to_pandas()))
    assert (result.num_inserts, result.num_updates) == (2, 0)
    check_rows(path, {"k1": ("p1", 1, 1), "k2": ("p2", 7, 2), "k3": ("p2", 9, 3)})
