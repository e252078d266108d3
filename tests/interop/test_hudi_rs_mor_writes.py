"""Interop: merge-on-read tables WRITTEN by lakeward read the same with hudi-rs (PyPI `hudi`).

Every write operation on MOR tables, with Avro and Parquet data blocks, the BLOOM, SIMPLE
and BUCKET indexes, many upsert rounds (many log file versions), deletes (by rows, by
keys, `_hoodie_is_deleted`), log file rollover (`hoodie.logfile.max.size`) and both
payload classes. After the writes, for the latest snapshot and a time-travel read as of
every completed instant:

- lakeward's rows == hudi-rs's rows == the rows the input batches imply (`Model`, built
  from the batches alone, never from a reader), for snapshot reads;
- lakeward's rows == hudi-rs's rows for read-optimized reads (base files only,
  `hoodie.read.use.read_optimized.mode`).

Finally lakeward upserts into and deletes from copies of the MOR fixture tables written by
Apache Hudi (../shared/fixtures/hudi-tables/mor/), and both readers agree with each other
and with the fixture's rows changed as the batch says.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.config.table import DEFAULT_PAYLOAD
from lakeward.core.file_group.naming import parse_log_file_name
from lakeward.core.schema import META_COLUMNS
from lakeward.core.table import Table
from tests.interop.compare import comparable_rows, same_rows
from tests.support.fixture_tables import fixture_tables_dir

READ_OPTIMIZED = "hoodie.read.use.read_optimized.mode"
CITIES = ("sf", "nyc", "chennai")
COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key", "id", "city", "ts", "fare", "v")


# -- the expected table, from the input batches ----------------------------------------------
@dataclass
class Model:
    """(partition path, key) -> expected row tuple (commit time, partition, key, id, city, ts, fare, v)."""

    hive: bool = True
    partitioned: bool = True
    event_time: bool = False
    rows: dict[tuple[str, str], tuple] = field(default_factory=dict)

    def partition(self, city: str) -> str:
        if not self.partitioned:
            return ""
        return f"city={city}" if self.hive else city

    def _row(self, instant: str, r: dict[str, Any]) -> tuple:
        return (instant, self.partition(r["city"]), r["id"], r["id"], r["city"], r["ts"], r["fare"], r["v"])

    @staticmethod
    def _combined(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Hudi's pre-combine of a batch: per key the largest ts wins, ties to the last."""
        best: dict[tuple[str, str], dict[str, Any]] = {}
        for r in records:
            key = (r["city"], r["id"])
            if key not in best or r["ts"] >= best[key]["ts"]:
                best[key] = r
        return list(best.values())

    def upsert(self, instant: str, records: Sequence[dict[str, Any]]) -> None:
        for r in self._combined(records):
            key = (self.partition(r["city"]), r["id"])
            stored = self.rows.get(key)
            if self.event_time and stored is not None and stored[5] > r["ts"]:
                continue  # DefaultHoodieRecordPayload: the stored record is newer
            if r.get("_hoodie_is_deleted"):
                self.rows.pop(key, None)
            else:
                self.rows[key] = self._row(instant, r)

    def insert(self, instant: str, records: Sequence[dict[str, Any]]) -> None:
        for r in records:
            key = (self.partition(r["city"]), r["id"])
            assert key not in self.rows, "the scenarios insert new keys only"
            self.rows[key] = self._row(instant, r)

    def delete(self, keys: Sequence[tuple[str, str]]) -> None:
        for city, key in keys:
            self.rows.pop((self.partition(city), key), None)

    def overwrite(self, instant: str, records: Sequence[dict[str, Any]], whole_table: bool) -> None:
        partitions = {self.partition(r["city"]) for r in records}
        self.rows = {k: v for k, v in self.rows.items() if not whole_table and k[0] not in partitions}
        self.insert(instant, records)

    def drop_partition(self, partition: str) -> None:
        self.rows = {k: v for k, v in self.rows.items() if k[0] != partition}

    def snapshot(self) -> list[tuple]:
        return sorted(self.rows.values())


