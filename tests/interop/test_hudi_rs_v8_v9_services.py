"""lakeward runs table services on Hudi 1.x tables (versions 8 and 9) that hudi-rs then reads.

For each service on tables lakeward created at version 8 and 9 (COW and MOR where the
service applies): after it runs, lakeward reads the table to a dict model's rows and hudi-rs
reads it to lakeward's rows (snapshot, time travel to every instant, incremental ranges).
Each service also has a SIGKILL-and-rerun test on version 9 (the crash scripts of
`tests/core/scripts/`), ending with the model's rows once rerun.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.timeline import Action, State
from tests.core.test_crash_recovery import run_and_kill as run_writer_and_kill
from tests.interop.compare import (
    EPOCH_INSTANT,
    all_mismatches,
    both_readers,
    fail_on,
    incremental_mismatches,
    incremental_ranges,
    snapshot_mismatches,
    write_instants,
)
from tests.interop.test_hudi_rs_v8_v9_writes import PARTS, _batch, _lakeward_model
from tests.support import crash

Row = tuple[str, int, int]


@dataclass
class Scenario:
    """A table lakeward created at `version`, and the rows it must read to."""

    path: str
    table: Table
    model: dict[str, Row] = field(default_factory=dict)
    ts: int = 0

    def upsert(self, ids: range | list[int], operation: str = "upsert") -> None:
        self.ts += 1
        rows = {f"k{i:03d}": (PARTS[i % len(PARTS)], self.ts, i * 7 + self.ts) for i in ids}
        getattr(self.table, operation)(_batch(rows))
        self.model |= rows

    def delete(self, ids: list[int]) -> None:
        keys = [f"k{i:03d}" for i in ids]
        self.table.delete(_batch({k: self.model[k] for k in keys}))
        for k in keys:
            del self.model[k]

    def compact(self) -> str:
        """Schedule (forced) and run a compaction; its instant time."""
        instant = self.table.schedule_compaction(force=True)
        assert instant is not None
        self.table.run_compaction(instant)
        return instant

    def check(self, what: str) -> None:
        """lakeward reads the model's rows; hudi-rs reads lakeward's rows at every instant."""
        assert _lakeward_model(self.path) == self.model, f"after {what}"
        fail_on(all_mismatches(self.path))


def _scenario(path: Path, version: int, table_type: str, **options: str) -> Scenario:
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options=options or None,
    )
    s = Scenario(str(path), table)
    s.upsert(range(12))
    s.upsert(range(0, 12, 2))
    s.delete([3])
    s.upsert([1, 5, 20, 21])
    return s


def all_mismatches_after(path: str, earliest: str) -> list[str]:
    """`all_mismatches` over the instants a clean retained (older ones are no longer readable)."""
    instants = [t for t in write_instants(Table.open(path)) if t >= earliest]
    ranges = [(b, e) for b, e in incremental_ranges(instants) if b >= earliest]
    return snapshot_mismatches(path, [None, *instants]) + incremental_mismatches(path, ranges)


def _timeline_files(path: str) -> list[str]:
    return sorted(p.name for p in (Path(path) / ".hoodie" / "timeline").iterdir() if p.is_file())


# -- compaction ----------------------------------------------------------------------------
@pytest.mark.parametrize("version", [8, 9])
def test_compaction_on_a_v8_v9_table_matches_the_model_and_hudi_rs(tmp_path: Path, version: int) -> None:
    s = _scenario(tmp_path / "t", version, "MERGE_ON_READ")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    assert f"{instant}.compaction.requested" in _timeline_files(s.path)
    s.table.run_compaction(instant)
    files = _timeline_files(s.path)
    assert f"{instant}.compaction.inflight" in files
    assert [f for f in files if f.startswith(f"{instant}_") and f.endswith(".commit")], files
    assert not list((Path(s.path) / ".hoodie").glob("*.compaction.*")), "nothing in the layout-1 folder"
    s.check("compaction")
    s.upsert([0, 1, 30])  # logs of the next delta commit join the compacted slices
    s.check("an upsert after the compaction")
    s.compact()
    s.check("a second compaction")


def test_inline_compaction_on_a_v9_table_matches_hudi_rs(tmp_path: Path) -> None:
    s = _scenario(
        tmp_path / "t",
        9,
        "MERGE_ON_READ",
        **{"hoodie.compact.inline": "true", "hoodie.compact.inline.max.delta.commits": "2"},
    )
    completed = [f for f in _timeline_files(s.path) if "_" in f and f.endswith(".commit")]
    assert completed, "writes compacted inline"
    s.check("inline compactions")


def test_compaction_on_v9_killed_and_rerun_completes_with_the_same_rows(tmp_path: Path) -> None:
    s = _scenario(tmp_path / "t", 9, "MERGE_ON_READ")
    instant = s.table.schedule_compaction(force=True)
    assert instant is not None
    crash.run_and_kill("crash_compactor.py", s.path, "before_complete", instant)
    table = Table.open(s.path)
    assert table.timeline().state_of(instant, Action.COMPACTION) is State.INFLIGHT
    s.check("the killed compaction (readers still see the delta commits)")
    table.run_compaction(instant)
    assert table.timeline().state_of(instant, Action.COMPACTION) is State.COMPLETED
    s.table = table
    s.check("the rerun compaction")


# -- clean ---------------------------------------------------------------------------------
CLEAN_OPTIONS = {"hoodie.cleaner.policy": "KEEP_LATEST_COMMITS", "hoodie.cleaner.commits.retained": "2"}


def _cleaned(path: Path, version: int, table_type: str) -> tuple[Scenario, str]:
    """A table with old file slices, compacted on MOR, and a scheduled clean of them."""
    s = _scenario(path, version, table_type, **CLEAN_OPTIONS)
    if table_type == "MERGE_ON_READ":
        s.compact()
    s.upsert(range(0, 12, 3))
    s.upsert([2, 4, 40])
    clean = s.table.schedule_clean()
    assert clean is not None
    return s, clean


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_clean_on_a_v8_v9_table_matches_the_model_and_hudi_rs(tmp_path: Path, version: int, table_type: str) -> None:
    s, clean = _cleaned(tmp_path / "t", version, table_type)
    assert f"{clean}.clean.requested" in _timeline_files(s.path)
    result = s.table.run_clean(clean)
    assert result.files_deleted > 0
    assert not any((Path(s.path) / f).exists() for f in result.deleted_files)
    files = _timeline_files(s.path)
    assert f"{clean}.clean.inflight" in files
    assert [f for f in files if f.startswith(f"{clean}_") and f.endswith(".clean")], files
    assert s.table.run_clean(clean).deleted_files == result.deleted_files, "a completed clean returns its record"
    assert _lakeward_model(s.path) == s.model
    fail_on(all_mismatches_after(s.path, result.earliest_commit_to_retain))


def test_clean_on_v9_killed_and_rerun_completes_with_the_same_rows(tmp_path: Path) -> None:
    s, clean = _cleaned(tmp_path / "t", 9, "MERGE_ON_READ")
    crash.run_and_kill("crash_cleaner.py", s.path, "clean_after_some_deletes", clean)
    table = Table.open(s.path)
    assert table.timeline().state_of(clean, Action.CLEAN) is State.INFLIGHT
    result = table.run_clean(clean)
    assert table.timeline().state_of(clean, Action.CLEAN) is State.COMPLETED
    assert _lakeward_model(s.path) == s.model
    fail_on(all_mismatches_after(s.path, result.earliest_commit_to_retain))


# -- clustering ----------------------------------------------------------------------------
def _clustered(path: Path, version: int, table_type: str) -> tuple[Scenario, str]:
    """Small file groups (bulk inserts) and updates, and a scheduled clustering of them."""
    s = _scenario(path, version, table_type)
    s.upsert(range(50, 56), "bulk_insert")
    s.upsert(range(60, 66), "bulk_insert")
    s.upsert([50, 61, 2])
    instant = s.table.schedule_clustering()
    assert instant is not None
    return s, instant


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_clustering_on_a_v8_v9_table_is_its_own_action_and_matches_hudi_rs(
    tmp_path: Path, version: int, table_type: str
) -> None:
    s, instant = _clustered(tmp_path / "t", version, table_type)
    files = _timeline_files(s.path)
    assert f"{instant}.clustering.requested" in files
    assert not [f for f in files if f.startswith(instant) and "replacecommit" in f], files
    assert s.table.pending_clustering() == [instant]
    assert s.table.service_state().pending(Action.CLUSTERING)[0].time == instant
    s.check("the scheduled clustering (a pending plan, not a failed write)")
    s.upsert([70])  # a writer does not roll the plan back
    assert s.table.pending_clustering() == [instant]
    groups_before = len({(sl.partition_path, sl.file_id) for sl in s.table.file_slices()})
    s.table.run_clustering(instant)
    files = _timeline_files(s.path)
    assert f"{instant}.clustering.inflight" in files
    assert [f for f in files if f.startswith(f"{instant}_") and f.endswith(".replacecommit")], files
    assert s.table.pending_clustering() == []
    assert len({(sl.partition_path, sl.file_id) for sl in s.table.file_slices()}) < groups_before
    s.check("clustering")


def test_clustering_on_v9_killed_and_rerun_completes_with_the_same_rows(tmp_path: Path) -> None:
    s, instant = _clustered(tmp_path / "t", 9, "MERGE_ON_READ")
    crash.run_and_kill("crash_clusterer.py", s.path, "after_first_base_file", instant)
    table = Table.open(s.path)
    assert table.pending_clustering() == [instant]
    s.check("the killed clustering")
    table.run_clustering(instant)
    assert table.pending_clustering() == []
    s.check("the rerun clustering")


# -- rollback, savepoints and restore ------------------------------------------------------
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_rollback_of_a_completed_write_on_v8_v9_matches_hudi_rs(tmp_path: Path, version: int, table_type: str) -> None:
    s = _scenario(tmp_path / "t", version, table_type)
    before = dict(s.model)
    s.upsert([0, 1, 2, 80])
    last = s.table.completed_instants()[-1].time
    s.table.rollback(last)
    files = _timeline_files(s.path)
    assert not [f for f in files if f.startswith(last)], "the rolled-back instant's timeline files are gone"
    assert len([f for f in files if "_" in f and f.endswith(".rollback")]) == 1, files
    s.model = before
    s.check("the rollback")
    s.upsert([0, 81])
    s.check("a write after the rollback")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_savepoint_and_restore_on_v8_v9_match_the_model_and_hudi_rs(
    tmp_path: Path, version: int, table_type: str
) -> None:
    s = _scenario(tmp_path / "t", version, table_type)
    saved = s.table.completed_instants()[-1].time
    at_savepoint = dict(s.model)
    s.table.savepoint(saved, user="test")
    assert s.table.savepoints() == [saved]
    assert [f for f in _timeline_files(s.path) if f.startswith(f"{saved}_") and f.endswith(".savepoint")]
    s.upsert([0, 1, 90])
    if table_type == "MERGE_ON_READ":
        s.compact()
    s.delete([2])
    s.upsert(range(95, 98), "bulk_insert")
    s.check("writes after the savepoint")
    result = s.table.restore(saved)
    assert result.savepoint_instant_time == saved and len(result.rolled_back) >= 3
    files = _timeline_files(s.path)
    assert [f for f in files if f.startswith(f"{result.restore_instant_time}_") and f.endswith(".restore")], files
    s.model = at_savepoint
    s.check("the restore")
    s.upsert([0, 99])
    s.check("a write after the restore")
    s.table.delete_savepoint(saved)
    assert s.table.savepoints() == []
    assert not [f for f in _timeline_files(s.path) if f.endswith(".savepoint") or f.endswith(".savepoint.inflight")]


def test_restore_on_v9_killed_and_rerun_ends_at_the_savepoint(tmp_path: Path) -> None:
    s = _scenario(tmp_path / "t", 9, "MERGE_ON_READ")
    saved = s.table.completed_instants()[-1].time
    at_savepoint = dict(s.model)
    s.table.savepoint(saved)
    s.upsert([0, 1, 90])
    s.upsert([3, 4, 91])
    s.delete([5])
    crash.run_and_kill("crash_cleaner.py", s.path, "restore_after_first_rollback", saved)
    table = Table.open(s.path)
    assert table.timeline().pending(Action.RESTORE), "the killed restore is pending"
    table.restore(saved)
    assert not table.timeline().pending()
    s.table, s.model = table, at_savepoint
    s.check("the rerun restore")


def test_savepoint_on_v9_killed_and_rerun_then_restored_to(tmp_path: Path) -> None:
    s = _scenario(tmp_path / "t", 9, "MERGE_ON_READ")
    saved = s.table.completed_instants()[-1].time
    at_savepoint = dict(s.model)
    crash.run_and_kill("crash_cleaner.py", s.path, "savepoint_before_complete", saved)
    table = Table.open(s.path)
    assert f"{saved}.savepoint.inflight" in _timeline_files(s.path) and table.savepoints() == []
    s.check("the killed savepoint")
    table.savepoint(saved)
    assert table.savepoints() == [saved]
    s.table = table
    s.upsert([0, 1, 90])
    table.restore(saved)
    s.model = at_savepoint
    s.check("a restore to the rerun savepoint")


def test_rollback_on_v9_killed_and_rerun_by_repair(tmp_path: Path) -> None:
    s = _scenario(tmp_path / "t", 9, "MERGE_ON_READ")
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch({"k000": ("p1", 99, -1), "k100": ("p2", 99, -1)}), batch_file)
    run_writer_and_kill(Path(s.path), "before_complete", batch_file)
    failed = [i.time for i in Table.open(s.path).timeline().pending_writes()]
    assert len(failed) == 1
    run_writer_and_kill(Path(s.path), "rollback_before_complete", batch_file)
    table = Table.open(s.path)
    assert table.timeline().pending(Action.ROLLBACK), "the killed rollback is pending"
    s.check("the killed rollback")
    table.repair()
    timeline = table.timeline()
    assert not timeline.pending(Action.ROLLBACK) and not [i for i in timeline.instants if i.time in failed]
    s.table = table
    s.check("the finished rollback")


# -- archival into the LSM history ---------------------------------------------------------
# merge-on-read archival keeps the delta commits a compaction counts (Hudi's rule): 2 of them
ARCHIVE_OPTIONS = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.compact.inline.max.delta.commits": "2",
}


def _long_timeline(path: Path, version: int, table_type: str) -> Scenario:
    s = _scenario(path, version, table_type, **ARCHIVE_OPTIONS)
    for k in range(4):
        s.upsert([k, k + 1, 100 + k])
    if table_type == "MERGE_ON_READ":
        s.compact()
        s.upsert([1, 2])
    return s


def _history_files(path: str) -> list[str]:
    return sorted(p.name for p in (Path(path) / ".hoodie" / "timeline" / "history").iterdir())


def _check_archived(s: Scenario, archived: list[str]) -> None:
    """lakeward reads the archived instants back from the history; hudi-rs reads every snapshot.

    hudi-rs does not read the LSM history (format reference §2.6): incremental ranges are
    compared over the active timeline only; snapshots and time travel to every instant
    (archived ones included: their files are older than the first active instant) are compared.
    """
    table = Table.open(s.path)
    timeline = table.timeline()
    assert sorted(i.time for i in timeline.completed() if i.is_archived) == sorted(archived)
    assert _lakeward_model(s.path) == s.model
    instants = write_instants(table)
    active = [t for t in instants if t not in archived]
    ranges = [(b, e) for b, e in incremental_ranges(active) if b != EPOCH_INSTANT]  # (epoch, ..] reaches the history
    fail_on(snapshot_mismatches(s.path, [None, *instants]) + incremental_mismatches(s.path, ranges))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_archival_on_v8_v9_writes_the_lsm_history_and_hudi_rs_still_reads(
    tmp_path: Path, version: int, table_type: str
) -> None:
    s = _long_timeline(tmp_path / "t", version, table_type)
    before = [i.time for i in s.table.completed_instants()]
    result = s.table.archive()
    archived = [a.split(".")[0] for a in result.archived]
    assert archived and archived == before[: len(archived)]
    assert result.archive_file is not None and result.archive_file.startswith(".hoodie/timeline/history/")
    history = _history_files(s.path)
    assert history == sorted([Path(result.archive_file).name, "_version_", "manifest_1"])
    assert (Path(s.path) / ".hoodie" / "timeline" / "history" / "_version_").read_text() == "1"
    assert not (Path(s.path) / ".hoodie" / "archived").exists() or not list(
        (Path(s.path) / ".hoodie" / "archived").iterdir()
    )
    active = _timeline_files(s.path)
    assert not [f for f in active if f.split("_")[0].split(".")[0] in archived], active
    _check_archived(s, archived)
    # The history's rows are Hudi's: the completed action and the completed file's bytes.
    row = pq.read_table(Path(s.path) / result.archive_file).to_pylist()[0]
    assert (row["instantTime"], row["version"]) == (archived[0], 1) and row["action"] in ("commit", "deltacommit")
    assert row["completionTime"] > row["instantTime"] and row["metadata"][:4] == b"Obj\x01"
    # A second archival appends a second layer-0 file and manifest.
    for k in range(3):
        s.upsert([k, 200 + k])
    again = Table.open(s.path, options=ARCHIVE_OPTIONS).archive()
    assert again.archived
    assert "manifest_2" in _history_files(s.path)
    _check_archived(s, archived + [a.split(".")[0] for a in again.archived])


@pytest.mark.parametrize("point", ["after_history_file", "before_version_file", "after_some_deletes"])
def test_archival_on_v9_killed_and_rerun_neither_duplicates_nor_loses(tmp_path: Path, point: str) -> None:
    s = _long_timeline(tmp_path / "t", 9, "MERGE_ON_READ")
    before = [i.time for i in s.table.completed_instants()]
    crash.run_and_kill("crash_archiver.py", s.path, point, json.dumps(ARCHIVE_OPTIONS))
    in_between = [i.time for i in Table.open(s.path).timeline().completed() if i.is_archived]
    _check_archived(s, in_between)  # readers see a consistent table in between
    Table.open(s.path, options=ARCHIVE_OPTIONS).archive()
    archived = [i.time for i in Table.open(s.path).timeline().completed() if i.is_archived]
    assert archived and archived == before[: len(archived)]
    times = (
        pq.read_table(
            [
                Path(s.path) / ".hoodie" / "timeline" / "history" / f
                for f in _history_files(s.path)
                if f.endswith(".parquet")
            ][0]
        )
        .column("instantTime")
        .to_pylist()
    )
    assert len(times) == len(set(times)), "no instant archived twice"
    _check_archived(s, archived)


# -- every service on copies of the v8 fixtures (none has a metadata table) ------------------
#: The v8 fixtures lakeward writes to (the time-based key generator fixture's output format
#: has pattern letters lakeward's writer does not format; `v8_simplekeygen_hivestyle_no_metafields`
#: does not populate meta fields): the same list as the v8/v9 write tests.
V8_FIXTURES = [
    ("cow", "v8_simplekeygen_nonhivestyle_overwritetable"),
    ("mor/avro", "v8_trips_8i1u"),
    ("mor/avro", "v8_trips_8i3d"),
]
FIXTURE_OPTIONS = {
    "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "1",
    "hoodie.keep.max.commits": "2",
    "hoodie.clustering.plan.strategy.small.file.limit": str(100 * 1024 * 1024),
}


@pytest.mark.parametrize(("kind", "name"), V8_FIXTURES)
def test_every_service_on_v8_fixture_copies_agrees_with_hudi_rs(
    fixture_table: Callable[[str, str], str], kind: str, name: str
) -> None:
    path = fixture_table(kind, name)
    table = Table.open(path, options=FIXTURE_OPTIONS)
    data = table.read()
    rows = data.drop_columns([c for c in data.column_names if c.startswith("_hoodie")])
    ordering = table.config.precombine_field
    assert ordering is not None
    first = rows.slice(0, 1)
    position = first.schema.get_field_index(ordering)
    bumped = pa.array([first.column(ordering)[0].as_py() + 1000]).cast(first.schema.field(ordering).type)
    table.upsert(first.set_column(position, ordering, bumped))
    expected = rows.num_rows
    if rows.num_rows > 2:
        table.delete(rows.slice(1, 1))
        expected -= 1

    def agree(step: str) -> None:
        mine, theirs = both_readers(path)
        assert mine == theirs, f"after {step}"
        assert len(mine) == expected, f"after {step}"

    agree("upsert and delete")
    if kind.startswith("mor"):
        instant = table.schedule_compaction(force=True)
        assert instant is not None
        table.run_compaction(instant)
        agree("compaction")
    clustering = table.schedule_clustering()
    if clustering is not None:
        table.run_clustering(clustering)
        agree("clustering")
    table.clean()
    agree("clean")
    archived = table.archive()
    assert archived.archived, "the fixture's older instants go to the LSM history"
    assert Table.open(path).timeline().completed()[0].is_archived
    agree("archival")
