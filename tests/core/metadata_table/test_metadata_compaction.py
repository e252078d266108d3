"""The metadata table's own compaction and clean (v8/v9), as Hudi 1.x's metadata writer runs them.

After every commit: hudi-rs (which lists files through the metadata table on v8/v9) and lakeward
read the expected rows, and the `files` partition matches a storage listing; the metadata table
is compacted once `hoodie.metadata.compact.max.delta.commits` delta commits completed and its
old file slices are cleaned. A data-table instant pending on the data table whose metadata delta
commit completed holds the compaction back (reported); a writer killed during the metadata
compaction is repaired by the next one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.config.write import WriteConfig
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.metadata_listing import FILES_PARTITION, MetadataFileListing, metadata_storage
from lakeward.core.health import table_health, take_snapshot
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import (
    check_metadata_compaction,
    last_metadata_compaction,
    mdt_timeline,
    pending_metadata_compactions,
)
from lakeward.core.metadata_table.lag import metadata_table_lag
from lakeward.core.metadata_table.services import run_metadata_table_services
from lakeward.core.timeline import Action
from lakeward.services.metrics import DaemonMetrics
from tests.core.metadata_table.test_writes import DROP_INDEXES, _data_rows, _unique_rows, fixture_rows
from tests.interop.compare import both_readers, comparable_rows
from tests.support import crash

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
#: Compact the metadata table every 3 delta commits; its clean keeps 2 commits.
EAGER = {"hoodie.metadata.compact.max.delta.commits": 3, "hoodie.metadata.cleaner.commits.retained": 2}


def _rows(ids: range, ts: int) -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": ts * 1000 + i} for i in ids]


def _batch(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _table_with_mdt(path: str, version: int, table_type: str, options: dict[str, Any]) -> Table:
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    # the first data is written before the metadata table exists: the delta-commit counts start at its bootstrap
    Table.open(path, options={**options, "hoodie.metadata.enable": "false"}).insert(_batch(_rows(range(12), 1)))
    table = Table.open(path, options=options)
    table.initialize_metadata_table()
    return Table.open(path, options=options)


def snapshot_blocked_by(path: str) -> str | None:
    """What the health snapshot (the daemon's metrics and API) reports as blocking the metadata compaction."""
    return take_snapshot(Table.open(path)).metadata_compaction_blocked_by


def _check(path: str, model: dict[str, dict[str, Any]]) -> None:
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == sorted(model.values(), key=repr)
    storage = Table.open(path).storage
    diff = compare_files_partition(storage)
    assert diff.ok, str(diff)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8, 9])
def test_many_commits_compact_and_clean_the_metadata_table(tmp_path: Path, version: int, table_type: str):
    path = str(tmp_path / "t")
    table = _table_with_mdt(path, version, table_type, EAGER)
    model = {r["id"]: r for r in _rows(range(12), 1)}
    for n in range(2, 12):
        batch = _rows(range(n % 4, 30, 4), n)
        table.upsert(_batch(batch))
        model |= {r["id"]: r for r in batch}
        _check(path, model)
    mdt = mdt_timeline(table.storage)
    compactions = mdt.completed(Action.COMMIT)
    assert len(compactions) >= 3, [str(i) for i in mdt.instants]
    assert mdt.completed(Action.CLEAN), "the old file slices of the metadata table were cleaned"
    assert not mdt.pending()
    # the latest slice is the last compaction's base file and the logs of delta commits completed after it
    files = metadata_storage(table.storage).list_dir(FILES_PARTITION)
    bases = sorted(e.name for e in files if e.name.endswith(".hfile"))
    assert bases[-1].endswith(f"_{compactions[-1].time}.hfile")
    assert len([e for e in files if ".log." in e.name]) < 3 + 3  # cleaned: not one log per commit
    # lakeward's listing through the metadata table gives the same files as storage (compare above), and
    # every commit's compaction decision is recorded: nothing blocks, the next one is not due yet
    check = check_metadata_compaction(table.storage, table.timeline(), 3)
    # the lag metric: every commit reflected, fewer not compacted than the threshold, nothing blocking
    lag = metadata_table_lag(table.storage, table.timeline())
    assert not lag.behind and lag.blocking is None and 0 <= len(lag.not_compacted) < 3
    metrics = DaemonMetrics()
    metrics.observe_health({"t": table_health(table)})
    gauge = metrics.metadata_uncompacted.labels(table="t")._value.get()
    assert gauge == len(lag.not_compacted)
    assert not check.blocked and not check.due and check.reason
    assert {e.path for e in MetadataFileListing(table.storage).file_entries()}


