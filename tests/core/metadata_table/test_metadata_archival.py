"""The metadata table's own archival (v8/v9), as Hudi 1.x's archiver runs on it (issue 17).

After many writes (and the data table's archival) the metadata table's active timeline stays
bounded: its old delta commits, compactions and cleans move to its own LSM history, never
past its latest compaction nor the data table's earliest active commit. After every step both
readers (hudi-rs lists through the metadata table) give the model's rows, the `files` partition
matches storage and the record index places every key. A writer killed during the metadata
archival leaves a readable table, and the next one finishes the archival.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.metadata_table.archival import data_table_barrier
from lakeward.core.metadata_table.compaction import last_metadata_compaction, mdt_timeline
from lakeward.core.table_services.archival import instants_to_archive
from lakeward.core.table_services.metadata_compaction import MetadataCompactionService
from lakeward.core.table_version import TimelineLayout, rules_for_layout
from lakeward.core.timeline import Action, Timeline
from lakeward.core.timeline.archived import read_archived_entries
from lakeward.core.timeline.lsm_history import load_archived_instants
from tests.core.metadata_table.test_record_index import _check
from tests.support import crash
from tests.support.keyed_rows import Model, part_of
from tests.support.keyed_rows import batch as _batch

HISTORY = rules_for_layout(TimelineLayout.V2).history_folder or ""
#: Small keep counts (the metadata table keeps one more of each), eager metadata compaction and clean.
OPTIONS = {
    "hoodie.index.type": "RECORD_INDEX",
    "hoodie.keep.min.commits": 2,
    "hoodie.keep.max.commits": 3,
    "hoodie.metadata.compact.max.delta.commits": 3,
    "hoodie.metadata.cleaner.commits.retained": 2,
}


def _indexed(path: str, version: int, table_type: str, options: dict[str, object]) -> tuple[Table, Model]:
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(24)}
    table = Table.open(path, options=options)
    table.insert(_batch(model))
    table.initialize_metadata_table()
    return Table.open(path, options=options), model


def _step(table: Table, model: Model, gone: set[str], rng: random.Random, step: int) -> None:
    keys = rng.sample(sorted(model), 4) + [f"k{100 + step}"]
    batch = {k: (part_of(k), step + 2, rng.randrange(1000)) for k in keys}
    table.upsert(_batch(batch))
    model |= batch
    if step % 3 == 2:
        deleted = {k: model.pop(k) for k in rng.sample(sorted(model), 2)}
        table.delete(_batch(deleted))
        gone |= set(deleted)


def _history(path: str) -> list[str]:
    """The metadata table's archived instants: its LSM history (v8/v9) or archived log files (v6)."""
    table = Table.open(path)
    mdt = metadata_storage(table.storage)
    if table.version.lsm_history:
        return [i.time for i in load_archived_instants(mdt, HISTORY)]
    done = {str(e["commitTime"]) for e in read_archived_entries(mdt, "archived") if e["actionState"] == "COMPLETED"}
    return sorted(done)


@pytest.mark.parametrize(("version", "table_type"), [(9, "MERGE_ON_READ"), (8, "COPY_ON_WRITE"), (6, "MERGE_ON_READ")])
def test_the_metadata_timeline_stays_bounded(tmp_path: Path, version: int, table_type: str):
    path = str(tmp_path / "t")
    table, model = _indexed(path, version, table_type, OPTIONS)
    rng = random.Random(version)
    gone: set[str] = set()
    sizes = []
    for step in range(24):
        _step(table, model, gone, rng, step)
        table.archive()  # the data table's archival lets the metadata table's go further
        mdt = mdt_timeline(table.storage)
        sizes.append(len(mdt.instants))
        if step % 4 == 3:
            _check(path, model, gone)
        # never past the latest metadata compaction, nor the data table's earliest active instant
        last = last_metadata_compaction(mdt)
        history = _history(path)
        barrier = data_table_barrier(Timeline.load(table.storage, table.version.timeline_layout))  # the active one
        assert all(t < last.time for t in history) if last else not history
        assert barrier is None or all(t < barrier for t in history)
    _check(path, model, gone)
    mdt = mdt_timeline(table.storage)
    history = _history(path)
    # 24 upserts, 8 deletes, metadata compactions and cleans: the active timeline stays short
    assert len(history) > 30, history
    assert max(sizes[-8:]) <= 16, sizes
    # the active timeline is a suffix of the full one: history and active timeline do not overlap
    assert not set(history) & {i.time for i in mdt.instants}
    assert max(history) < min(i.time for i in mdt.instants)
    if version == 6:  # Hudi 0.x's archived log files, whose entries say what each instant was
        return
    assert any(t.startswith("0" * 14) for t in history)  # the initialisation delta commits went first
    full = Timeline.load(metadata_storage(table.storage), TimelineLayout.V2).with_history(
        metadata_storage(table.storage), HISTORY
    )
    assert len(full.completed(Action.DELTA_COMMIT)) >= 24 + 8


