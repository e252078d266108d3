"""Issue 18, item 1 on the Spark engine: tagging confirms keys against a slice's real keys.

The Spark write path tags records with the file group that holds their key. On
merge-on-read a key can live only in a file group's log (a re-upsert after a delete, on
top of a compacted base; or an insert routed into a log): tagging that reads base files
only missed it and inserted the key a second time into a new file group. These tests run
the issue's reproductions through `Table.upsert(..., engine="spark")` and through the
`format("lakeward")` data source, and check lakeward and hudi-rs read every key once,
with the same insert/update/delete counts as the local engine.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

import lakeward.spark
from lakeward.core.file_group.base_file import read_footer_keys
from lakeward.core.table import Table
from lakeward.core.write.client import WriteResult

pytestmark = pytest.mark.spark

SMALL_BLOOM = {
    "hoodie.index.bloom.num_entries": "60",
    "hoodie.index.bloom.fpp": "0.2",
    "hoodie.bloom.index.prune.by.ranges": "false",
}


def _rows(keys: list[str], ts: int, value: str) -> pa.Table:
    return pa.Table.from_pylist([{"uuid": k, "ts": ts, "v": value} for k in keys])


def _duplicates(path: str) -> tuple[dict[str, int], dict[str, int]]:
    """Keys read more than once by lakeward and by hudi-rs."""
    mine = Counter(Table.open(path).read(columns=["uuid"]).column("uuid").to_pylist())
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    theirs = Counter(k for b in batches for k in b.column("uuid").to_pylist())
    return {k: n for k, n in mine.items() if n > 1}, {k: n for k, n in theirs.items() if n > 1}


def _counts(result: WriteResult) -> tuple[int, int, int]:
    return result.num_inserts, result.num_updates, result.num_deletes


def _upsert(spark: Any, path: str, batch: pa.Table, engine: str, options: dict[str, str] | None = None) -> WriteResult:
    data = spark.createDataFrame(batch) if engine == "spark" else batch
    return Table.open(path, options=options).upsert(data, engine=engine)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_reupsert_around_pending_compaction_keeps_one_row(spark: Any, tmp_path: Path, engine: str) -> None:
    """The issue's deterministic sequence: after it, k3 lives only in a log over the compacted base."""
    p = str(tmp_path / "t")
    Table.create(p, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ")
    assert _counts(_upsert(spark, p, _rows([f"k{i}" for i in range(10)], 1, "a"), engine)) == (10, 0, 0)
    assert Table.open(p).delete(keys=["k3"]).num_deletes == 1
    c = Table.open(p).schedule_compaction(force=True)
    assert c is not None
    # k3's group still holds it (base file and delete block): an update of that group.
    assert _counts(_upsert(spark, p, _rows(["k3"], 2, "b"), engine)) == (0, 1, 0)
    Table.open(p).run_compaction(c)
    assert _counts(_upsert(spark, p, _rows(["k3"], 3, "c"), engine)) == (0, 1, 0)
    assert _duplicates(p) == ({}, {})
    rows = Table.open(p).read(columns=["uuid", "ts", "v"]).to_pylist()
    assert len(rows) == 10 and {"uuid": "k3", "ts": 3, "v": "c"} in rows
    # A delete on Spark finds the key that lives only in the log.
    deleted = Table.open(p).delete(spark.createDataFrame(_rows(["k3"], 4, "d")), engine="spark")
    assert deleted.num_deletes == 1, "the delete of a key held only in a log was dropped"
    assert sorted(r["uuid"] for r in Table.open(p).read(columns=["uuid"]).to_pylist()) == sorted(
        f"k{i}" for i in range(10) if i != 3
    )


def test_small_bloom_filter_on_merge_on_read_spark_matches_local(spark: Any, tmp_path: Path) -> None:
    """Saturated bloom filters: new keys are inserts, log-only keys are found, counts equal the local engine's."""
    paths = {engine: str(tmp_path / engine) for engine in ("local", "spark")}
    for p in paths.values():
        Table.create(p, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ", options=SMALL_BLOOM)
    live: set[str] = set()
    steps: list[pa.Table] = []
    for batch in range(4):
        keys = [f"k{batch:02d}-{i:03d}" for i in range(40)]
        steps.append(_rows(keys, batch, "a"))
        old = sorted(live)[:5]
        if old:
            steps.append(_rows(old, 100 + batch, "u"))
        live |= set(keys)
    for i in range(3):
        steps.append(_rows([f"new-{i}"], 1000, "n"))
        steps.append(_rows([f"new-{i}"], 1001, "m"))
        live.add(f"new-{i}")
    for n, batch in enumerate(steps):
        local = _upsert(spark, paths["local"], batch, "local", SMALL_BLOOM)
        on_spark = _upsert(spark, paths["spark"], batch, "spark", SMALL_BLOOM)
        assert _counts(on_spark) == _counts(local), f"step {n}: counts differ from the local engine"
        assert _duplicates(paths["spark"]) == ({}, {}), f"step {n}: a key is stored twice"
    mine = Table.open(paths["spark"]).read(columns=["uuid"]).column("uuid").to_pylist()
    assert sorted(mine) == sorted(live)


def test_datasource_upsert_of_a_key_only_in_a_log(spark: Any, tmp_path: Path) -> None:
    """The same sequence through df.write.format("lakeward"): one row per key."""
    lakeward.spark.register(spark)
    p = str(tmp_path / "t")
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "uuid",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.table.type": "MERGE_ON_READ",
        "hoodie.datasource.write.operation": "upsert",
    }

    def save(batch: pa.Table, mode: str = "append") -> None:
        spark.createDataFrame(batch).write.format("lakeward").options(**options).mode(mode).save(p)

    save(_rows([f"k{i}" for i in range(10)], 1, "a"), mode="overwrite")
    Table.open(p).delete(keys=["k3"])
    c = Table.open(p).schedule_compaction(force=True)
    assert c is not None
    save(_rows(["k3"], 2, "b"))
    Table.open(p).run_compaction(c)
    save(_rows(["k3"], 3, "c"))
    assert _duplicates(p) == ({}, {})
    assert Table.open(p).read().num_rows == 10


def _scan_reads(caplog: pytest.LogCaptureFixture) -> tuple[int, int, int, int]:
    """(base files read, base files without logs, slices with logs, (slice, key) pairs the tasks checked)
    of the one BLOOM key scan logged."""
    found = [r.getMessage() for r in caplog.records if "BLOOM key scan read the keys of" in r.getMessage()]
    assert len(found) == 1, f"no (or more than one) BLOOM key scan on the Spark engine: {found}"
    numbers = re.search(
        r"of (\d+) of (\d+) base file\(s\) without logs .* of (\d+) slice\(s\) with logs; (\d+) \(slice, key\)",
        found[0],
    )
    assert numbers is not None, found[0]
    read, base_only, with_logs, pairs = (int(x) for x in numbers.groups())
    return read, base_only, with_logs, pairs


@pytest.mark.parametrize("use_metadata", [False, True])
def test_spark_bloom_tagging_reads_the_keys_of_the_admitting_base_files_only(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, use_metadata: bool
) -> None:
    """Issue 17: BLOOM on the Spark engine checks each base file's key range and bloom filter in the
    key-scan task and reads the file's keys only if some key of the batch passes; a slice with logs
    is always read (a key can live only there). Counts and rows stay exact (lakeward and hudi-rs),
    with or without `hoodie.bloom.index.use.metadata` (the footers' filters are the same bytes)."""
    p = str(tmp_path / "t")
    options = {
        "hoodie.parquet.small.file.limit": "0",  # one file group per insert
        "hoodie.metadata.index.bloom.filter.enable": "true",
        "hoodie.bloom.index.use.metadata": str(use_metadata).lower(),
    }
    Table.create(p, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9)
    live: dict[str, tuple[int, str]] = {}
    for group in "abcd":  # four file groups with disjoint key ranges: a000-a099, b000-b099, ...
        keys = [f"{group}{i:03d}" for i in range(100)]
        Table.open(p, options=options).insert(_rows(keys, 1, "i"))
        live |= {k: (1, "i") for k in keys}

    def upsert(keys: list[str], ts: int) -> tuple[int, int, int]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lakeward.core.write.plane.spark"):
            result = _upsert(spark, p, _rows(keys, ts, f"u{ts}"), "spark", options)
        live.update({k: (ts, f"u{ts}") for k in keys})
        return _counts(result)

    # b500 and z001 are in no file's key range (b holds b000-b099): b only is read, and only b010 and
    # b020 reach a task (the join compares the keys with each file's key range)
    assert upsert(["b010", "b020", "b500", "z001"], 2) == (2, 2, 0)
    assert _scan_reads(caplog) == (1, 4, 0, 2)
    # b now has a log: read whatever the keys (all 3 reach it); c for c005 (c600 is out of its range) by
    # its filter; the new group (b500-z001 from the last step) gets all 3 and is read for b500; a and d
    # get none
    assert upsert(["c005", "c600", "b500"], 3) == (1, 2, 0)
    assert _scan_reads(caplog) == (2, 4, 1, 3 + 1 + 3)
    # no key admitted anywhere (in no range, or rejected by the filter): no base file without logs read,
    # all inserts; b, c and b500-z001 (logs since the last steps' updates) get both keys each, a, d
    # and the group of c600 none
    assert upsert(["a500", "e001"], 4) == (2, 0, 0)
    assert _scan_reads(caplog)[0] == 0
    assert _scan_reads(caplog)[3] == 3 * 2
    assert _duplicates(p) == ({}, {})
    rows = Table.open(p).read(columns=["uuid", "ts", "v"]).to_pylist()
    assert sorted((r["uuid"], r["ts"], r["v"]) for r in rows) == sorted((k, *v) for k, v in live.items())


def test_spark_bloom_false_positive_is_read_and_stays_an_insert(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key the base file's bloom filter admits but the file does not hold: the file is read (its
    keys checked) and the key is inserted, as on the local engine, which the table matches."""
    paths = {engine: str(tmp_path / engine) for engine in ("local", "spark")}
    options = {**SMALL_BLOOM, "hoodie.bloom.index.prune.by.ranges": "true"}
    keys = [f"k{i:03d}" for i in range(0, 200, 2)]  # even keys: the odd ones are inside the key range
    for p in paths.values():
        Table.create(p, record_key="uuid", ordering_field="ts", options=options)
        Table.open(p, options=options).insert(_rows(keys, 1, "i"))

    def absent_keys(admitted: bool) -> list[str]:
        """Keys inside the file's key range that it does not hold, which its bloom filter admits (or not)."""
        table = Table.open(paths["spark"])
        (base,) = [s.base_file for s in table.file_slices()]
        assert base is not None
        bloom = read_footer_keys(table.storage, base.path).bloom
        assert bloom is not None
        odd = [f"k{i:03d}" for i in range(101, 199, 2)]
        found = [k for k, hit in zip(odd, bloom.might_contain(pa.array(odd)).tolist()) if hit == admitted]
        assert len(found) >= 2, "the small filter should admit some absent keys and reject others"
        return found[:2]

    for step, read in ((1, 1), (2, 0)):
        batch = _rows(absent_keys(admitted=read == 1) + (["k010"] if read else []), 1 + step, "u")
        local = _upsert(spark, paths["local"], batch, "local", options)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lakeward.core.write.plane.spark"):
            on_spark = _upsert(spark, paths["spark"], batch, "spark", options)
        assert _counts(on_spark) == _counts(local) == ((2, 1, 0) if read else (2, 0, 0))
        assert _scan_reads(caplog)[0] == read
    columns = ["uuid", "ts", "v"]
    spark_rows, local_rows = (sorted(Table.open(p).read(columns=columns).to_pylist(), key=str) for p in paths.values())
    assert spark_rows == local_rows and len(spark_rows) == 104


@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE"])
def test_key_deleted_in_a_log_then_inserted_elsewhere_is_found_where_it_lives(
    spark: Any, tmp_path: Path, index: str
) -> None:
    """The Spark plane's tagging prefers the group where a key is live over one that holds it only
    deleted (an `insert` re-added it elsewhere), as the local plane does: the next delete and upsert
    reach the live row (a lost delete, or two rows, otherwise)."""
    path = str(tmp_path / "t")
    options = {"hoodie.index.type": index}
    Table.create(path, record_key="uuid", ordering_field="ts", table_type="MERGE_ON_READ", options=options)
    table = lambda: Table.open(path, options=options)  # noqa: E731
    _upsert(spark, path, _rows(["a", "k"], 1, "one"), "spark", options)
    assert table().delete(spark.createDataFrame(_rows(["k"], 2, "x")), engine="spark").num_deletes == 1
    table().insert(spark.createDataFrame(_rows(["k"], 3, "three")), engine="spark")
    assert table().delete(spark.createDataFrame(_rows(["k"], 4, "x")), engine="spark").num_deletes == 1
    assert _duplicates(path) == ({}, {})
    assert Table.open(path).read(columns=["uuid"]).column("uuid").to_pylist() == ["a"]
    table().insert(spark.createDataFrame(_rows(["k"], 5, "five")), engine="spark")
    assert _counts(_upsert(spark, path, _rows(["k"], 6, "six"), "spark", options)) == (0, 1, 0)
    assert _duplicates(path) == ({}, {})
    rows = sorted((r["uuid"], r["v"]) for r in Table.open(path).read(columns=["uuid", "v"]).to_pylist())
    assert rows == [("a", "one"), ("k", "six")]
