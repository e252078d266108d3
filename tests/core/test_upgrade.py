"""`Table.upgrade(to=8|9)` and `lakeward upgrade`: version 6 tables become Hudi 1.x tables as Hudi's upgrade does.

Every version 6 fixture (written by Apache Hudi) is upgraded to 8 and to 9: lakeward and hudi-rs read the
same rows as before the upgrade, for the snapshot and for time travel to every pre-upgrade instant, and a
write afterwards is read by hudi-rs. A SIGKILL at three points of the upgrade is finished by running it
again. Bad input (version 7, downgrades) is refused before anything changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import TableVersionChangedError, UpgradeError
from lakeward.core.storage import Storage
from lakeward.core.table_services.upgrade import layout1_files, upgraded_properties
from lakeward.core.timeline import METAFOLDER
from lakeward.services.cli import app
from tests.interop.compare import (
    all_mismatches,
    comparable_rows,
    fail_on,
    hudi_snapshot,
    hudi_table,
    snapshot_mismatches,
)
from tests.support.crash import run_and_kill
from tests.support.fixture_tables import FIXTURE_KINDS, _names, v8_v9_fixture_tables_dir

V6_FIXTURES = [(kind, name) for kind in FIXTURE_KINDS for name in _names(kind)]
CRASH_POINTS = ["prepared", "timeline_copied", "switched"]


def _data_rows(data: pa.Table | list[pa.RecordBatch]) -> list[dict[str, object]]:
    """Rows without `_hoodie_commit_time`: a compaction rewrites rows (not their values) as Hudi's does."""
    return [{k: v for k, v in r.items() if k != "_hoodie_commit_time"} for r in comparable_rows(data)]


def _reads(path: str, instants: list[str]) -> dict[str | None, list[dict[str, object]]]:
    table = Table.open(path)
    return {as_of: _data_rows(table.read(as_of=as_of)) for as_of in [None, *instants]}


def _props(path: str) -> dict[str, str]:
    return parse_properties((Path(path) / METAFOLDER / "hoodie.properties").read_text())


def _hashes(path: str) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in Path(path).rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("to", [8, 9])
@pytest.mark.parametrize(("kind", "name"), V6_FIXTURES)
def test_upgrade_v6_fixture_reads_the_same_rows_with_lakeward_and_hudi_rs(
    fixture_table: Callable[[str, str], str], kind: str, name: str, to: int
):
    path = fixture_table(kind, name)
    table = Table.open(path)
    instants = [i.time for i in table.completed_instants()]
    before = _reads(path, instants)

    result = table.upgrade(to=to)

    assert (result.from_version, result.to_version) == (6, to)
    assert table.version.number == to
    props = _props(path)
    assert props["hoodie.table.version"] == str(to)
    assert props["hoodie.timeline.layout.version"] == "2"
    assert props["hoodie.table.initial.version"] == "6"
    assert props["hoodie.record.merge.mode"] == "COMMIT_TIME_ORDERING"  # OverwriteWithLatestAvroPayload's
    assert props["hoodie.table.keygenerator.type"] in {"SIMPLE", "COMPLEX", "NON_PARTITION"}
    if to == 9:
        assert "hoodie.compaction.payload.class" not in props and "hoodie.record.merge.strategy.id" not in props
        assert "hoodie.table.precombine.field" not in props
    assert layout1_files(Storage.for_uri(path)) == []
    timeline = Table.open(path).timeline()
    assert all(i.completion_time for i in timeline.completed()), "every completed instant has a completion time"
    if kind.startswith("mor") and instants:
        assert result.compaction is not None, "merge-on-read: every log file compacted first, as Hudi does"
    # lakeward: the same rows as before, now and as of every pre-upgrade instant
    assert _reads(path, instants) == before
    # hudi-rs: the same rows too
    hudi = hudi_table(path)
    for as_of in [None, *instants]:
        assert _data_rows(hudi_snapshot(hudi, as_of)) == before[as_of], f"hudi-rs as of {as_of}"


