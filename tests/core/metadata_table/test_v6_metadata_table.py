"""The metadata table of a version 6 table, kept as Hudi 0.14/0.15 writers keep it.

Layout 1 timeline without completion times, JSON commit metadata, `files` log files named after
their slice's base instant with growing versions, instant times derived from data-table instants
(`<latest completed>010` initialisation, `<last delta commit>001` compaction, `<delta commit>002`
clean), the table's own `hoodie.properties` as Hudi 0.x writes them, and Hudi 0.x's rule that a
pending data instant at or before the last delta commit holds the metadata compaction back.
hudi-rs ignores the metadata table on v6, so the `files` partition is checked against storage.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import ConcurrentWriteError
from lakeward.core.file_group.metadata_listing import load_metadata_timeline, metadata_storage
from lakeward.core.file_group.naming import parse_log_file_name
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import check_metadata_compaction
from lakeward.core.metadata_table.lag import metadata_table_lag
from lakeward.core.timeline import Action, Timeline
from tests.core.metadata_table.test_writes import _data_rows, _unique_rows
from tests.core.test_concurrency import interleave
from tests.interop.compare import both_readers, comparable_rows, hudi_snapshot, hudi_table
from tests.support import crash
from tests.support.fixture_tables import all_fixtures

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
Model = dict[str, dict[str, Any]]


OFF = {"hoodie.metadata.enable": "false"}


def _rows(ids: range, ts: int) -> list[dict[str, Any]]:
    return [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": ts * 1000 + i} for i in ids]


def _batch(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def _mdt(path: str) -> Timeline:
    return load_metadata_timeline(metadata_storage(Table.open(path).storage))


def _check(path: str, model: Model) -> None:
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)
    mine, theirs = both_readers(path)  # hudi-rs lists storage on v6
    assert _data_rows(mine) == _data_rows(theirs) == sorted(model.values(), key=repr)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_writer_with_the_metadata_table_enabled_keeps_it_as_hudi_0x_does(tmp_path: Path, table_type: str):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type)
    # first written without a metadata table (a Hudi 0.x writer with it off): this test enables it afterwards
    first = Table.open(path, options=OFF).insert(_batch(_rows(range(12), 1))).instant_time
    model = {r["id"]: r for r in _rows(range(12), 1)}
    assert not (Path(path) / ".hoodie" / "metadata").exists()
    options = {
        "hoodie.metadata.enable": "true",
        "hoodie.metadata.compact.max.delta.commits": 3,
        "hoodie.metadata.cleaner.commits.retained": 1,
    }
    table = Table.open(path, options=options)
    written = []
    for n in range(2, 12):
        batch = _rows(range(n % 4, 12, 4), n)
        written.append(table.upsert(_batch(batch)).instant_time)
        model |= {r["id"]: r for r in batch}
        assert compare_files_partition(table.storage).ok
    _check(path, model)

    mdt_root = Path(path) / ".hoodie" / "metadata"
    props = parse_properties((mdt_root / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.version"] == "6" and props["hoodie.timeline.layout.version"] == "1"
    assert props["hoodie.table.keygenerator.class"] == "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator"
    assert props["hoodie.archivelog.folder"] == "archived" and props["hoodie.table.base.file.format"] == "HFILE"
    assert not {"hoodie.record.merge.mode", "hoodie.timeline.path", "hoodie.table.keygenerator.type"} & set(props)
    data_props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert data_props["hoodie.table.metadata.partitions"] == "files"

    mdt = _mdt(path)
    assert all(i.completion_time is None for i in mdt.instants)  # layout 1: `<t>.deltacommit`
    deltas = [i.time for i in mdt.completed(Action.DELTA_COMMIT)]
    assert deltas == [first + "010", *written]  # initialised as of the latest completed data instant
    compactions = [i.time for i in mdt.completed(Action.COMMIT)]
    assert compactions and all(c[:-3] in deltas and c.endswith("001") for c in compactions)
    cleans = [i.time for i in mdt.completed(Action.CLEAN)]
    assert cleans and all(c[:-3] in deltas and c.endswith("002") for c in cleans)
    commit = json.loads((mdt_root / ".hoodie" / f"{written[-1]}.deltacommit").read_text())  # JSON on v6
    [stat] = commit["partitionToWriteStats"]["files"]
    log = parse_log_file_name(stat["logFiles"][0])
    assert log is not None and log.base_instant_time == max([first + "010", *compactions])  # its slice's base
    names = [p.name for p in (mdt_root / "files").iterdir()]
    logs = [
        parsed
        for n in names
        if (parsed := parse_log_file_name(n)) and parsed.base_instant_time == log.base_instant_time
    ]
    assert sorted(x.version for x in logs) == list(range(1, len(logs) + 1))  # one new version per delta commit

    table = Table.open(path)
    assert metadata_table_lag(table.storage, table.timeline()).behind == ()
    assert table.services["metadata_compaction"].unavailable_reason() is None
    table.upsert(_batch(_rows(range(3), 20)))  # a writer without the option keeps it too
    model |= {r["id"]: r for r in _rows(range(3), 20)}
    _check(path, model)


def test_enabling_waits_while_another_instant_is_pending(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    # written without a metadata table, which this test enables while a compaction plan is pending
    Table.open(path, options=OFF).insert(_batch(_rows(range(6), 1)))
    Table.open(path, options=OFF).upsert(_batch(_rows(range(3), 2)))
    planned = Table.open(path, options=OFF).schedule_compaction(force=True)  # pending: no initialisation meanwhile
    assert planned is not None
    options = {"hoodie.metadata.enable": "true"}
    with caplog.at_level(logging.WARNING, logger="lakeward.core.metadata_table.bootstrap"):
        Table.open(path, options=options).upsert(_batch(_rows(range(2), 3)))
    assert any(planned in r.getMessage() for r in caplog.records if "not initialising" in r.getMessage())
    assert not (Path(path) / ".hoodie" / "metadata").exists()
    Table.open(path).run_compaction(planned)
    Table.open(path, options=options).upsert(_batch(_rows(range(3), 4)))
    assert compare_files_partition(Table.open(path).storage).ok


@pytest.mark.slow
def test_a_pending_data_instant_holds_the_v6_metadata_compaction_back(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    Table.open(path).insert(_batch(_rows(range(12), 1)))
    model = {r["id"]: r for r in _rows(range(12), 1)}
    options = {"hoodie.metadata.enable": "true", "hoodie.metadata.compact.max.delta.commits": 1000}
    table = Table.open(path, options=options)
    for n in (2, 3):
        table.upsert(_batch(_rows(range(n, 12, 3), n)))
        model |= {r["id"]: r for r in _rows(range(n, 12, 3), n)}
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch(_rows(range(0, 20, 2), 9)), batch_file)
    crash.run_and_kill("crash_writer.py", path, "before_complete", str(batch_file))  # metadata commit done
    [killed] = Table.open(path).timeline().pending()
    storage = Table.open(path).storage
    check = check_metadata_compaction(storage, Table.open(path).timeline(), 2)
    assert check.blocked and not check.due and check.eligible == 0  # Hudi 0.x: nothing while it pends
    assert check.blocked_by is not None and check.blocked_by.time == killed.time
    assert killed.time in check.reason and "version 6" in check.reason
    assert (
        Table.open(path, options={"hoodie.metadata.compact.max.delta.commits": 2})
        .services["metadata_compaction"]
        .schedule(force=True)
        is None
    )

    repair = _rows(range(1, 12, 5), 10)  # the next writer rolls the killed write back on both tables
    Table.open(path, options={"hoodie.metadata.compact.max.delta.commits": 2}).upsert(_batch(repair))
    model |= {r["id"]: r for r in repair}
    _check(path, model)
    mdt = _mdt(path)
    assert killed.time not in {i.time for i in mdt.completed(Action.DELTA_COMMIT)}
    assert mdt.completed(Action.COMMIT) and not mdt.pending()


#: Every version 6 fixture table Hudi 0.14/0.15 wrote (none has a metadata table: they were written with it off).
V6_FIXTURES = [(kind, name) for kind, name in all_fixtures() if name.startswith("v6_") and name != "v6_empty"]


@pytest.mark.parametrize(("kind", "name"), V6_FIXTURES)
def test_a_hudi_v6_fixture_gets_a_metadata_table_that_every_write_keeps(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    path = fixture_table(kind, name)
    start = pa.Table.from_batches(hudi_snapshot(hudi_table(path)))
    data = start.drop_columns([c for c in start.column_names if c.startswith("_hoodie")])
    expected = _data_rows(comparable_rows(start))
    table = Table.open(path, options={"hoodie.metadata.enable": "true"})
    key_fields = list(table.config.record_key_fields)
    [gone] = _unique_rows(data.to_pylist(), key_fields)[:1]
    row = pa.Table.from_pylist([gone], schema=data.schema)

    def check(rows: list[dict[str, Any]]) -> None:
        assert compare_files_partition(Table.open(path).storage).ok
        mine, theirs = both_readers(path)
        assert _data_rows(mine) == _data_rows(theirs) == rows

    table.delete(row)
    key = tuple(gone[f] for f in key_fields)
    check([r for r in expected if tuple(r[f] for f in key_fields) != key])
    assert (Path(path) / ".hoodie" / "metadata" / "files").is_dir()
    Table.open(path).upsert(row)  # back again, by a writer without the option
    check(expected)
    if table.config.table_type == "MERGE_ON_READ":
        planned = Table.open(path).schedule_compaction(force=True)
        if planned is not None:
            Table.open(path).run_compaction(planned)
        check(expected)
    Table.open(path).clean()
    check(expected)


def test_a_log_append_vouches_only_for_the_log_files_it_wrote(tmp_path: Path):
    """v6 log files carry their slice's base instant, so a writer cannot tell a log of a write still in
    flight from a committed one. Writer B appends its log, then A appends to the same file group and
    completes first; B conflicts and its rollback deletes its log. A's commit must not have put B's log
    into the `files` partition (nor its write stat, which Java Hudi's 0.x lists the slice's logs in)."""
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    rows = {"id": ["a", "b", "c"], "part": ["p"] * 3, "ts": [1, 1, 1], "val": [0, 0, 0]}
    table.upsert(pa.table(rows, schema=SCHEMA))
    table.upsert(pa.table({**rows, "ts": [2, 2, 2], "val": [1, 1, 1]}, schema=SCHEMA))  # a log: appends follow
    first, second = Table.open(str(path)), Table.open(str(path))
    interleave(second, lambda: first.upsert(pa.table({**rows, "ts": [3, 3, 3], "val": [2, 2, 2]}, schema=SCHEMA)))
    with pytest.raises(ConcurrentWriteError):
        second.upsert(pa.table({**rows, "ts": [4, 4, 4], "val": [3, 3, 3]}, schema=SCHEMA))
    diff = compare_files_partition(Table.open(str(path)).storage)
    assert diff.ok, str(diff)
    latest = Timeline.load(Table.open(str(path)).storage).completed_writes()[-1]
    stats = json.loads((path / ".hoodie" / latest.file_name).read_text())["partitionToWriteStats"]
    listed = [name for ss in stats.values() for s in ss for name in s.get("logFiles") or []]
    assert all((path / name).is_file() for name in listed), listed
    assert sorted(Table.open(str(path)).read(columns=["val"]).column("val").to_pylist()) == [2, 2, 2]


def test_logs_written_over_a_pending_compaction_are_on_storage_for_the_check_and_a_restore(tmp_path: Path):
    """v6 names a log written over a pending compaction after the compaction's instant. Its delta commit
    completed, so the `files` partition lists it, and a storage listing that leaves out every file of a
    pending instant (right for the compaction's base files) took it for absent: the check reported a
    difference, and a restore, which applies the difference, dropped the live log from `files` (time
    travel through the metadata table then read the rows before it)."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")

    def batch(val: int, ts: int) -> pa.Table:
        return pa.table({"id": ["a", "b"], "part": ["p0", "p0"], "ts": [ts, ts], "val": [val, val]}, schema=SCHEMA)

    table.upsert(batch(1, 1))
    table.upsert(batch(2, 2))
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    saved = table.upsert(batch(3, 3)).instant_time  # a log over the pending compaction
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)
    table.savepoint(saved)
    table.upsert(batch(4, 4))
    table.restore(saved)
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)
    table = Table.open(path)
    table.run_compaction(plan)
    diff = compare_files_partition(Table.open(path).storage)
    assert diff.ok, str(diff)
    assert Table.open(path).read(columns=["val"]).column("val").to_pylist() == [3, 3]
    Table.open(path).upgrade(to=8)  # reads then list through the metadata table
    assert Table.open(path).read(columns=["val"], as_of=saved).column("val").to_pylist() == [3, 3]


def test_a_pending_compaction_plan_holding_the_v6_metadata_compaction_back_is_to_be_run_not_rolled_back(
    tmp_path: Path,
):
    """The reason advised rolling back "a dead writer's instant" whatever held the compaction back; an
    on-call engineer following it would throw a compaction plan away. Found by a report-only exploration."""
    path = str(tmp_path / "t")
    options = {"hoodie.metadata.enable": "true", "hoodie.metadata.compact.max.delta.commits": 1000}
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ", options=options
    )
    for n in range(1, 4):
        table.upsert(_batch(_rows(range(12), n)))
    plan = table.schedule_compaction(force=True)
    for n in range(4, 7):
        table.upsert(_batch(_rows(range(0, 12, 2), n)))
    check = check_metadata_compaction(table.storage, Table.open(path).timeline(), 2)
    assert check.blocked and check.blocked_by is not None and check.blocked_by.time == plan
    assert f"{plan} (compaction, requested)" in check.reason
    assert "run the pending compaction" in check.reason and "dead writer" not in check.reason
