"""Randomised correctness of secondary-index reads: with the index, exactly the rows of a full scan.

Copy-on-write and merge-on-read tables take random upserts and deletes, compactions,
clusterings, cleans and index builds (some base files stay unindexed between builds;
the text index is also built by compaction and clustering through `auto_build`). After
every step, many random predicates over both index types (and over columns without an
index) are read through the indexes and by a plain scan, and must give the same rows.

On every table version lakeward writes (6, 8, 9; index builds are `indexing` instants of
the version's timeline layout): after every step hudi-rs, which knows nothing of
lakeward's indexes, reads the same snapshot as lakeward, and at the end every readable
state (time travel, incremental).
"""

from __future__ import annotations

import math
import random
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.file_group.reader import MergeSettings, VisibleInstants
from lakeward.core.index.secondary import api as secondary_index
from lakeward.core.table import Table
from tests.interop.compare import comparable_rows, hudi_incremental, hudi_snapshot, hudi_table
from tests.support.hudi_rs_states import readable_states

CATEGORIES = ["red", "green", "blue", "Red", "amber", "", None]
WORDS = ["Buying", "buy", "now", "sale", "Apple", "apples", "red", "blue", "sky", "x1", "Ölfass", "price"]


def _row(rng: random.Random, key: int, ts: int) -> dict[str, Any]:
    f = rng.choice([rng.uniform(-5, 5), float(rng.randint(-3, 3)), -0.0, math.nan, None])
    text = None if rng.random() < 0.1 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
    if text is not None and rng.random() < 0.3:
        text = text + ", " + rng.choice(WORDS).upper() + "!"
    return {
        "id": key,
        "p": rng.choice(["a", "b"]),
        "ts": ts,
        "k": rng.randint(0, 30) if rng.random() > 0.05 else None,
        "cat": rng.choice(CATEGORIES),
        "f": f,
        "s": text,
    }


SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("p", pa.string()),
        ("ts", pa.int64()),
        ("k", pa.int64()),
        ("cat", pa.string()),
        ("f", pa.float64()),
        ("s", pa.string()),
    ]
)