@pytest.mark.parametrize("to", [8, 9])
@pytest.mark.parametrize(("kind", "name"), [("cow", "v6_simplekeygen_nonhivestyle"), ("mor/avro", "v6_trips_8i1u")])
def test_upgrade_then_write_is_read_by_hudi_rs(fixture_table: Callable[[str, str], str], kind: str, name: str, to: int):
    path = fixture_table(kind, name)
    table = Table.open(path)
    table.upgrade(to=to)
    rows = table.read().drop_columns([c for c in table.read().column_names if c.startswith("_hoodie")])
    changed = rows.slice(0, 1)
    table.upsert(changed)
    table.insert(rows.slice(0, 1))
    assert Table.open(path).read().num_rows == rows.num_rows + 1
    fail_on(all_mismatches(path))


@pytest.mark.parametrize("point", CRASH_POINTS)
@pytest.mark.parametrize("to", [8, 9])
def test_upgrade_killed_is_finished_by_running_it_again(fixture_table: Callable[[str, str], str], point: str, to: int):
    path = fixture_table("mor/avro", "v6_trips_8i3d")
    instants = [i.time for i in Table.open(path).completed_instants()]
    before = _reads(path, instants)

    run_and_kill("crash_upgrader.py", path, point, str(to))

    # Meanwhile readers see a consistent table: the old version until the switch, the new one after it.
    expected_version = to if point == "switched" else 6
    assert Table.open(path).version.number == expected_version
    assert _reads(path, instants) == before
    assert _data_rows(hudi_snapshot(hudi_table(path))) == before[None]

    result = Table.open(path).upgrade(to=to)

    assert result.to_version == to
    if point == "switched":
        assert result.from_version == to and result.leftovers_removed > 0
    assert layout1_files(Storage.for_uri(path)) == []
    assert _reads(path, instants) == before
    hudi = hudi_table(path)
    for as_of in [None, *instants]:
        assert _data_rows(hudi_snapshot(hudi, as_of)) == before[as_of]
    again = Table.open(path).upgrade(to=to)
    assert not again.changed


def test_upgrade_converts_the_archived_timeline_to_the_lsm_history(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        options={
            "hoodie.keep.min.commits": "2",
            "hoodie.keep.max.commits": "3",
            "hoodie.cleaner.commits.retained": "1",
            # archival stays behind the metadata table's last compaction (Hudi's rule): compact it every commit
            "hoodie.metadata.compact.max.delta.commits": "1",
        },
    )
    for i in range(6):
        table.upsert(pa.table({"id": [f"k{i}", "k0"], "part": ["a", "b"], "ts": [i, i], "val": [i, i * 10]}))
    instants = [i.time for i in table.completed_instants()]
    before = {t: _data_rows(table.read(as_of=t)) for t in instants}
    assert table.archive().archived
    active = {i.time for i in Table.open(path).completed_instants()}
    archived_before = [t for t in instants if t not in active]
    assert archived_before, "the table has archived instants"

    result = Table.open(path).upgrade(to=9)

    assert result.archived_instants >= len(archived_before)
    upgraded = Table.open(path)
    history = [i.time for i in upgraded.timeline() if i.is_archived]
    assert set(archived_before) <= set(history), "archived instants are read from the LSM history"
    for t in instants:
        assert _data_rows(upgraded.read(as_of=t)) == before[t], f"time travel to {t}"
    # hudi-rs lists files through the metadata table from version 8 on: it must see the latest slices
    fail_on(snapshot_mismatches(path))
    upgraded.upsert(pa.table({"id": ["k9"], "part": ["a"], "ts": [9], "val": [9]}))
    fail_on(snapshot_mismatches(path))  # hudi-rs reads no incremental range that reaches into the history