# -- the readers -------------------------------------------------------------------------------
def hudi_read(path: str, as_of: str | None = None, read_optimized: bool = False) -> list[pa.RecordBatch]:
    options = hudi.HudiReadOptions()
    if as_of is not None:
        options = options.with_as_of_timestamp(as_of)
    if read_optimized:
        options = options.with_hudi_option(READ_OPTIMIZED, "true")
    return hudi.HudiTableBuilder.from_base_uri(path).build().read(options)


def as_tuples(data: pa.Table | Sequence[pa.RecordBatch]) -> list[tuple]:
    table = data if isinstance(data, pa.Table) else (pa.Table.from_batches(data) if data else None)
    if table is None:
        return []
    return sorted(tuple(r[c] for c in COLUMNS) for r in table.select(list(COLUMNS)).to_pylist())


def reader_mismatches(path: str, instants: Sequence[str]) -> list[str]:
    """Snapshot and read-optimized reads (latest and as of each instant) where the readers disagree."""
    table = Table.open(path)
    out = []
    for as_of in [None, *instants]:
        for read_optimized in (False, True):
            label = f"{'read-optimized' if read_optimized else 'snapshot'} as of {as_of or 'latest'}"
            mine = comparable_rows(table.read(as_of=as_of, read_optimized=read_optimized))
            theirs = comparable_rows(hudi_read(path, as_of, read_optimized))
            if not same_rows(mine, theirs):
                only_mine = [r for r in mine if r not in theirs]
                only_theirs = [r for r in theirs if r not in mine]
                out.append(
                    f"{label}: {len(mine)} vs {len(theirs)} rows; lakeward only {only_mine[:3]}; "
                    f"hudi-rs only {only_theirs[:3]}"
                )
    return out


# -- scenarios -----------------------------------------------------------------------------------
Step = Callable[[Table, Model], str]


def records(ids: Sequence[int], ts: int, tag: str, rng: random.Random, deleted: Sequence[int] = ()) -> list[dict]:
    return [
        {
            "id": f"k{i:04d}",
            "city": CITIES[i % len(CITIES)],
            "ts": ts,
            "fare": round(rng.uniform(5, 50), 2),
            "v": f"{tag}-{i}",
            "_hoodie_is_deleted": i in deleted,
        }
        for i in ids
    ]


def to_batch(rows: Sequence[dict[str, Any]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.string()),
            "city": pa.array([r["city"] for r in rows], pa.string()),
            "ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "fare": pa.array([r["fare"] for r in rows], pa.float64()),
            "v": pa.array([r["v"] for r in rows], pa.string()),
            "_hoodie_is_deleted": pa.array([r["_hoodie_is_deleted"] for r in rows], pa.bool_()),
        }
    )


def upsert(rows: list[dict]) -> Step:
    def step(table: Table, model: Model) -> str:
        t = table.upsert(to_batch(rows)).instant_time
        model.upsert(t, rows)
        return t

    return step


def insert(rows: list[dict], bulk: bool = False) -> Step:
    def step(table: Table, model: Model) -> str:
        t = (table.bulk_insert if bulk else table.insert)(to_batch(rows)).instant_time
        model.insert(t, rows)
        return t

    return step


def delete_rows(rows: list[dict]) -> Step:
    def step(table: Table, model: Model) -> str:
        t = table.delete(to_batch(rows)).instant_time
        model.delete([(r["city"], r["id"]) for r in rows])
        return t

    return step


def delete_keys(ids: Sequence[int]) -> Step:
    def step(table: Table, model: Model) -> str:
        t = table.delete(keys=[f"k{i:04d}" for i in ids]).instant_time
        model.delete([(CITIES[i % len(CITIES)], f"k{i:04d}") for i in ids])
        return t

    return step


def overwrite(rows: list[dict], whole_table: bool) -> Step:
    def step(table: Table, model: Model) -> str:
        write = table.insert_overwrite_table if whole_table else table.insert_overwrite
        t = write(to_batch(rows)).instant_time
        model.overwrite(t, rows, whole_table)
        return t

    return step


