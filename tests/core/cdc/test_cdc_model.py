"""Randomised: CDC queries return exactly the change log a plain model of the writes implies.

For copy-on-write and merge-on-read and each supplemental logging level: many commits of
random upserts, deletes, re-inserts, partition overwrites and partition deletes over a
small key space, with compactions, clusterings, change tracking and cleans interleaved;
then, for many random (begin, end] ranges, `read_changes` must equal the model's log.

On every table version lakeward writes (6, 8, 9). On 8 and 9 (Hudi 1.x) a range is in
completion time, as Hudi 1.x's incremental and CDC queries take it: the bounds asked for
are the commits' completion times, and the changes must be those of the commits that
completed in the range. After the run hudi-rs reads every state of the table (snapshot,
time travel to every instant, incremental) to lakeward's rows.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import InstantNotFoundError
from tests.interop.compare import fail_on
from tests.support.change_model import ChangeModel, read_as_changes
from tests.support.hudi_rs_states import readable_mismatches

KEYS = [f"k{i:02d}" for i in range(14)]
PARTS = ["p0", "p1"]
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


def _batch(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _run(tmp_path, table_type: str, mode: str, seed: int, version: int = 6) -> None:
    rng = random.Random(seed)
    table = Table.create(
        str(tmp_path / "t"),
        table_version=version,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        options={
            "hoodie.table.cdc.enabled": "true",
            "hoodie.table.cdc.supplemental.logging.mode": mode,
            "hoodie.cleaner.commits.retained": 6,
            "hoodie.parquet.small.file.limit": 2000 if rng.random() < 0.5 else 0,
        },
    )
    model = ChangeModel("id", "part")
    part_of = {k: PARTS[i % 2] for i, k in enumerate(KEYS)}  # a key lives in one partition
    ts = 0
    instants: list[str] = []
    services: list[str] = []
    for _ in range(16):
        ts += 1
        roll = rng.random()
        if roll < 0.55 or not model.rows:
            keys = rng.sample(KEYS, rng.randint(1, 6))
            rows = [{"id": k, "part": part_of[k], "v": rng.randint(0, 999), "ts": ts} for k in keys]
            instant = table.upsert(_batch(rows)).instant_time
            model.upsert(instant, rows)
        elif roll < 0.8:
            keys = rng.sample(KEYS, rng.randint(1, 5))  # some may not exist: no change for those
            rows = [{"id": k, "part": part_of[k], "v": 0, "ts": ts} for k in keys]
            instant = table.delete(_batch(rows)).instant_time
            model.delete(instant, keys)
        elif roll < 0.92:
            part = rng.choice(PARTS)
            keys = rng.sample([k for k in KEYS if part_of[k] == part], 3)
            rows = [{"id": k, "part": part, "v": rng.randint(0, 999), "ts": ts} for k in keys]
            instant = table.insert_overwrite(_batch(rows)).instant_time
            model.insert_overwrite(instant, rows)
        else:
            part = rng.choice(PARTS)
            instant = table.delete_partition([part]).instant_time
            model.delete_partitions(instant, [part])
        instants.append(instant)
        service = rng.random()
        if table_type == "MERGE_ON_READ" and service < 0.2:
            planned = table.schedule_compaction(force=True)
            if planned:
                table.run_compaction(planned)
                services.append("compaction")
        elif table_type == "MERGE_ON_READ" and service < 0.35:
            planned = table.schedule_change_tracking()
            if planned:
                table.run_change_tracking(planned)
                services.append("change_tracking")
        elif service < 0.45:
            planned = table.schedule_clustering()
            if planned:
                table.run_clustering(planned)
                services.append("clustering")
        elif service < 0.55 and table.clean() is not None:
            services.append("clean")

    # The time a commit's range bound is given in: its instant time (v6), its completion time (v8+).
    bound_of = {i.time: i.ordering_time for i in table.timeline().completed()}
    compared = 0
    bounds = ["earliest", *instants]
    for _ in range(25):
        i = rng.randrange(len(bounds))
        j = rng.randrange(i, len(instants) + 1)
        begin = bounds[i]
        end = instants[j - 1] if j > i and rng.random() < 0.7 else None
        try:
            got = table.read_changes(bound_of.get(begin, begin), end and bound_of[end], images="struct")
        except InstantNotFoundError as exc:
            assert "cleaned" in str(exc) or "retained" in str(exc), exc
            continue
        start = "" if begin == "earliest" else begin
        assert read_as_changes(table, got.to_pylist(), "id") == model.changes(start, end), (begin, end, services)
        compared += 1
    latest = table.read_changes(bound_of[instants[-4]], images="struct")
    assert read_as_changes(table, latest.to_pylist(), "id") == model.changes(instants[-4], None)
    assert compared >= 5, f"only {compared} ranges were queryable"
    if version != 6:
        assert set(bound_of) != set(bound_of.values()), "v8+ ranges are asked in completion time"
    fail_on(readable_mismatches(table.path))


@pytest.mark.slow  # ~10 s each: a randomised model run per table type and logging mode
@pytest.mark.parametrize("version", [6, 8, 9])
@pytest.mark.parametrize("mode", ["KEY_OP", "DATA_BEFORE", "DATA_BEFORE_AFTER"])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_cdc_queries_match_the_model(tmp_path, table_type, mode, version):
    for seed in range(3):
        _run(tmp_path / str(seed), table_type, mode, seed, version)


@pytest.mark.parametrize(("table_type", "mode"), [("COPY_ON_WRITE", "DATA_BEFORE_AFTER"), ("MERGE_ON_READ", "KEY_OP")])
@pytest.mark.parametrize("version", [8, 9])
def test_cdc_queries_match_the_model_on_hudi_1x_tables(tmp_path, table_type, mode, version):
    """One seed per Hudi 1.x version in the default run (the slow run takes every mode and seed)."""
    _run(tmp_path, table_type, mode, 7, version)