def test_upgrade_runs_pending_compaction_first(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    table.upsert(pa.table({"id": ["a", "b"], "part": ["p", "p"], "ts": [1, 1], "val": [1, 2]}))
    table.upsert(pa.table({"id": ["a"], "part": ["p"], "ts": [2], "val": [3]}))
    pending = table.schedule_compaction(force=True)
    assert pending is not None
    table.upsert(pa.table({"id": ["b"], "part": ["p"], "ts": [2], "val": [4]}))
    before = _data_rows(table.read())

    result = table.upgrade(to=8)

    assert f"{pending}.compaction" in result.finished_plans
    assert result.compaction is not None  # and the logs written after the plan, compacted as Hudi does
    upgraded = Table.open(path)
    assert upgraded.timeline().pending() == []
    assert all(not s.log_files for s in upgraded.file_slices())
    assert _data_rows(upgraded.read()) == before
    fail_on(all_mismatches(path))


def test_upgrade_of_version_6_runs_a_pending_clustering_plan_first(tmp_path: Path):
    """A version 6 clustering plan is a pending replacecommit: the upgrade refused it as a write in flight
    instead of running it, as it runs compaction plans (and as it did on version 8)."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts")
    for i in range(3):
        table.bulk_insert(pa.table({"id": [f"k{i}"], "part": ["p"], "ts": [1], "val": [i]}))
    pending = table.schedule_clustering()
    assert pending is not None
    before = _data_rows(table.read())

    result = Table.open(path).upgrade(to=8)

    assert f"{pending}.clustering" in result.finished_plans
    upgraded = Table.open(path)
    assert upgraded.timeline().pending() == []
    assert _data_rows(upgraded.read()) == before
    fail_on(all_mismatches(path))


@pytest.mark.parametrize(
    ("start", "to", "command", "message"),
    [
        (6, 7, "upgrade", "table version 7 is the Hudi 0.16 bridge version"),
        (6, 10, "upgrade", "lakeward upgrades to [8, 9]"),
        (9, 8, "upgrade", "that is a downgrade; run Table.downgrade(to=8)"),
        (8, 6, "downgrade", "Apache Hudi runs it (EightToSevenDowngradeHandler then SevenToSixDowngradeHandler"),
        (9, 6, "downgrade", "(NineToEightDowngradeHandler then EightToSevenDowngradeHandler then SevenToSix"),
        (8, 9, "downgrade", "that is an upgrade"),
    ],
)
def test_upgrade_to_7_and_unsupported_downgrades_are_refused_and_change_nothing(
    tmp_path: Path, start: int, to: int, command: str, message: str
):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", table_version=start)
    table.upsert(pa.table({"id": ["a"], "v": [1]}))
    hashes = _hashes(path)

    with pytest.raises(UpgradeError) as err:
        getattr(table, command)(to=to)

    assert message in str(err.value)
    assert _hashes(path) == hashes
    cli = CliRunner().invoke(app, [command, path, "--to", str(to)])
    assert cli.exit_code == 2 and message in " ".join(cli.output.split())
    assert _hashes(path) == hashes


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_downgrade_9_to_8_as_hudi_keeps_rows_and_hudi_rs_reads_it(
    fixture_table: Callable[[str, str], str], table_type: str
):
    kind, name = (
        ("cow", "v6_simplekeygen_nonhivestyle") if table_type == "COPY_ON_WRITE" else ("mor/avro", "v6_trips_8i3d")
    )
    path = fixture_table(kind, name)
    Table.open(path).upgrade(to=9)
    table = Table.open(path)
    row = table.read().drop_columns([c for c in table.read().column_names if c.startswith("_hoodie")]).slice(0, 1)
    table.upsert(row)  # a log file on merge-on-read: compacted by the downgrade, as Hudi requires
    instants = [i.time for i in Table.open(path).completed_instants()]
    before = _reads(path, instants)
    v9 = _props(path)

    result = CliRunner().invoke(app, ["downgrade", path, "--to", "8"])

    assert result.exit_code == 0 and "from table version 9 to 8" in result.output, result.output
    props = _props(path)
    assert props["hoodie.table.version"] == "8"
    assert props.get("hoodie.table.precombine.field") == v9.get("hoodie.table.ordering.fields")
    assert props.get("hoodie.compaction.payload.class") == v9.get("hoodie.table.legacy.payload.class")
    assert "hoodie.table.ordering.fields" not in props and "hoodie.table.legacy.payload.class" not in props
    downgraded = Table.open(path)
    assert downgraded.version.number == 8 and downgraded.timeline().pending() == []
    if table_type == "MERGE_ON_READ":
        assert all(not s.log_files for s in downgraded.file_slices())
    assert _reads(path, instants) == before
    downgraded.upsert(row)
    fail_on(snapshot_mismatches(path, [None, *instants]))


def test_upgrade_cli_upgrades_and_a_second_run_is_a_no_op(fixture_table: Callable[[str, str], str]):
    path = fixture_table("cow", "v6_nonpartitioned")
    runner = CliRunner()
    first = runner.invoke(app, ["upgrade", path, "--to", "8"])
    assert first.exit_code == 0, first.output
    assert "from table version 6 to 8" in first.output
    second = runner.invoke(app, ["upgrade", path, "--to", "8"])
    assert second.exit_code == 0 and "at table version 8 already" in second.output
    third = runner.invoke(app, ["upgrade", path, "--to", "9"])
    assert third.exit_code == 0 and "from table version 8 to 9" in third.output
    assert _props(path)["hoodie.table.version"] == "9"


def test_a_handle_opened_before_an_upgrade_refuses_to_write_or_run_plans(tmp_path: Path):
    path = str(tmp_path / "t")
    stale = Table.create(path, record_key="id", partition_by="part", table_type="MERGE_ON_READ")
    stale.upsert(pa.table({"id": ["a", "b"], "part": ["p", "p"], "v": [1, 2]}))
    stale.upsert(pa.table({"id": ["a"], "part": ["p"], "v": [3]}))
    Table.open(path).upgrade(to=9)
    hashes = _hashes(path)

    with pytest.raises(TableVersionChangedError, match="table version 6.*now at table version 9"):
        stale.upsert(pa.table({"id": ["c"], "part": ["p"], "v": [4]}))
    assert _hashes(path) == hashes
    fresh = Table.open(path)
    fresh.upsert(pa.table({"id": ["b"], "part": ["p"], "v": [5]}))  # a log file to compact
    planned = fresh.schedule_compaction(force=True)
    assert planned is not None
    with pytest.raises(TableVersionChangedError):
        stale.services.compaction.execute(planned)
    assert Table.open(path).pending_compactions() == [planned]
    # nor read as if the table were empty (it found no version 6 instant left and returned no rows)
    with pytest.raises(TableVersionChangedError, match="open the table again|Open the table again"):
        stale.read()
    # nor plan under the old version's rules (a version 6 plan file landed where version 9 never looks)
    hashes = _hashes(path)
    for schedule in (lambda: stale.schedule_compaction(force=True), stale.schedule_clustering, stale.schedule_clean):
        with pytest.raises(TableVersionChangedError):
            schedule()
    assert _hashes(path) == hashes


def test_upgraded_properties_follow_hudis_handlers():
    v6 = {
        "hoodie.table.name": "t",
        "hoodie.database.name": "default",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.ComplexKeyGenerator",
        "hoodie.table.precombine.field": "ts",
        "hoodie.compaction.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        "hoodie.table.checksum": "1",
    }
    v8 = upgraded_properties(v6, 8)
    assert v8["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    assert v8["hoodie.record.merge.strategy.id"] == "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    assert v8["hoodie.table.keygenerator.type"] == "COMPLEX"
    assert v8["hoodie.table.keygenerator.class"] == v6["hoodie.table.keygenerator.class"]  # kept, as Hudi does
    assert v8["hoodie.timeline.path"] == "timeline" and v8["hoodie.table.precombine.field"] == "ts"
    assert v8["hoodie.table.checksum"] != "1"  # recomputed: CRC-32 of default.t
    v9 = upgraded_properties(v8, 9)
    assert upgraded_properties(v6, 9) == v9
    assert v9["hoodie.table.ordering.fields"] == "ts" and "hoodie.table.precombine.field" not in v9
    assert v9["hoodie.table.legacy.payload.class"] == v6["hoodie.compaction.payload.class"]
    assert "hoodie.compaction.payload.class" not in v9 and "hoodie.record.merge.strategy.id" not in v9


V8_FIXTURES = [
    (kind, name)
    for kind in ("cow", "mor/avro")
    for name in _names(kind, v8_v9_fixture_tables_dir())
    if name.startswith("v8_")
]


@pytest.mark.parametrize(("kind", "name"), V8_FIXTURES)
def test_upgrade_v8_fixture_to_9_keeps_its_rows(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    instants = [i.time for i in Table.open(path).completed_instants()]
    before = _reads(path, instants)
    timeline_before = sorted(p.name for p in (Path(path) / METAFOLDER / "timeline").iterdir() if p.is_file())

    result = Table.open(path).upgrade(to=9)

    assert (result.from_version, result.to_version, result.timeline_files) == (8, 9, 0)
    props = _props(path)
    assert props["hoodie.table.version"] == "9" and props["hoodie.table.initial.version"] == "8"
    assert "hoodie.table.precombine.field" not in props and props["hoodie.table.ordering.fields"]
    timeline_after = {p.name for p in (Path(path) / METAFOLDER / "timeline").iterdir() if p.is_file()}
    assert set(timeline_before) <= timeline_after, "the layout-2 timeline is kept as it is"
    assert _reads(path, instants) == before
    hudi = hudi_table(path)
    for as_of in [None, *instants]:
        assert _data_rows(hudi_snapshot(hudi, as_of)) == before[as_of]


def test_upgrade_with_metadata_disabled_deletes_the_metadata_table_first(tmp_path: Path):
    # a table with a metadata table is upgraded with it (test_upgrade_metadata_table.py); `false` deletes it
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", table_version=8)
    table.upsert(pa.table({"id": ["a", "b"], "part": ["p", "q"], "v": [1, 2]}))
    assert _props(path)["hoodie.table.metadata.partitions"] == "files"

    result = Table.open(path, options={"hoodie.metadata.enable": "false"}).upgrade(to=9)

    assert result.to_version == 9
    assert _props(path)["hoodie.table.metadata.partitions"] == ""
    assert not (Path(path) / METAFOLDER / "metadata").exists()
    fail_on(all_mismatches(path))


def test_an_upgrade_refused_for_change_data_capture_changes_nothing_with_metadata_disabled(tmp_path: Path):
    """Refused for CDC (which the upgrade does not carry over), it had already deleted the metadata table the
    options disable, and said "nothing was changed"."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", options={"hoodie.table.cdc.enabled": "true"})
    table.upsert(pa.table({"id": ["a", "b"], "v": [1, 2]}))
    before = _hashes(path)
    with pytest.raises(UpgradeError, match="change data capture"):
        Table.open(path, options={"hoodie.metadata.enable": "false"}).upgrade(to=8)
    assert _hashes(path) == before