def drop_partition(city: str) -> Step:
    def step(table: Table, model: Model) -> str:
        t = table.delete_partition([model.partition(city)]).instant_time
        model.drop_partition(model.partition(city))
        return t

    return step


def upsert_rounds(rng: random.Random, rounds: int = 6, start: int = 120) -> list[Step]:
    """A bulk load, then rounds of updates, inserts and `_hoodie_is_deleted` deletes, then deletes."""
    steps: list[Step] = [insert(records(range(start), 1, "load", rng), bulk=True)]
    live = set(range(start))
    next_id = start
    for n in range(2, 2 + rounds):
        updates = rng.sample(sorted(live), 20)
        gone = set(rng.sample(updates, 3))
        new = list(range(next_id, next_id + 5))
        next_id += 5
        steps.append(upsert(records([*updates, *new], n, f"round{n}", rng, deleted=gone)))
        live = (live - gone) | set(new)
    by_key = rng.sample(sorted(live), 5)
    live -= set(by_key)
    steps.append(delete_keys(by_key))
    steps.append(delete_rows(records(rng.sample(sorted(live), 5), 99, "ignored", rng)))
    # Keys deleted earlier come back (their file group still holds them in its base file).
    steps.append(upsert(records([*by_key[:2], *rng.sample(sorted(live), 5)], 100, "again", rng)))
    return steps


def run(path: str, model: Model, steps: Sequence[Step], **create: Any) -> tuple[Table, list[str]]:
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", **create)
    instants, states = [], {}
    for step in steps:
        instants.append(step(table, model))
        states[instants[-1]] = model.snapshot()
    # Expected rows (from the batches) == lakeward == hudi-rs, latest and as of every instant.
    for as_of in [None, *instants]:
        want = model.snapshot() if as_of is None else states[as_of]
        assert as_tuples(table.read(as_of=as_of)) == want, f"lakeward as of {as_of}"
        assert as_tuples(hudi_read(path, as_of)) == want, f"hudi-rs as of {as_of}"
    assert reader_mismatches(path, instants) == []
    return table, instants


def log_file_versions(table: Table) -> list[int]:
    return [
        parsed.version
        for s in table.file_slices()
        for f in s.log_files
        if (parsed := parse_log_file_name(f.name)) is not None
    ]


@pytest.mark.slow  # 5-15 s each: rounds of upserts, each read by hudi-rs
@pytest.mark.parametrize("block_format", ["avro", "parquet"])
@pytest.mark.parametrize("index", ["BLOOM", "SIMPLE", "BUCKET"])
def test_upsert_rounds_read_the_same(tmp_path, index: str, block_format: str) -> None:
    rng = random.Random(f"{index}-{block_format}")
    options = {
        "hoodie.index.type": index,
        "hoodie.bucket.index.num.buckets": 3,
        "hoodie.logfile.data.block.format": block_format,
        "hoodie.parquet.small.file.limit": 0,
    }
    path = str(tmp_path / "t")
    table, _ = run(
        path, Model(), upsert_rounds(rng), partition_by="city", hive_style_partitioning=True, options=options
    )
    assert max(log_file_versions(table)) >= 6, "the rounds should stack up log file versions"
    # Read-optimized reads miss the logged changes: the merge really happens.
    assert as_tuples(table.read(read_optimized=True)) != as_tuples(table.read())


