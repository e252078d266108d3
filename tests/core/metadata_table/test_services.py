"""Table services keep the metadata table's `files` partition (v6 as Hudi 0.x's, v9 as Hudi 1.x's do).

Compaction, clustering and clean complete a metadata delta commit of their own instant time
first; a rollback rolls back the metadata delta commit of the instant it undoes; a restore
writes one metadata delta commit (from a listing) of its time; archival stops before the
metadata table's latest compaction (lakeward does not compact the metadata table, so it
archives nothing). After each step both readers give the expected rows and the `files`
partition matches storage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import load_metadata_timeline, metadata_storage
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import last_metadata_compaction, mdt_timeline
from lakeward.core.timeline import Action, Timeline
from tests.core.metadata_table.test_writes import (
    DROP_INDEXES,
    META_FIXTURES,
    SCHEMA,
    _data_rows,
    _unique_rows,
    check_metadata_table,
)
from tests.interop.compare import both_readers, comparable_rows, hudi_snapshot, hudi_table

#: No metadata compaction here (its own tests are test_metadata_compaction.py): every service's delta commit and
#: rollback stays visible on the metadata timeline.
OPTIONS = {
    "hoodie.cleaner.commits.retained": 1,
    "hoodie.keep.min.commits": 2,
    "hoodie.keep.max.commits": 3,
    "hoodie.metadata.compact.max.delta.commits": 1000,
}


def _batch(rows: dict[str, tuple[str, int, int]]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in sorted(rows.items())], schema=SCHEMA
    )


def _rows(model: dict[str, tuple[str, int, int]]) -> list[dict[str, Any]]:
    return [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in model.items()]


def _mdt(path: str) -> Timeline:
    return load_metadata_timeline(metadata_storage(Table.open(path).storage))


def _check_rolled_back(path: str, instant_time: str, rollback_time: str, expected: list[dict[str, Any]]) -> None:
    """A rollback: the metadata delta commit of the instant is gone, a metadata rollback of the same time exists."""
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == sorted(expected, key=repr)
    mdt = _mdt(path)
    assert not [i for i in mdt.instants if i.time == instant_time and i.action is Action.DELTA_COMMIT]
    assert rollback_time in {i.time for i in mdt.completed(Action.ROLLBACK)}
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_every_service_keeps_the_files_partition(tmp_path: Path, table_type: str, version: int):
    path = str(tmp_path / "t")
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    table = Table.open(path, options=OPTIONS)
    model = {f"k{i:02d}": (f"p{i % 2}", 1, i) for i in range(8)}
    table.insert(_batch(model))
    table.initialize_metadata_table()
    table = Table.open(path, options=OPTIONS)
    assert table.read_only_reason() is None  # the daemon serves it: every service keeps `files`
    for round_ in (2, 3):
        updates = {k: (model[k][0], round_, 100 * round_ + n) for n, k in enumerate(["k00", "k03"])}
        model |= updates
        check_metadata_table(path, table.upsert(_batch(updates)).instant_time, _rows(model))

    if table_type == "MERGE_ON_READ":
        compaction = table.schedule_compaction(force=True)
        assert compaction is not None
        table.run_compaction(compaction)
        check_metadata_table(path, compaction, _rows(model))

    for first in (20, 30):  # small file groups for the clustering
        added = {f"k{first + n}": (f"p{n % 2}", 1, first + n) for n in range(4)}
        model |= added
        check_metadata_table(path, table.bulk_insert(_batch(added)).instant_time, _rows(model))
    clustering = table.schedule_clustering()
    assert clustering is not None
    table.run_clustering(clustering)
    check_metadata_table(path, clustering, _rows(model))

    updates = {"k01": ("p1", 4, 401)}
    model |= updates
    check_metadata_table(path, table.upsert(_batch(updates)).instant_time, _rows(model))
    cleaned = table.clean()
    assert cleaned is not None and cleaned.files_deleted > 0
    check_metadata_table(path, cleaned.instant_time, _rows(model))

    # rollback of the latest write
    before = dict(model)
    model |= {"k05": ("p1", 5, 505)}
    written = table.upsert(_batch({"k05": ("p1", 5, 505)})).instant_time
    check_metadata_table(path, written, _rows(model))
    rolled = table.rollback(written)
    model = before
    _check_rolled_back(path, written, rolled.rollback_instant_time, _rows(model))

    # savepoint, two more writes, restore to it
    savepointed = table.timeline().completed_writes()[-1].time
    table.savepoint(savepointed)
    saved = dict(model)
    for n in (6, 7):
        model |= {f"k{n}0": ("p2", n, n)}
        check_metadata_table(path, table.upsert(_batch({f"k{n}0": ("p2", n, n)})).instant_time, _rows(model))
    restored = table.restore(savepointed)
    model = saved
    check_metadata_table(path, restored.restore_instant_time, _rows(model))

    # archival: never past the metadata table's latest compaction, which `archive()` runs first when
    # only the missing compaction holds archival back
    result = table.archive()
    last = last_metadata_compaction(mdt_timeline(Table.open(path).storage))
    assert last is not None
    assert all(name.split(".")[0] < last.time for name in result.archived), (result.archived, last)
    assert compare_files_partition(Table.open(path).storage).ok
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == sorted(_rows(model), key=repr)


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_services_on_a_hudi_meta_fixture(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    start = pa.Table.from_batches(hudi_snapshot(hudi_table(path)))
    data = start.drop_columns([c for c in start.column_names if c.startswith("_hoodie")])
    expected = _data_rows(comparable_rows(start))
    table = Table.open(path, options={**DROP_INDEXES, **OPTIONS})
    assert table.read_only_reason() is None  # its secondary indexes are dropped by the first action
    key_fields = list(table.config.record_key_fields)
    unique = _unique_rows(data.to_pylist(), key_fields)
    changed = [dict(r, amount=r["amount"] + 1, txn_ts=r["txn_ts"] + 1000) for r in unique[:2]]
    batch = pa.Table.from_pylist(changed, schema=data.schema)
    result = table.upsert(batch)
    assert table.read_only_reason() is None  # its index partitions were dropped: `files` alone is kept
    old = {tuple(r[f] for f in key_fields) for r in unique[:2]}
    kept = [r for r in expected if tuple(r[f] for f in key_fields) not in old]
    expected = _data_rows([*kept, *comparable_rows(batch)])
    check_metadata_table(path, result.instant_time, expected)

    if kind.startswith("mor"):
        compaction = table.schedule_compaction(force=True)
        assert compaction is not None
        table.run_compaction(compaction)
        check_metadata_table(path, compaction, expected)
    clustering = table.schedule_clustering()
    assert clustering is not None
    table.run_clustering(clustering)
    check_metadata_table(path, clustering, expected)
    cleaned = table.clean()
    assert cleaned is not None and cleaned.files_deleted > 0
    check_metadata_table(path, cleaned.instant_time, expected)
    # the fixture's metadata table was compacted by Hudi: archival goes up to that compaction, not past it
    archived = table.archive()
    compacted = _mdt(path).completed(Action.COMMIT)[-1].time
    assert archived.archived and all(entry.split(".")[0] < compacted for entry in archived.archived)
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == expected
    assert compare_files_partition(Table.open(path).storage).ok