def test_a_rerun_copies_the_timeline_anew_after_the_table_changed(fixture_table: Callable[[str, str], str]):
    path = fixture_table("cow", "v6_nonpartitioned")
    first, latest = [i.time for i in Table.open(path).completed_instants()]
    run_and_kill("crash_upgrader.py", path, "timeline_copied", "9")  # copies of both commits in .hoodie/timeline/
    Table.open(path).rollback(latest)  # the table, still at version 6, changes before the rerun
    before = _data_rows(Table.open(path).read())

    Table.open(path).upgrade(to=9)

    upgraded = Table.open(path)
    assert [i.time for i in upgraded.timeline().completed_writes()] == [first], (
        "no stale copy of the rolled-back commit"
    )
    assert _data_rows(upgraded.read()) == before
    fail_on(snapshot_mismatches(path))


def test_upgrade_keeps_each_writes_completion_time_beside_a_later_savepoint(tmp_path: Path):
    """A savepoint shares its write's instant time but is made later: its file's time became the write's
    completion time and pushed every later write's past it, so an incremental read of (w2, w3] on the
    upgraded table returned nothing (lakeward and hudi-rs alike)."""
    import os
    import time

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_version=6)
    times = []
    for i in range(5):
        times.append(table.upsert(pa.table({"id": [f"k{i}"], "v": [i], "ts": [i]})).instant_time)
        time.sleep(0.05)
    time.sleep(0.2)
    table.savepoint(times[1])
    Table.open(path).upgrade(to=8)
    upgraded = Table.open(path)
    writes = {i.time: i.completion_time for i in upgraded.timeline().completed_writes()}
    savepoint = next(i for i in upgraded.timeline().completed() if i.action.value == "savepoint")
    assert [writes[t] for t in times] == sorted(writes[t] for t in times)
    assert all(writes[t] < savepoint.completion_time for t in times), (writes, savepoint)  # made after them all
    # version 8 ranges are by completion time: w2 completed after the instant time times[2], w3 after times[3]
    assert upgraded.read_incremental(times[2], times[3]).column("id").to_pylist() == ["k2"]
    assert hudi_incremental_ids(path, times[2], times[3]) == ["k2"]
    assert sorted(os.listdir(Path(path, ".hoodie", "timeline"))).count(f"{times[1]}_{writes[times[1]]}.commit") == 1