@pytest.mark.parametrize("block_format", ["avro", "parquet"])
def test_every_operation_reads_the_same(tmp_path, block_format: str) -> None:
    rng = random.Random(block_format)
    steps = [
        insert(records(range(60), 1, "insert", rng)),
        upsert(records([*range(0, 60, 4), *range(60, 66)], 2, "upsert", rng)),
        insert(records(range(66, 90), 3, "bulk", rng), bulk=True),
        delete_rows(records(range(1, 30, 5), 4, "ignored", rng)),
        delete_keys(range(2, 40, 7)),
        upsert(records([*range(3, 60, 6), 90], 5, "flags", rng, deleted=range(3, 60, 12))),
        overwrite(records(range(100, 130, 3), 6, "overwrite", rng), whole_table=False),
        upsert(records(range(0, 90, 5), 7, "after-overwrite", rng)),
        overwrite(records(range(200, 212), 8, "overwrite-table", rng), whole_table=True),
        upsert(records([200, 201, 203, 212], 9, "final", rng)),
        drop_partition("nyc"),
    ]
    # Default sizing: inserts fill small files without logs, updates go to logs.
    options = {"hoodie.logfile.data.block.format": block_format}
    run(str(tmp_path / "t"), Model(hive=False), steps, partition_by="city", options=options)


def test_log_file_rollover_reads_the_same(tmp_path) -> None:
    rng = random.Random("rollover")
    options = {"hoodie.logfile.max.size": 200, "hoodie.parquet.small.file.limit": 0}
    table, _ = run(
        str(tmp_path / "t"),
        Model(),
        upsert_rounds(rng, rounds=3, start=60),
        partition_by="city",
        hive_style_partitioning=True,
        options=options,
    )
    slices = [s for s in table.file_slices() if s.log_files]
    # Rolled over: more log files than writes that appended to a slice.
    assert any(len(s.log_files) > 5 for s in slices)


def test_event_time_ordering_reads_the_same(tmp_path) -> None:
    """DefaultHoodieRecordPayload: late updates and late deletes lose to newer stored records."""
    rng = random.Random("event-time")
    steps = [
        insert(records(range(45), 10, "load", rng), bulk=True),
        upsert(records(range(0, 45, 3), 20, "newer", rng)),
        upsert(records(range(0, 45, 2), 15, "late", rng)),  # older than round 2 for multiples of 6
        upsert(records(range(1, 45, 4), 5, "late-delete", rng, deleted=range(1, 45, 4))),
        upsert(records(range(2, 45, 4), 30, "delete", rng, deleted=range(2, 45, 8))),
        delete_keys([0, 7]),
    ]
    options = {"hoodie.datasource.write.payload.class": DEFAULT_PAYLOAD, "hoodie.parquet.small.file.limit": 0}
    run(str(tmp_path / "t"), Model(hive=False, event_time=True), steps, partition_by="city", options=options)


def test_non_partitioned_table_reads_the_same(tmp_path) -> None:
    rng = random.Random("non-partitioned")
    options = {"hoodie.index.type": "SIMPLE", "hoodie.parquet.small.file.limit": 0}
    run(str(tmp_path / "t"), Model(partitioned=False), upsert_rounds(rng, rounds=3, start=40), options=options)


# -- upserts into copies of Hudi-written fixture tables ------------------------------------------
MOR_FIXTURES = [
    (kind, p.stem) for kind in ("mor/avro", "mor/parquet") for p in sorted((fixture_tables_dir() / kind).glob("*.zip"))
]


def test_mor_fixtures_are_present() -> None:
    assert {"v6_trips_8i1u", "v6_nonpartitioned", "v6_nonpartitioned_rollback"} <= {n for _, n in MOR_FIXTURES}


def _changed_column(table: Table) -> str:
    return "rider" if "rider" in (table.schema() or pa.schema([])).names else "name"


