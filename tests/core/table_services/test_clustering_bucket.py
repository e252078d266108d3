"""Issue 18: clustering a BUCKET-index table must keep every key in its bucket's file group.

With the simple bucket index a key's file group is fixed by its bucket (the file id starts
with the bucket number). A clustering that merged buckets into one new file group (an id
without a bucket number) made the next upsert start new bucket groups: every key was read
twice. As Apache Hudi's single-file clustering strategies for bucket tables do, each
bucket's slice is rewritten on its own into the same file group (its new base file named
with the clustering instant), and only when the rewrite changes something (sort columns);
otherwise nothing is scheduled, with a log line.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.index.bucket import bucket_of_file_id
from lakeward.core.table import Table

BUCKET = {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "2"}
SORTED = {**BUCKET, "hoodie.clustering.plan.strategy.sort.columns": "v"}


def _rows(n: int, ts: int) -> pa.Table:
    return pa.Table.from_pylist([{"uuid": f"k{i:02d}", "ts": ts, "v": f"{(7 * i) % n:02d}@{ts}"} for i in range(n)])


def _keys(path: str) -> tuple[Counter[str], Counter[str]]:
    mine = Counter(Table.open(path).read(columns=["uuid"]).column("uuid").to_pylist())
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions())
    return mine, Counter(k for b in batches for k in b.column("uuid").to_pylist())


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_clustering_keeps_bucket_file_groups(tmp_path: Path, table_type: str) -> None:
    """The issue's reproduction (2 buckets, 20 keys, cluster, upsert again), with sort columns."""
    p = str(tmp_path / "t")
    Table.create(p, record_key="uuid", ordering_field="ts", table_type=table_type, options=SORTED)
    Table.open(p, options=SORTED).upsert(_rows(20, 1))
    if table_type == "MERGE_ON_READ":
        Table.open(p, options=SORTED).upsert(_rows(10, 2))  # logs on top of the bases
    before = {s.file_id for s in Table.open(p).file_slices()}
    assert len(before) == 2
    instant = Table.open(p, options=SORTED).schedule_clustering()
    assert instant is not None
    Table.open(p, options=SORTED).run_clustering(instant)
    clustered = {r["uuid"]: r["ts"] for r in Table.open(p).read(columns=["uuid", "ts"]).to_pylist()}
    updated = 10 if table_type == "MERGE_ON_READ" else 0
    assert clustered == {f"k{i:02d}": 2 if i < updated else 1 for i in range(20)}, "clustering kept the latest rows"
    assert _keys(p)[1] == Counter(list(clustered)), "hudi-rs reads every key once"
    after = Table.open(p).file_slices()
    assert {s.file_id for s in after} == before, "clustering must keep one file group per bucket"
    assert all(s.base_file is not None and s.base_file.instant_time == instant for s in after)
    for s in after:
        assert s.base_file is not None
        values = pq.read_table(Path(p, s.base_file.path), columns=["v"]).column("v").to_pylist()
        assert values == sorted(values), "the bucket's rows are sorted by the sort columns"
    result = Table.open(p, options=SORTED).upsert(_rows(20, 3))
    assert (result.num_inserts, result.num_updates) == (0, 20)
    mine, theirs = _keys(p)
    assert mine == theirs == Counter({f"k{i:02d}": 1 for i in range(20)})
    assert {bucket_of_file_id(s.file_id) for s in Table.open(p).file_slices()} == {0, 1}
    rows = Table.open(p).read(columns=["uuid", "ts"]).to_pylist()
    assert {r["ts"] for r in rows} == {3}


def test_clustering_without_sort_columns_is_not_scheduled(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Without sort columns rewriting a bucket alone changes nothing: no plan, a log line, no duplicates."""
    p = str(tmp_path / "t")
    Table.create(p, record_key="uuid", ordering_field="ts", options=BUCKET)
    Table.open(p, options=BUCKET).upsert(_rows(20, 1))
    with caplog.at_level(logging.INFO, logger="lakeward"):
        assert Table.open(p, options=BUCKET).schedule_clustering() is None
    assert "BUCKET" in caplog.text
    Table.open(p, options=BUCKET).upsert(_rows(20, 2))
    mine, theirs = _keys(p)
    assert mine == theirs == Counter({f"k{i:02d}": 1 for i in range(20)})