def hudi_incremental_ids(path: str, begin: str, end: str) -> list[str]:
    import hudi

    options = (
        hudi.HudiReadOptions()
        .with_query_type(hudi.HudiQueryType.Incremental)
        .with_start_timestamp(begin)
        .with_end_timestamp(end)
    )
    batches = hudi.HudiTableBuilder.from_base_uri(path).build().read(options)
    return sorted(x for b in batches for x in b.column("id").to_pylist())


def _version_6_table_with_a_compaction_plan(path: str) -> tuple[Table, list[dict[str, object]], str]:
    """A version 6 merge-on-read table with a log file and a compaction plan of it: the table, its rows, the plan."""
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
    table.upsert(pa.table({"id": ["a", "b"], "part": ["p", "p"], "ts": [1, 1], "val": [1, 2]}))
    table.upsert(pa.table({"id": ["a"], "part": ["p"], "ts": [2], "val": [3]}))
    plan = table.schedule_compaction(force=True)
    assert plan is not None
    return table, _data_rows(table.read()), plan


def test_a_plan_run_that_an_upgrade_finished_meanwhile_removes_nothing(tmp_path: Path):
    """A compaction running while `upgrade` ran the same plan itself and switched the version: at its
    completion the run read the new version's timeline with the old layout, took its plan for undone and
    deleted the base files the upgrade had just committed (every read then failed: base file missing)."""
    path = str(tmp_path / "t")
    table, before, plan = _version_6_table_with_a_compaction_plan(path)
    table.completion_check = lambda _: Table.open(path).upgrade(to=9)  # finishes the plan, then switches

    with pytest.raises(TableVersionChangedError):
        table.run_compaction(plan)

    upgraded = Table.open(path)
    assert upgraded.check().ok
    assert _data_rows(upgraded.read()) == before
    fail_on(all_mismatches(path))


def test_an_upgrade_whose_pending_plan_another_runner_completed_meanwhile_goes_on(tmp_path: Path):
    """The reverse order: the daemon's run completes the plan while the upgrade runs it too; the
    upgrade failed on the plan's completed instant (raw InstantExistsError) instead of going on."""
    path = str(tmp_path / "t")
    table, before, plan = _version_6_table_with_a_compaction_plan(path)
    table.completion_check = lambda _: Table.open(path).run_compaction(plan)  # the other runner finishes first

    result = table.upgrade(to=9)

    assert result.to_version == 9 and f"{plan}.compaction" in result.finished_plans
    upgraded = Table.open(path)
    assert [i.time for i in upgraded.timeline().completed()].count(plan) == 1
    assert upgraded.check().ok and _data_rows(upgraded.read()) == before
    fail_on(all_mismatches(path))