def _tree(path: str) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in Path(path).rglob("*") if p.is_file()}


@pytest.mark.parametrize("version", [6, 9])
def test_rollback_of_a_write_the_metadata_compaction_took_is_refused(tmp_path: Path, version: int):
    """As Hudi 1.x (`HoodieBackedTableMetadataWriter.validateRollback`): a write whose metadata delta
    commit a metadata compaction already took cannot be rolled back (its files and record-index
    entries are in the compacted base files); the error names the instant and the compaction, says
    to restore instead, and nothing changes. Restoring a savepoint before it undoes it."""
    path = str(tmp_path / "t")
    table = _table_with_mdt(path, version, "MERGE_ON_READ", {**EAGER, "hoodie.index.type": "RECORD_INDEX"})
    model = {r["id"]: r for r in _rows(range(12), 1)}
    saved = table.upsert(_batch(_rows(range(1, 12, 2), 2))).instant_time
    model |= {r["id"]: r for r in _rows(range(1, 12, 2), 2)}
    before = dict(model)
    table.savepoint(saved)
    for n in range(3, 8):  # until the inline metadata compaction takes the latest write's delta commit
        written = table.upsert(_batch(_rows(range(n % 2, 14, 2), n))).instant_time
        model |= {r["id"]: r for r in _rows(range(n % 2, 14, 2), n)}
        last = last_metadata_compaction(mdt_timeline(table.storage))
        assert last is not None
        if last.time > written:
            break
    assert last.time > written
    files = _tree(path)
    with pytest.raises(MetadataTableError) as refused:
        table.rollback(written)
    message = str(refused.value)
    assert written in message and last.time in message and "restore" in message
    with pytest.raises(MetadataTableError):
        table.preview_rollback(written)
    assert _tree(path) == files  # nothing written or deleted
    _check(path, model)
    table.restore(saved)
    _check(path, before)


def test_a_pending_data_instant_holds_the_metadata_compaction_back(tmp_path: Path):
    path = str(tmp_path / "t")
    table = _table_with_mdt(path, 9, "COPY_ON_WRITE", {"hoodie.metadata.compact.max.delta.commits": 1000})
    model = {r["id"]: r for r in _rows(range(12), 1)}
    for n in range(2, 6):
        batch = _rows(range(n, 12, 3), n)
        table.upsert(_batch(batch))
        model |= {r["id"]: r for r in batch}
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch(_rows(range(0, 20, 2), 9)), batch_file)
    # killed after its metadata delta commit completed, before the data instant did
    crash.run_and_kill("crash_writer.py", path, "before_complete", str(batch_file))
    [killed] = Table.open(path).timeline().pending()
    storage = Table.open(path).storage
    deltas = len(mdt_timeline(storage).completed(Action.DELTA_COMMIT))

    check = check_metadata_compaction(storage, Table.open(path).timeline(), deltas)
    assert check.blocked and not check.due
    assert check.blocked_by is not None and check.blocked_by.time == killed.time
    assert check.instant_time is not None and check.instant_time < killed.time
    assert killed.time in check.reason and "pending" in check.reason
    lag = metadata_table_lag(storage, Table.open(path).timeline())
    assert lag.blocking is not None and lag.blocking.time == killed.time
    assert len(lag.not_compacted) == 4 and snapshot_blocked_by(path) == killed.time  # the 4 upserts
    options = {"hoodie.metadata.compact.max.delta.commits": deltas}
    service = Table.open(path, options=options).services.metadata_compaction
    assert service.schedule() is None  # held back: no plan
    ctx = Table.open(path).service_context("compaction")
    ran = run_metadata_table_services(storage, ctx.lock, WriteConfig.model_validate(options))
    assert ran is not None and not ran.compactions and ran.check is not None and ran.check.blocked
    assert not mdt_timeline(storage).completed(Action.COMMIT)
    # forced (on-call): a compaction bounded before the pending instant, which stays out of it
    forced = service.schedule(force=True)
    assert forced is not None and forced < killed.time
    service.execute(forced)
    mine, theirs = both_readers(path)  # (`files` lists the killed write's files until its rollback)
    assert _data_rows(mine) == _data_rows(theirs) == sorted(model.values(), key=repr)

    # the next writer rolls the killed write back, then the compaction runs
    repair = _rows(range(1, 12, 5), 10)
    Table.open(path, options=options).upsert(_batch(repair))
    model |= {r["id"]: r for r in repair}
    _check(path, model)
    mdt = mdt_timeline(storage)
    assert not mdt.pending() and killed.time not in {i.time for i in mdt.completed(Action.DELTA_COMMIT)}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["mdt_compaction_requested", "mdt_compaction_base_written"])
