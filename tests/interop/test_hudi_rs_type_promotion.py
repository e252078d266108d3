"""Avro type promotions as schema evolution (int -> long, int -> double; narrower batches cast; bytes -> string).

Hudi's writers let a batch widen a column's type when Avro promotes the old type to the new one,
and cast a batch of a narrower type to the table's. The table then holds files of both types:
lakeward and hudi-rs must read every file in the widened type, to the rows the writes put there,
through snapshots, time travel, incremental and CDC reads, compaction, column-stats skipping and a
secondary index built over files of both types.
Record key and partition fields keep their text: only int -> long is allowed for them.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import SchemaError
from tests.interop.compare import all_mismatches, fail_on, snapshot_mismatches

FIRST = pa.table(
    {
        "id": ["a", "b", "c"],
        "part": ["x", "x", "y"],
        "ts": pa.array([1, 1, 1], pa.int32()),
        "v": pa.array([1.5, 2.5, 3.5], pa.float64()),
        "n": pa.array([10, 20, 30], pa.int32()),
        "s": ["s1", "s2", "s3"],
    }
)
#: columns of a wider type than the table's: ts int -> long, n int -> double (s: bytes, cast to string)
WIDER = pa.table(
    {
        "id": ["b", "d"],
        "part": ["x", "y"],
        "ts": pa.array([2, 2], pa.int64()),
        "v": pa.array([2.25, 4.125], pa.float64()),
        "n": pa.array([21.5, 2.0**40], pa.float64()),
        "s": pa.array([b"s2b", b"s4"], pa.binary()),
    }
)
#: narrower types again: cast to the table's (v float into the double column)
NARROWER = pa.table(
    {
        "id": ["c"],
        "part": ["y"],
        "ts": pa.array([3], pa.int32()),
        "v": pa.array([3.75], pa.float32()),
        "n": pa.array([31], pa.int32()),
        "s": ["s3b"],
    }
)
EXPECTED = {
    "a": (1, 1.5, 10.0, "s1"),
    "b": (2, 2.25, 21.5, "s2b"),
    "c": (3, 3.75, 31.0, "s3b"),
    "d": (2, 4.125, 2.0**40, "s4"),
}
WIDENED = pa.schema([("ts", pa.int64()), ("v", pa.float64()), ("n", pa.float64()), ("s", pa.string())])


def _rows(table: pa.Table) -> dict[str, tuple]:
    return {r["id"]: (r["ts"], r["v"], r["n"], r["s"]) for r in table.to_pylist()}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 9])
def test_promoted_columns_read_in_the_wider_type_by_lakeward_and_hudi_rs(tmp_path: Path, version: int, table_type: str):
    path = str(tmp_path / "t")
    options = {"hoodie.table.cdc.enabled": "true"}
    if version == 9:
        options["hoodie.metadata.index.column.stats.enable"] = "true"
    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options=options,
    )
    first = table.upsert(FIRST).instant_time
    table.create_index("by_n", ["n"])  # a bitmap index of the int files, then of the double ones
    table.build_indexes()
    Table.open(path).upsert(WIDER)
    Table.open(path).upsert(NARROWER)

    snapshot = Table.open(path).read()
    assert [snapshot.schema.field(f.name).type for f in WIDENED] == list(WIDENED.types)
    assert _rows(snapshot) == EXPECTED
    fail_on(all_mismatches(path))  # hudi-rs: snapshot, time travel to each instant, incremental reads

    # time travel reads the files of the former types in the widened ones (the table's schema), as hudi-rs
    before = Table.open(path).read(as_of=first)
    assert [before.schema.field(f.name).type for f in WIDENED] == list(WIDENED.types)  # (v: double from the start)
    assert _rows(before) == {"a": (1, 1.5, 10.0, "s1"), "b": (1, 2.5, 20.0, "s2"), "c": (1, 3.5, 30.0, "s3")}
    Table.open(path).build_indexes()
    for filters, ids in [([("n", ">", 25)], ["c", "d"]), ([("n", "in", [10, 31, 21.5])], ["a", "b", "c"])]:
        assert sorted(Table.open(path).read(filters=filters).column("id").to_pylist()) == ids, filters

    changes = Table.open(path).read_changes("earliest", images="struct").to_pylist()
    images = sorted(((c["before"] or {}).get("n"), (c["after"] or {}).get("n")) for c in changes if c["op"] == "u")
    assert images == [(20.0, 21.5), (30.0, 31.0)]

    if table_type == "MERGE_ON_READ":
        table = Table.open(path)
        table.run_compaction(table.schedule_compaction(force=True))
        assert _rows(Table.open(path).read()) == EXPECTED
        fail_on(all_mismatches(path))
    assert Table.open(path).check().ok


@pytest.mark.parametrize(
    ("field", "key_type", "wider"),
    [("id", pa.int32(), pa.float64()), ("part", pa.int32(), pa.float64())],
)
def test_a_key_or_partition_field_keeps_its_text_refused_promotions_change_nothing(
    tmp_path: Path, field: str, key_type: pa.DataType, wider: pa.DataType
):
    path = str(tmp_path / "t")
    rows = {"id": pa.array([1, 2], key_type if field == "id" else pa.int32()), "part": pa.array([7, 8], pa.int32())}
    if field == "part":
        rows["part"] = pa.array([7, 8], key_type)
    table = Table.create(path, record_key="id", partition_by="part")
    table.upsert(pa.table(rows))
    files = sorted(p.relative_to(path) for p in Path(path).rglob("*") if p.is_file())
    widened = dict(rows, **{field: rows[field].cast(wider)})
    with pytest.raises(SchemaError, match=rf"column '{field}' is a record key or partition path field"):
        Table.open(path).upsert(pa.table(widened))
    assert sorted(p.relative_to(path) for p in Path(path).rglob("*") if p.is_file()) == files

    # int -> long keeps the text of keys and partition paths: allowed, and the key still matches
    path2 = str(tmp_path / "t2")
    Table.create(path2, record_key="id", partition_by="part").upsert(
        pa.table({"id": pa.array([1, 2], pa.int32()), "part": pa.array([7, 8], pa.int32()), "x": ["a", "b"]})
    )
    result = Table.open(path2).upsert(
        pa.table({"id": pa.array([2], pa.int64()), "part": pa.array([8], pa.int64()), "x": ["b2"]})
    )
    assert (result.num_updates, result.num_inserts) == (1, 0)
    assert sorted(Table.open(path2).read().select(["id", "x"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "x": "a"},
        {"id": 2, "x": "b2"},
    ]


@pytest.mark.parametrize("version", [6, 9])
def test_log_records_of_the_widened_type_merge_into_a_base_file_of_the_former_one(tmp_path: Path, version: int):
    """Merge-on-read: updates only, so every base file predates the promotion and only logs hold the wider type."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=version)
    table.upsert(pa.table({"id": ["a", "b"], "ts": pa.array([1, 1], pa.int32()), "n": pa.array([1, 2], pa.int32())}))
    Table.open(path).upsert(
        pa.table({"id": ["b"], "ts": pa.array([2], pa.int64()), "n": pa.array([2.5], pa.float64())})
    )
    got = Table.open(path).read()
    assert (got.schema.field("ts").type, got.schema.field("n").type) == (pa.int64(), pa.float64())
    assert sorted(got.select(["id", "ts", "n"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": "a", "ts": 1, "n": 1.0},
        {"id": "b", "ts": 2, "n": 2.5},
    ]
    fail_on(all_mismatches(path))
    table = Table.open(path)
    table.run_compaction(table.schedule_compaction(force=True))  # the new base file in the widened types
    assert Table.open(path).read().select(["id", "ts", "n"]).sort_by("id").to_pylist() == [
        {"id": "a", "ts": 1, "n": 1.0},
        {"id": "b", "ts": 2, "n": 2.5},
    ]
    fail_on(all_mismatches(path))


def test_a_slice_with_logs_from_before_a_widening_and_after_an_added_column_reads_right(tmp_path: Path):
    """hudi-rs 0.5.0 cannot read this merge-on-read slice before compaction (it takes the older block
    for a partial update and does not widen it: docs/library.md); lakeward reads it, and after a
    compaction both agree."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9)
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": pa.array([1, 1, 1], pa.int32())}))
    Table.open(path).upsert(pa.table({"id": ["a"], "ts": pa.array([2], pa.int32())}))
    Table.open(path).upsert(pa.table({"id": ["b"], "ts": pa.array([2**40], pa.int64()), "c": ["new"]}))
    expected = [{"id": "a", "ts": 2, "c": None}, {"id": "b", "ts": 2**40, "c": "new"}, {"id": "c", "ts": 1, "c": None}]
    assert Table.open(path).read(columns=["id", "ts", "c"]).sort_by("id").to_pylist() == expected
    table = Table.open(path)
    table.run_compaction(table.schedule_compaction(force=True))
    assert Table.open(path).read(columns=["id", "ts", "c"]).sort_by("id").to_pylist() == expected
    fail_on(snapshot_mismatches(path))