def _predicate(rng: random.Random) -> tuple[str, str, Any]:
    column = rng.choice(["k", "k", "cat", "f", "s", "s", "ts"])
    if column in ("k", "ts"):
        op = rng.choice(["=", "=", "!=", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"])
        hi = 30 if column == "k" else 40
        if op in ("in", "not in"):
            return (column, op, [rng.randint(0, hi) for _ in range(rng.randint(1, 4))])
        return (column, op, None if op.startswith("is") else rng.randint(-1, hi + 1))
    if column == "cat":
        op = rng.choice(["=", "!=", "in", "not in", "like", "is null", "<", ">="])
        if op in ("in", "not in"):
            return (column, op, [c for c in rng.sample(CATEGORIES[:-1], 2)])
        if op == "like":
            return (column, op, rng.choice(["r%", "R%", "bl%", "%e%", "gr_en"]))
        return (column, op, None if op.startswith("is") else rng.choice(CATEGORIES[:-1]))
    if column == "f":
        op = rng.choice(["=", "!=", "<", ">", ">=", "is null", "in"])
        if op == "in":
            return (column, op, [float(rng.randint(-3, 3)), 0.0])
        value = rng.choice([float(rng.randint(-3, 3)), rng.uniform(-5, 5), -0.0, 0.0])
        return (column, op, None if op.startswith("is") else value)
    op = rng.choice(["match", "match", "phrase", "like", "like", "="])
    if op == "like":
        word = rng.choice(WORDS)
        return (column, op, rng.choice([word[:3] + "%", word + "%", word + " %", "%" + word[1:3] + "%"]))
    if op == "=":
        return (column, op, rng.choice(WORDS))
    return (column, op, " ".join(rng.choice(WORDS).lower() for _ in range(rng.randint(1, 2))))


def _filters(rng: random.Random) -> list[Any]:
    if rng.random() < 0.6:
        return [_predicate(rng) for _ in range(rng.randint(1, 2))]
    return [[_predicate(rng) for _ in range(rng.randint(1, 2))] for _ in range(2)]


def _canonical(table: pa.Table) -> list[str]:
    keep = [c for c in table.column_names if c not in ("_hoodie_commit_seqno",)]
    return sorted(repr(r) for r in table.select(keep).to_pylist())


def _full_scan(table: Table, filters: Any, columns: list[str] | None) -> pa.Table:
    timeline = table.timeline()
    return secondary_index.read_slices(
        table.storage,
        timeline,
        table.file_slices(),
        table.schema(),
        columns,
        filters,
        instants=VisibleInstants.from_timeline(timeline),
        merge=MergeSettings.from_config(table.config),
        use_index=False,
    )


@pytest.mark.slow  # ~30 s each on a loaded 2-core machine (randomised writes and reads)
@pytest.mark.parametrize("version", [6, 8, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_index_read_randomised_equals_full_scan(tmp_path: Any, table_type: str, version: int) -> None:
    _run(tmp_path, table_type, version, reads_per_step=12)


@pytest.mark.parametrize(("version", "table_type"), [(8, "MERGE_ON_READ"), (9, "COPY_ON_WRITE")])
def test_index_read_randomised_on_hudi_1x_tables(tmp_path: Any, table_type: str, version: int) -> None:
    """One run per Hudi 1.x version in the default run, with fewer reads (the slow run has them all)."""
    _run(tmp_path, table_type, version, reads_per_step=4)


def _run(tmp_path: Any, table_type: str, version: int, reads_per_step: int) -> None:
    rng = random.Random(20261121 + len(table_type))
    table = Table.create(
        str(tmp_path / "t"),
        table_version=version,
        record_key="id",
        partition_by="p",
        ordering_field="ts",
        table_type=table_type,
        options={"hoodie.cleaner.commits.retained": "2", "hoodie.parquet.small.file.limit": "0"},
    )
    ts = 0
    keys: set[int] = set()
    next_key = 0

    def batch(n_new: int, n_old: int) -> pa.Table:
        nonlocal ts, next_key
        ts += 1
        rows = []
        for _ in range(n_new):
            rows.append(_row(rng, next_key, ts))
            keys.add(next_key)
            next_key += 1
        for key in rng.sample(sorted(keys), min(n_old, len(keys))):
            rows.append(_row(rng, key, ts))
        return pa.Table.from_pylist(rows, SCHEMA)

    first = batch(300, 0)
    table.bulk_insert(first)
    table.create_index("k_cat", ["k", "cat"], "bitmap", {"max_selectivity": 1.0})
    table.create_index("by_f", "f", "bitmap")
    table.create_index("words", "s", "text", {"auto_build": True, "max_selectivity": 0.9})
    reads = via_index = 0
    steps = ["build", "upsert", "upsert", "build", "delete", "compact", "cluster", "upsert", "clean", "build", "upsert"]
    for step in steps:
        if step == "build":
            table.build_indexes()
        elif step == "upsert":
            table.upsert(batch(rng.randint(20, 80), rng.randint(10, 60)))
        elif step == "delete":
            doomed = rng.sample(sorted(keys), 25)
            keys.difference_update(doomed)
            table.delete(keys=doomed)
        elif step == "compact" and table_type == "MERGE_ON_READ":
            instant = table.schedule_compaction(force=True)
            if instant:
                table.run_compaction(instant)
        elif step == "cluster":
            instant = table.schedule_clustering()
            if instant:
                table.run_clustering(instant)
        elif step == "clean":
            table.clean()
        _check_hudi_rs(table.path, f"after {step}")
        for _ in range(reads_per_step):
            filters = _filters(rng)
            columns = None if rng.random() < 0.7 else ["id", "k", "s"]
            expected = _full_scan(table, filters, columns)
            got = table.read(filters=filters, columns=columns)
            assert got.column_names == expected.column_names, filters
            assert _canonical(got) == _canonical(expected), f"after {step}: {filters}"
            reads += 1
            via_index += table.explain(filters).uses_index
    assert table.index_status().missing() == [] or steps[-1] != "build"
    # The index was really exercised: a good share of the reads went through it for at least one file slice.
    assert via_index > reads // 5, (via_index, reads)
    instants, ranges = readable_states(table.path)
    for instant in instants:
        _check_hudi_rs(table.path, f"as of {instant}", as_of=instant)
    for begin, end in ranges:
        _check_hudi_rs(table.path, f"incremental ({begin}, {end}]", incremental=(begin, end))


def _check_hudi_rs(
    path: str, label: str, as_of: str | None = None, incremental: tuple[str, str | None] | None = None
) -> None:
    """hudi-rs reads the rows lakeward reads (compared by their text: `f` holds NaN, never equal to itself)."""
    table, theirs = Table.open(path), hudi_table(path)
    if incremental is None:
        mine, other = table.read(as_of=as_of), hudi_snapshot(theirs, as_of)
    else:
        mine, other = table.read_incremental(*incremental), hudi_incremental(theirs, *incremental)
    assert [repr(r) for r in comparable_rows(mine)] == [repr(r) for r in comparable_rows(other)], label