def test_killed_during_the_metadata_compaction_is_repaired_by_the_next_writer(tmp_path: Path, point: str):
    path = str(tmp_path / "t")
    # the crash writer runs with the default threshold (10): the 10th metadata delta commit is its write's
    table = _table_with_mdt(path, 9, "MERGE_ON_READ", {"hoodie.metadata.compact.max.delta.commits": 1000})
    model = {r["id"]: r for r in _rows(range(12), 1)}
    for n in range(2, 10):
        batch = _rows(range(n % 4, 12, 4), n)
        table.upsert(_batch(batch))
        model |= {r["id"]: r for r in batch}
    assert len(mdt_timeline(table.storage).completed(Action.DELTA_COMMIT)) == 9
    crash_rows = _rows(range(0, 20, 2), 20)
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch(crash_rows), batch_file)
    crash.run_and_kill("crash_writer.py", path, point, str(batch_file))
    model |= {r["id"]: r for r in crash_rows}  # the write itself completed before its metadata services
    storage = Table.open(path).storage
    assert pending_metadata_compactions(storage)
    _check(path, model)  # readers ignore the unfinished metadata compaction

    repair = _rows(range(1, 12, 5), 30)
    Table.open(path).upsert(_batch(repair))
    model |= {r["id"]: r for r in repair}
    _check(path, model)
    mdt = mdt_timeline(storage)
    assert not pending_metadata_compactions(storage) and len(mdt.completed(Action.COMMIT)) == 1


#: `_meta` fixtures of Hudi 1.1 (one COW, one MOR), whose metadata table Hudi compacted already.
META_FIXTURES = [("cow", "v9_txns_simple_meta"), ("mor/avro", "v9_txns_simple_meta")]


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_metadata_compaction_on_a_hudi_meta_fixture(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    data, expected = fixture_rows(path)
    table = Table.open(path, options={**DROP_INDEXES, **EAGER})
    hudi_compactions = len(mdt_timeline(table.storage).completed(Action.COMMIT))
    unique = _unique_rows(data.to_pylist(), ["txn_id"])
    for n, row in enumerate(unique[:5]):  # five upserts of one existing row each: compactions on the way
        changed = dict(row, amount=row["amount"] + 1, txn_ts=row["txn_ts"] + 1000)
        batch = pa.Table.from_pylist([changed], schema=data.schema)
        table.upsert(batch)
        expected = [r for r in expected if r["txn_id"] != row["txn_id"]]
        expected = _data_rows([*expected, *comparable_rows(batch)])
        mine, theirs = both_readers(path)
        assert _data_rows(mine) == _data_rows(theirs) == expected, n
        diff = compare_files_partition(table.storage)
        assert diff.ok, str(diff)
    mdt = mdt_timeline(table.storage)
    assert len(mdt.completed(Action.COMMIT)) > hudi_compactions  # lakeward compacted it too
    assert not mdt.pending()
