"""A writer killed mid-commit leaves readers at the last completed instant; the next write rolls it back.

The killed writer is a subprocess (`scripts/crash_writer.py`) that freezes at a chosen point
of the commit protocol and is then killed with SIGKILL. A failure inside a write (an
exception) must roll the write back at once and re-raise.
"""

from __future__ import annotations

import io
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakeward.core.write.client as client_mod
import lakeward.core.write.plane.local as local_plane_mod
from lakeward.core.file_group.log_file import block_instant_times
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.table import Table
from lakeward.core.timeline import Action, Instant, State, Timeline
from tests.support import crash

# Every test runs writer processes and kills them mid-write (4-10 s each on a loaded 2-core machine).
pytestmark = pytest.mark.slow
CITIES = ["sf", "nyc", "la", "sea"]
N_BASE = 8000


def _batch(ids: range | list[int], city_of: Callable[[int], str], ts: int, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table(
        {
            "id": [f"k{i:06d}" for i in ids],
            "city": [city_of(i) for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": [f"{tag}-{i}" for i in ids],
            "payload": ["x" * 64] * len(ids),
        }
    )


def _base_batch() -> pa.Table:
    return _batch(range(N_BASE), lambda i: CITIES[i % 4], 1, "base")


def _crash_batch() -> pa.Table:
    """Updates of half the rows of every partition, plus inserts into a new partition: 5+ file groups."""
    updates = _batch(range(0, N_BASE, 3), lambda i: CITIES[i % 4], 2, "crashed")
    inserts = _batch(range(N_BASE, N_BASE + 4000), lambda i: "new", 2, "crashed")
    return pa.concat_tables([updates, inserts])


def _recovery_batch() -> pa.Table:
    updates = _batch(range(1, N_BASE, 4), lambda i: CITIES[i % 4], 3, "recovered")
    inserts = _batch(range(N_BASE + 10000, N_BASE + 10100), lambda i: "rec", 3, "recovered")
    return pa.concat_tables([updates, inserts])


def _expected_after_recovery() -> dict[str, str]:
    rows = {f"k{i:06d}": f"base-{i}" for i in range(N_BASE)}
    for i in range(1, N_BASE, 4):
        rows[f"k{i:06d}"] = f"recovered-{i}"
    for i in range(N_BASE + 10000, N_BASE + 10100):
        rows[f"k{i:06d}"] = f"recovered-{i}"
    return rows


# -- observation helpers -------------------------------------------------------------------
def lakeward_rows(path: Path) -> dict[str, str]:
    table = Table.open(str(path)).read(columns=["id", "v"])
    rows = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert len(rows) == table.num_rows, "lakeward returned duplicate keys"
    return rows


def _hudi_table(hudi_table: Any) -> pa.Table:
    """All rows hudi-rs reads (a snapshot), as one Arrow table."""
    batches = hudi_table.read()
    if not batches:
        return hudi_table.get_schema_with_meta_fields().empty_table()
    return pa.Table.from_batches(batches)


def hudi_rows(path: Path) -> dict[str, str]:
    hudi_table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    table = _hudi_table(hudi_table)
    rows = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert len(rows) == table.num_rows, "hudi-rs returned duplicate keys"
    return rows


def timeline(path: Path) -> Timeline:
    return Timeline.load(Table.open(str(path)).storage)


def data_files(path: Path) -> dict[str, str]:
    """Base files outside `.hoodie/`: relative path -> instant time in the name."""
    out = {}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            parsed = parse_base_file_name(name)
            if parsed is not None:
                out[os.path.relpath(os.path.join(root, name), path)] = parsed.instant_time
    return out


def markers(path: Path, instant_time: str) -> list[str]:
    folder = path / ".hoodie" / ".temp" / instant_time
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def timeline_files_of(path: Path, instant_time: str) -> list[str]:
    return sorted(p.name for p in (path / ".hoodie").iterdir() if p.name.startswith(instant_time))


def rollback_metadata(path: Path, instant: Instant) -> dict[str, Any]:
    """The HoodieRollbackMetadata record of a completed rollback instant."""
    data = (path / ".hoodie" / instant.file_name).read_bytes()
    records = list(fastavro.reader(io.BytesIO(data)))
    assert len(records) == 1 and isinstance(records[0], dict)
    return records[0]


@dataclass
class Snapshot:
    completed: list[str]
    rows: dict[str, str]
    files: dict[str, str]


def snapshot(path: Path) -> Snapshot:
    rows = lakeward_rows(path)
    assert hudi_rows(path) == rows, "lakeward and hudi-rs disagree before the test even starts"
    return Snapshot([i.file_name for i in timeline(path).completed()], rows, data_files(path))


# -- the killed writer ---------------------------------------------------------------------
def run_and_kill(path: Path, point: str, batch_file: Path, timeout: float = 60.0) -> None:
    """Start the crash writer, wait until it reports `point`, SIGKILL it."""
    crash.run_and_kill("crash_writer.py", path, point, str(batch_file), timeout=timeout)


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with two completed commits, and the crash batch as a Parquet file."""
    root = tmp_path_factory.mktemp("crash-template")
    path = root / "table"
    table = Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    table.upsert(_base_batch())
    table.upsert(_batch(range(3, N_BASE, 8), lambda i: CITIES[i % 4], 1, "base"))  # same values: a 2nd commit
    pq.write_table(_crash_batch(), root / "crash.parquet")
    return path


@pytest.fixture
def table_path(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "table"
    shutil.copytree(template, path)
    return path


@pytest.fixture
def crash_batch(template: Path) -> Path:
    return template.parent / "crash.parquet"


# -- kills at points of the commit protocol ------------------------------------------------
POINTS = {
    # point: (state of the pending instant, data files of it on disk, markers of it)
    "after_requested": (State.REQUESTED, lambda n: n == 0, lambda n: n == 0),
    "after_inflight": (State.INFLIGHT, lambda n: n == 0, lambda n: n == 0),
    "marker_without_file": (State.INFLIGHT, lambda n: n == 1, lambda n: n == 2),
    # the first base file's rows written, not its footer: nothing under a data file name yet
    "mid_base_file": (State.INFLIGHT, lambda n: n == 0, lambda n: n == 1),
    "after_two_files": (State.INFLIGHT, lambda n: n == 2, lambda n: n == 2),
    "before_complete": (State.INFLIGHT, lambda n: n >= 5, lambda n: n >= 5),
}


def _assert_killed_state(path: Path, before: Snapshot, point: str) -> str:
    """Readers see the last completed instant; one pending instant; returns its time."""
    state, files_ok, markers_ok = POINTS[point]
    tl = timeline(path)
    assert [i.file_name for i in tl.completed()] == before.completed
    pending = tl.pending()
    assert len(pending) == 1, f"expected one pending instant, got {pending}"
    failed = pending[0]
    assert failed.action is Action.COMMIT and failed.state is state
    assert failed.time > before.completed[-1].split(".")[0]

    written = [p for p, t in data_files(path).items() if t == failed.time]
    assert files_ok(len(written)), f"{point}: {len(written)} data file(s) of the failed instant: {written}"
    assert markers_ok(len(markers(path, failed.time))), f"{point}: markers {markers(path, failed.time)}"
    for rel in written:  # every data file of the failed write has its marker
        assert any(m.startswith(Path(rel).name) or Path(rel).name in m for m in markers(path, failed.time))

    assert lakeward_rows(path) == before.rows
    assert hudi_rows(path) == before.rows
    assert Table.open(str(path)).read(as_of=before.completed[-1].split(".")[0]).num_rows == len(before.rows)
    return failed.time


def _assert_rolled_back(path: Path, before: Snapshot, failed_time: str, failed_files: set[str]) -> None:
    """After the next write: a rollback lists the failed instant, its traces are gone, rows right."""
    tl = timeline(path)
    assert tl.pending() == [], f"pending instants left: {tl.pending()}"
    completed = tl.completed()
    writes = [i for i in completed if i.action is not Action.ROLLBACK]
    assert [i.file_name for i in writes[:-1]] == before.completed
    new_commit = writes[-1]
    rollbacks = [i for i in completed if i.action is Action.ROLLBACK]
    assert len(rollbacks) >= 1
    ours = [r for r in rollbacks if rollback_metadata(path, r)["commitsRollback"] == [failed_time]]
    assert len(ours) == 1, f"no single rollback instant lists {failed_time}: {rollbacks}"
    rollback = ours[0]
    assert failed_time < rollback.time < new_commit.time

    meta = rollback_metadata(path, rollback)
    assert meta["instantsRollback"] == [{"commitTime": failed_time, "action": "commit"}]
    deleted = {os.path.relpath(f, path) for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"]}
    assert failed_files <= deleted, f"rollback metadata misses {failed_files - deleted}"
    assert all(parse_base_file_name(Path(f).name).instant_time == failed_time for f in deleted)
    assert meta["totalFilesDeleted"] == len(deleted)
    assert all(not pm["failedDeleteFiles"] for pm in meta["partitionMetadata"].values())

    assert timeline_files_of(path, failed_time) == [], "the failed instant is still on the timeline"
    assert not (path / ".hoodie" / ".temp" / failed_time).exists(), "the failed instant's markers remain"
    leftovers = [p for p, t in data_files(path).items() if t == failed_time]
    assert leftovers == [], f"data files of the failed instant remain: {leftovers}"
    for rel in before.files:
        assert (path / rel).exists(), f"the rollback deleted {rel}, a file of a completed commit"

    expected = _expected_after_recovery()
    assert lakeward_rows(path) == expected
    assert hudi_rows(path) == expected


@pytest.mark.parametrize("point", list(POINTS))
def test_writer_killed_mid_commit(table_path: Path, crash_batch: Path, point: str) -> None:
    before = snapshot(table_path)
    run_and_kill(table_path, point, crash_batch)
    failed_time = _assert_killed_state(table_path, before, point)
    failed_files = {p for p, t in data_files(table_path).items() if t == failed_time}

    result = Table.open(str(table_path)).upsert(_recovery_batch())
    assert result.instant_time > failed_time
    _assert_rolled_back(table_path, before, failed_time, failed_files)


def test_two_writers_killed_in_a_row(table_path: Path, crash_batch: Path) -> None:
    """A writer killed before it even needed to roll back, then one killed mid-write too."""
    before = snapshot(table_path)
    run_and_kill(table_path, "after_two_files", crash_batch)
    first = _assert_killed_state(table_path, before, "after_two_files")
    first_files = {p for p, t in data_files(table_path).items() if t == first}
    # The second crash writer rolls the first back, then dies with two files of its own written.
    run_and_kill(table_path, "after_two_files", crash_batch)
    tl = timeline(table_path)
    pending = tl.pending()
    assert len(pending) == 1 and pending[0].time != first
    assert timeline_files_of(table_path, first) == []
    assert not any(t == first for t in data_files(table_path).values())
    assert lakeward_rows(table_path) == before.rows
    assert hudi_rows(table_path) == before.rows
    second = pending[0].time
    second_files = {p for p, t in data_files(table_path).items() if t == second}
    assert len(second_files) == 2

    Table.open(str(table_path)).upsert(_recovery_batch())
    _assert_rolled_back(table_path, before, second, second_files)
    first_rollbacks = [
        r
        for r in timeline(table_path).completed()
        if r.action is Action.ROLLBACK and rollback_metadata(table_path, r)["commitsRollback"] == [first]
    ]
    assert len(first_rollbacks) == 1
    assert not (table_path / ".hoodie" / ".temp" / first).exists()
    assert first_files.isdisjoint(data_files(table_path))


@pytest.mark.parametrize("rollback_point", ["rollback_files_deleted", "rollback_before_complete"])
def test_writer_killed_during_rollback(table_path: Path, crash_batch: Path, rollback_point: str) -> None:
    """The rollback of a failed write is itself interrupted; the next writer finishes the job."""
    before = snapshot(table_path)
    run_and_kill(table_path, "after_two_files", crash_batch)
    failed = _assert_killed_state(table_path, before, "after_two_files")
    failed_files = {p for p, t in data_files(table_path).items() if t == failed}

    run_and_kill(table_path, rollback_point, crash_batch)
    # Whatever the rollback got through, readers still see the last completed commit.
    assert [i.file_name for i in timeline(table_path).completed()] == before.completed
    assert lakeward_rows(table_path) == before.rows
    assert hudi_rows(table_path) == before.rows

    Table.open(str(table_path)).upsert(_recovery_batch())
    _assert_rolled_back(table_path, before, failed, failed_files)


# -- exceptions inside a write -------------------------------------------------------------
class InjectedFailure(RuntimeError):
    pass


def _failing_on_call(fn: Callable[..., Any], nth: int, exc: BaseException, seen: list[str]) -> Callable[..., Any]:
    lock = threading.Lock()
    calls = [0]

    def wrapper(ctx: Any, task: Any) -> Any:
        with lock:
            calls[0] += 1
            n = calls[0]
            seen.append(ctx.instant_time)
        if n == nth:
            raise exc
        return fn(ctx, task)

    return wrapper


@pytest.mark.parametrize(
    ("parallelism", "exc"),
    [(1, InjectedFailure("task 2 failed")), (4, InjectedFailure("task 2 failed")), (1, KeyboardInterrupt())],
    ids=["sequential", "threads", "keyboard-interrupt"],
)
def test_exception_mid_write_rolls_back_and_reraises(
    table_path: Path, monkeypatch: pytest.MonkeyPatch, parallelism: int, exc: BaseException
) -> None:
    before = snapshot(table_path)
    timeline_before = {p.name for p in (table_path / ".hoodie").iterdir()}
    seen: list[str] = []
    monkeypatch.setattr(
        local_plane_mod, "write_file_group", _failing_on_call(local_plane_mod.write_file_group, 2, exc, seen)
    )
    table = Table.open(str(table_path), options={"hoodie.upsert.shuffle.parallelism": parallelism})
    with pytest.raises(type(exc)) as info:
        table.upsert(_crash_batch())
    assert info.value is exc
    failed = seen[0]

    tl = timeline(table_path)
    assert tl.pending() == [], f"pending instants left: {tl.pending()}"
    assert [i.file_name for i in tl.completed() if i.action is not Action.ROLLBACK] == before.completed
    assert data_files(table_path) == before.files, "data files were left behind or lost"
    assert timeline_files_of(table_path, failed) == []
    assert not (table_path / ".hoodie" / ".temp" / failed).exists()
    new_meta = {p.name for p in (table_path / ".hoodie").iterdir()} - timeline_before
    rollbacks = [i for i in tl.completed() if i.action is Action.ROLLBACK]
    assert len(rollbacks) == 1 and rollback_metadata(table_path, rollbacks[0])["commitsRollback"] == [failed]
    assert all(name.startswith(rollbacks[0].time) for name in new_meta), new_meta
    assert lakeward_rows(table_path) == before.rows
    assert hudi_rows(table_path) == before.rows

    monkeypatch.undo()
    table.upsert(_recovery_batch())  # the same Table object keeps working
    assert lakeward_rows(table_path) == _expected_after_recovery()
    assert hudi_rows(table_path) == _expected_after_recovery()


@pytest.mark.parametrize("target", ["transition_to_inflight", "complete"])
def test_exception_in_the_protocol_rolls_back(table_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Failures right after requested, and at the publishing step itself."""
    before = snapshot(table_path)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise InjectedFailure(f"{target} failed")

    monkeypatch.setattr(client_mod, target, boom)
    with pytest.raises(InjectedFailure):
        Table.open(str(table_path)).upsert(_crash_batch())
    monkeypatch.undo()
    tl = timeline(table_path)
    assert tl.pending() == []
    assert [i.file_name for i in tl.completed() if i.action is not Action.ROLLBACK] == before.completed
    assert data_files(table_path) == before.files
    assert not [p for p in (table_path / ".hoodie" / ".temp").iterdir()], "markers left behind"
    assert lakeward_rows(table_path) == before.rows
    assert hudi_rows(table_path) == before.rows


# -- merge-on-read: a killed deltacommit ----------------------------------------------------
@pytest.fixture(scope="module")
def mor_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A merge-on-read table whose file groups already have log files (two completed deltacommits)."""
    root = tmp_path_factory.mktemp("crash-mor-template")
    path = root / "table"
    table = Table.create(
        str(path), record_key="id", partition_by="city", ordering_field="ts", table_type="MERGE_ON_READ"
    )
    table.upsert(_base_batch())
    table.upsert(_batch(range(3, N_BASE, 8), lambda i: CITIES[i % 4], 1, "base"))  # updates only: log files
    assert any(s.log_files for s in table.file_slices())
    return path


@pytest.fixture
def mor_table_path(mor_template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "mor-table"
    shutil.copytree(mor_template, path)
    return path


def log_files_of(path: Path, instant_time: str) -> set[str]:
    """Log files whose blocks were written by `instant_time` (log names carry the BASE instant)."""
    storage = Table.open(str(path)).storage
    out = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            if parse_log_file_name(name) is None:
                continue
            rel = os.path.relpath(os.path.join(root, name), path)
            if block_instant_times(storage, rel) == {instant_time}:
                out.add(rel)
    return out


MOR_POINTS = {
    # point: (log files of the failed instant on disk, its markers)
    "after_first_log_file": (lambda n: n == 1, lambda n: n == 1),
    "marker_without_file": (lambda n: n == 1, lambda n: n == 2),
    "before_complete": (lambda n: n == 4, lambda n: n >= 5),
}


@pytest.mark.parametrize("point", list(MOR_POINTS))
def test_merge_on_read_writer_killed_mid_deltacommit(mor_table_path: Path, crash_batch: Path, point: str) -> None:
    path = mor_table_path
    before = snapshot(path)
    all_before = {p for p in _all_data_files(path)}
    run_and_kill(path, point, crash_batch)

    # Killed: readers (lakeward and hudi-rs) see the last completed instant.
    tl = timeline(path)
    assert [i.file_name for i in tl.completed()] == before.completed
    [failed] = tl.pending()
    assert failed.action is Action.DELTA_COMMIT and failed.state is State.INFLIGHT
    logs_ok, markers_ok = MOR_POINTS[point]
    failed_logs = log_files_of(path, failed.time)
    assert logs_ok(len(failed_logs)), f"{point}: log files of the failed instant: {failed_logs}"
    written_markers = markers(path, failed.time)
    assert markers_ok(len(written_markers)), written_markers
    for rel in failed_logs:  # every log file of the failed write has its APPEND marker
        assert f"{rel}.marker.APPEND" in written_markers
    assert lakeward_rows(path) == before.rows
    assert hudi_rows(path) == before.rows
    failed_files = (_all_data_files(path) - all_before) | failed_logs

    # The next write rolls the failed deltacommit back: its log (and base) files are deleted.
    result = Table.open(str(path)).upsert(_recovery_batch())
    assert result.instant_time > failed.time
    tl = timeline(path)
    assert tl.pending() == []
    [rollback] = [i for i in tl.completed() if i.action is Action.ROLLBACK]
    assert failed.time < rollback.time < result.instant_time
    meta = rollback_metadata(path, rollback)
    assert meta["instantsRollback"] == [{"commitTime": failed.time, "action": "deltacommit"}]
    deleted = {os.path.relpath(f, path) for pm in meta["partitionMetadata"].values() for f in pm["successDeleteFiles"]}
    assert deleted == failed_files
    from_failed = {
        os.path.relpath(f, path)
        for pm in meta["partitionMetadata"].values()
        for f in pm["logFilesFromFailedCommit"] or {}
    }
    assert from_failed == failed_logs
    assert timeline_files_of(path, failed.time) == []
    assert not (path / ".hoodie" / ".temp" / failed.time).exists()
    assert failed_files.isdisjoint(_all_data_files(path)), "files of the failed instant remain"
    assert all_before <= _all_data_files(path), "the rollback deleted a file of a completed instant"
    expected = _expected_after_recovery()
    assert lakeward_rows(path) == expected
    assert hudi_rows(path) == expected


def test_merge_on_read_rollback_killed_then_resumed(mor_table_path: Path, crash_batch: Path) -> None:
    path = mor_table_path
    before = snapshot(path)
    run_and_kill(path, "after_first_log_file", crash_batch)
    [failed] = timeline(path).pending()
    failed_logs = log_files_of(path, failed.time)
    run_and_kill(path, "rollback_files_deleted", crash_batch)  # the log file is gone, the instant not yet
    assert not any((path / rel).exists() for rel in failed_logs)
    assert lakeward_rows(path) == before.rows
    assert hudi_rows(path) == before.rows

    Table.open(str(path)).upsert(_recovery_batch())
    tl = timeline(path)
    assert tl.pending() == []
    rollbacks = [i for i in tl.completed() if i.action is Action.ROLLBACK]
    assert [rollback_metadata(path, r)["commitsRollback"] for r in rollbacks] == [[failed.time]]
    assert timeline_files_of(path, failed.time) == []
    assert lakeward_rows(path) == _expected_after_recovery()
    assert hudi_rows(path) == _expected_after_recovery()


def _all_data_files(path: Path) -> set[str]:
    """Base and log files outside `.hoodie/` (relative paths)."""
    out = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            if parse_base_file_name(name) is not None or parse_log_file_name(name) is not None:
                out.add(os.path.relpath(os.path.join(root, name), path))
    return out