def test_the_metadata_compaction_action_archives_the_metadata_table(tmp_path: Path):
    """The daemon's `metadata_compaction` action archives after its compaction and clean."""
    path = str(tmp_path / "t")
    # writes keep 20-30 commits (their inline services archive nothing) and never compact the metadata table
    quiet = {**OPTIONS, "hoodie.metadata.compact.max.delta.commits": 1000}
    table, model = _indexed(
        path, 9, "COPY_ON_WRITE", {**quiet, "hoodie.keep.min.commits": 20, "hoodie.keep.max.commits": 30}
    )
    rng = random.Random(5)
    gone: set[str] = set()
    for step in range(10):
        _step(table, model, gone, rng, step)
    assert not _history(path)  # never compacted: nothing archived
    service = MetadataCompactionService(Table.open(path, options=quiet).service_context("metadata_compaction"))
    first = service.schedule(force=True)
    assert first is not None
    run = service.execute(first)
    # only the initialisation delta commits are older than the data table's first active commit
    assert run.archived is not None and run.archived.archived
    assert all(e.startswith("0" * 14) for e in run.archived.archived), run.archived.archived
    assert set(_history(path)) == {e.split(".")[0] for e in run.archived.archived}
    Table.open(path, options=quiet).archive()  # the data table's (bounded by the metadata compaction)
    _step(table, model, gone, rng, 10)
    second = service.schedule(force=True)
    assert second is not None
    before = set(_history(path))
    run = service.execute(second)
    assert run.archived is not None and len(run.archived.archived) > 5, run.archived
    assert set(_history(path)) - before == {e.split(".")[0] for e in run.archived.archived}
    assert "archived" in service.report(run).detail
    _check(path, model, gone)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_history_file", "after_some_deletes"])
def test_killed_during_the_metadata_archival_is_finished_by_the_next_writer(tmp_path: Path, point: str):
    path = str(tmp_path / "t")
    keep = {**OPTIONS, "hoodie.keep.min.commits": 20, "hoodie.keep.max.commits": 30}  # nothing archived yet
    table, model = _indexed(path, 9, "MERGE_ON_READ", keep)
    rng = random.Random(7)
    gone: set[str] = set()
    for step in range(14):
        _step(table, model, gone, rng, step)
    Table.open(path, options=OPTIONS).archive()  # the data table's archival
    assert not _history(path)
    rows = {"k200": (part_of("k200"), 50, 1)}
    payload = [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in rows.items()]
    crash.run_and_kill("crash_archiver.py", path, point, json.dumps(OPTIONS), json.dumps(payload))
    model |= rows  # the data commit completed before the metadata table's services ran
    archived = _history(path)
    assert archived, "the killed archival wrote its history"
    active = {i.time for i in mdt_timeline(Table.open(path).storage).instants}
    assert set(archived) & active, "killed before every archived instant's timeline files were deleted"
    _check(path, model, gone)  # readable as it is
    table = Table.open(path, options=OPTIONS)
    _step(table, model, gone, rng, 20)  # the next writer's metadata archival finishes it
    active = {i.time for i in mdt_timeline(table.storage).instants}
    assert not set(_history(path)) & active
    _check(path, model, gone)


def test_data_archival_keeps_commits_that_completed_after_the_metadata_compaction(tmp_path: Path):
    """Hudi bounds the data table's archival by completion time (`findInstantsModifiedAfterByCompletionTime`):
    a commit requested before the latest metadata compaction but completed after it (a concurrent
    writer) has its metadata delta commit in the latest metadata slice, so it stays active, and so
    does everything after it."""
    path = str(tmp_path / "t")
    big = {**OPTIONS, "hoodie.keep.min.commits": 20, "hoodie.keep.max.commits": 30}
    table, model = _indexed(path, 9, "COPY_ON_WRITE", big)
    rng = random.Random(3)
    for step in range(8):
        _step(table, model, set(), rng, step)
    compaction = last_metadata_compaction(mdt_timeline(table.storage))
    assert compaction is not None
    timeline = Timeline.load(table.storage, TimelineLayout.V2)
    before = [i for i in timeline.completed_writes() if i.time < compaction.time]
    planned = instants_to_archive(table.storage, timeline, 2, 3)
    assert before[1] in planned  # archivable by its instant time and completion
    # the second commit completed (as a concurrent writer's would) after the metadata compaction
    late = before[1]
    folder = Path(path) / ".hoodie" / "timeline"
    old = folder / f"{late.time}_{late.completion_time}.{late.action.value}"
    old.rename(folder / f"{late.time}_{'9' * 17}.{late.action.value}")  # completed after everything
    planned = instants_to_archive(table.storage, Timeline.load(table.storage, TimelineLayout.V2), 2, 3)
    assert planned and all(i.time < late.time for i in planned), [str(i) for i in planned]