@pytest.mark.parametrize(("kind", "name"), MOR_FIXTURES)
def test_upserts_and_deletes_into_a_fixture_copy(fixture_table, kind: str, name: str) -> None:
    path = fixture_table(kind, name)
    block_format = "parquet" if kind == "mor/parquet" else "avro"
    table = Table.open(
        path, options={"hoodie.parquet.small.file.limit": 0, "hoodie.logfile.data.block.format": block_format}
    )
    key_field = table.config.record_key_fields[0]
    column = _changed_column(table)
    before = {r["_hoodie_record_key"]: r for r in comparable_rows(hudi_read(path))}
    assert len(before) >= 3

    # The batch: two stored records with a changed column, one new record (a copy of a
    # stored one under a new key), then a delete of a third stored record.
    data = table.read().drop_columns(list(META_COLUMNS))
    stored_keys = [str(k) for k in data.column(key_field).to_pylist()]
    updated, deleted = stored_keys[:2], stored_keys[2]
    changed = data.slice(0, 2)
    changed = changed.set_column(changed.schema.get_field_index(column), column, pa.array(["lw-1", "lw-2"]))
    new_key_value = 1000 if pa.types.is_integer(data.schema.field(key_field).type) else "lw-new-key"
    new_row = data.slice(3 if data.num_rows > 3 else 0, 1)
    new_row = new_row.set_column(
        new_row.schema.get_field_index(key_field),
        key_field,
        pa.array([new_key_value], data.schema.field(key_field).type),
    )
    first = table.upsert(pa.concat_tables([changed, new_row])).instant_time
    second = table.delete(data.slice(2, 1)).instant_time
    logged = [f for s in table.file_slices() for f in s.log_files]
    assert any(parse_log_file_name(f.name) and f.write_token.startswith(("0-0-", "1-0-")) for f in logged)

    # Expected: the fixture's rows (as hudi-rs read them before) changed as the batches say.
    expected = {k: dict(r) for k, r in before.items() if k != deleted}
    for key, value in zip(updated, ["lw-1", "lw-2"], strict=True):
        expected[key] |= {column: value, "_hoodie_commit_time": first}
    source = before[stored_keys[3 if data.num_rows > 3 else 0]]
    expected[str(new_key_value)] = source | {
        key_field: new_key_value,
        "_hoodie_record_key": str(new_key_value),
        "_hoodie_commit_time": first,
    }
    ours = comparable_rows(table.read())
    theirs = comparable_rows(hudi_read(path))
    assert same_rows(ours, theirs), f"lakeward {ours}\nhudi-rs {theirs}"
    assert {r["_hoodie_record_key"]: r for r in theirs} == expected
    assert same_rows(comparable_rows(table.read(as_of=second)), theirs)

    instants = [i.time for i in table.timeline().completed_writes()]
    assert instants[-2:] == [first, second]
    assert reader_mismatches(path, instants) == []


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("shape", ["struct", "list of struct", "map of struct"])
def test_a_field_added_inside_a_nested_column_reads_before_compaction(tmp_path, version, shape):
    """An update adds a field inside a struct (or a list's or map's struct): its records sit in a log
    over a base file of the narrower type. Every read raised SchemaError until a compaction ran."""
    import hudi

    narrow = pa.struct([("a", pa.int64())])
    wide = pa.struct([("a", pa.int64()), ("b", pa.string())])

    def column(values, struct):
        if shape == "struct":
            return pa.array(values, struct)
        if shape == "list of struct":
            return pa.array([[v] for v in values], pa.list_(struct))
        return pa.array([[("k", v)] for v in values], pa.map_(pa.string(), struct))

    def plain(value):
        if shape == "struct":
            return value
        return value[0] if shape == "list of struct" else dict(value)["k"]

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=version)
    table.upsert(pa.table({"id": ["k1", "k2"], "ts": [1, 1], "s": column([{"a": 1}, {"a": 2}], narrow)}))
    table.upsert(pa.table({"id": ["k1"], "ts": [2], "s": column([{"a": 10, "b": "B"}], wide)}))
    expected = {"k1": {"a": 10, "b": "B"}, "k2": {"a": 2, "b": None}}
    for kwargs in ({}, {"columns": ["id", "s"]}):
        rows = Table.open(path).read(**kwargs).to_pylist()
        assert {r["id"]: plain(r["s"]) for r in rows} == expected, kwargs
    theirs = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(path).build().read(hudi.HudiReadOptions()))
    assert {r["id"]: plain(r["s"]) for r in theirs.to_pylist()} == expected
    base_only = Table.open(path).read(read_optimized=True)
    assert base_only.schema.field("s").type == Table.open(path).schema().field("s").type
