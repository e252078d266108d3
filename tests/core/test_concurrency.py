"""Two writers on one table (in-process lock, the default): conflicts fail cleanly, disjoint writes both land.

The interleaving is made deterministic by wrapping the first writer's engine: right after
it has written its data files (the engine's "write file groups" stage) and before it
checks for conflicts and completes, the second writer runs a whole upsert.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fastavro
import hudi
import pyarrow as pa
import pytest

import lakeward.core.file_group.slice_keys as slice_keys_module
import lakeward.core.metadata_table.bootstrap as bootstrap
import lakeward.core.write.client as client_module
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConcurrentWriteError, SharedLockRequiredError
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.table import Table
from lakeward.core.timeline import Action, Timeline
from lakeward.core.timeline.transitions import read_commit_metadata
from lakeward.core.write.client import WriteResult
from tests.support.zookeeper import hudi_lock_options

CITIES = ["sf", "nyc"]


def _rows(ids: Sequence[int], city: str, ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": [f"{city}-{i:04d}" for i in ids],
            "city": [city] * len(ids),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": [f"{tag}-{i}" for i in ids],
        }
    )


# -- observation helpers -------------------------------------------------------------------
def lakeward_rows(path: Path) -> dict[str, str]:
    table = Table.open(str(path)).read(columns=["id", "v"])
    rows = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert len(rows) == table.num_rows, "lakeward returned duplicate keys"
    return rows


def hudi_rows(path: Path) -> dict[str, str]:
    hudi_table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    batches = hudi_table.read()
    if not batches:
        return {}
    table = pa.Table.from_batches(batches)
    rows = dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))
    assert len(rows) == table.num_rows, "hudi-rs returned duplicate keys"
    return rows


def timeline(path: Path) -> Timeline:
    return Timeline.load(Table.open(str(path)).storage)


def data_files(path: Path) -> dict[str, str]:
    out = {}
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            parsed = parse_base_file_name(name)
            if parsed is not None:
                out[os.path.relpath(os.path.join(root, name), path)] = parsed.instant_time
    return out


def assert_commits_intact(path: Path) -> None:
    """No pending instant; every file a completed commit lists exists; every data file is committed."""
    table = Table.open(str(path))
    tl = timeline(path)
    assert tl.pending() == [], f"pending instants left: {tl.pending()}"
    for instant in tl.completed_writes():
        for stat in read_commit_metadata(table.storage, instant).write_stats():
            assert (path / stat.path).is_file(), f"completed {instant} lists {stat.path}, which is gone"
    committed = tl.completed_write_times()
    orphans = {p: t for p, t in data_files(path).items() if t not in committed}
    assert orphans == {}, f"data files of no completed commit: {orphans}"


def _rolled_back(path: Path, rollback: Any) -> list[str]:
    """The instants a completed rollback instant lists as rolled back."""
    data = (path / ".hoodie" / rollback.file_name).read_bytes()
    (record,) = list(fastavro.reader(io.BytesIO(data)))
    assert isinstance(record, dict)
    return list(record["commitsRollback"])


def file_group_of(path: Path, key: str) -> tuple[str, str]:
    table = Table.open(str(path)).read(columns=["_hoodie_record_key", "_hoodie_partition_path", "_hoodie_file_name"])
    for row in table.to_pylist():
        if row["_hoodie_record_key"] == key:
            parsed = parse_base_file_name(row["_hoodie_file_name"])
            assert parsed is not None
            return row["_hoodie_partition_path"], parsed.file_id
    raise AssertionError(f"{key} not in the table")


# -- the seam ------------------------------------------------------------------------------
class _InterleavingEngine(Engine):
    """Delegates to the writer's engine; after the data files are written, runs `between` once."""

    name = "interleaving"

    def __init__(self, inner: Engine, between: Callable[[], Any]):
        self.inner = inner
        self.between = between
        self.ran = False

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any], description: str = "") -> list[Any]:
        result = self.inner.map(fn, items, description)
        if description == "write file groups" and not self.ran:
            self.ran = True
            self.between()
        return result


def interleave(first: Table, between: Callable[[], Any]) -> _InterleavingEngine:
    """Make `first`'s next write run `between` after writing files, before conflict check and completion."""
    client = first._writer(write=True)
    engine = _InterleavingEngine(client.engine, between)
    client.engine = engine
    return engine


@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    path = tmp_path / "table"
    table = Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    for city in CITIES:
        table.upsert(_rows(range(50), city, 1, "base"))
    return path


def _base_rows() -> dict[str, str]:
    return {f"{c}-{i:04d}": f"base-{i}" for c in CITIES for i in range(50)}


# -- conflicts -----------------------------------------------------------------------------
def test_second_writer_completes_first_on_same_file_group(table_path: Path) -> None:
    first, second = Table.open(str(table_path)), Table.open(str(table_path))
    group = file_group_of(table_path, "sf-0001")
    results: list[WriteResult] = []
    losers: list[str] = []

    def second_writer_runs() -> None:
        losers.extend(i.time for i in timeline(table_path).pending_writes())
        results.append(second.upsert(_rows([1, 2], "sf", 3, "second")))

    engine = interleave(first, second_writer_runs)
    completed_before = [i.file_name for i in timeline(table_path).completed_writes()]

    with pytest.raises(ConcurrentWriteError) as info:
        first.upsert(_rows([1, 3], "sf", 2, "first"))
    assert engine.ran and len(results) == 1 and len(losers) == 1
    winner, loser = results[0].instant_time, losers[0]
    message = str(info.value)
    assert winner in message, f"the message {message!r} does not name the conflicting instant {winner}"
    assert group[1] in message, f"the message {message!r} does not name the file group {group[1]}"

    # The winner's commit is the only new one; the loser left no trace.
    tl = timeline(table_path)
    assert [i.file_name for i in tl.completed_writes()] == [*completed_before, f"{winner}.commit"]
    assert tl.pending() == []
    assert sorted(p.name for p in (table_path / ".hoodie").iterdir() if p.name.startswith(loser)) == []
    leftovers = [p for p, t in data_files(table_path).items() if t == loser]
    assert leftovers == [], f"the losing write left data files: {leftovers}"
    assert not (table_path / ".hoodie" / ".temp" / loser).exists(), "the loser's markers remain"
    rollbacks = [i for i in tl.completed() if i.action is Action.ROLLBACK]
    assert all(_rolled_back(table_path, r) == [loser] for r in rollbacks)
    assert not [p for p in (table_path / ".hoodie" / ".temp").iterdir()], "markers left behind"
    assert_commits_intact(table_path)

    expected = _base_rows() | {"sf-0001": "second-1", "sf-0002": "second-2"}
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected

    # The loser can retry and then wins.
    first.upsert(_rows([1, 3], "sf", 4, "retry"))
    expected |= {"sf-0001": "retry-1", "sf-0003": "retry-3"}
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected


def test_conflict_on_delete_of_same_file_group(table_path: Path) -> None:
    first, second = Table.open(str(table_path)), Table.open(str(table_path))
    interleave(first, lambda: second.upsert(_rows([5], "nyc", 3, "second")))
    with pytest.raises(ConcurrentWriteError) as info:
        first.delete(keys=["nyc-0006"])
    assert "nyc" in str(info.value)
    assert_commits_intact(table_path)
    expected = _base_rows() | {"nyc-0005": "second-5"}
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected


# -- no conflict ---------------------------------------------------------------------------
def test_writers_on_different_partitions_both_succeed(table_path: Path) -> None:
    first, second = Table.open(str(table_path)), Table.open(str(table_path))
    results: list[WriteResult] = []
    interleave(first, lambda: results.append(second.upsert(_rows([1, 2], "nyc", 2, "second"))))

    result = first.upsert(_rows([1, 2], "sf", 2, "first"))
    assert len(results) == 1
    tl = timeline(table_path)
    completed = {i.time for i in tl.completed_writes()}
    assert {result.instant_time, results[0].instant_time} <= completed
    assert_commits_intact(table_path)
    for written in result.files_written:
        assert (table_path / written).is_file(), f"the first writer's file {written} is gone"
    expected = _base_rows() | {
        "sf-0001": "first-1",
        "sf-0002": "first-2",
        "nyc-0001": "second-1",
        "nyc-0002": "second-2",
    }
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected


def test_inserts_into_new_partitions_both_succeed(table_path: Path) -> None:
    first, second = Table.open(str(table_path)), Table.open(str(table_path))
    interleave(first, lambda: second.insert(_rows(range(10), "la", 1, "second")))
    first.insert(_rows(range(10), "sea", 1, "first"))
    assert_commits_intact(table_path)
    expected = (
        _base_rows()
        | {f"la-{i:04d}": f"second-{i}" for i in range(10)}
        | {f"sea-{i:04d}": f"first-{i}" for i in range(10)}
    )
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected


# -- real threads --------------------------------------------------------------------------
ROUNDS = 12


def test_threads_on_disjoint_partitions_lose_no_update(table_path: Path) -> None:
    """Two writers in two threads, each updating its own partition many times."""
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(city: str) -> None:
        table = Table.open(str(table_path))
        try:
            start.wait()
            for r in range(1, ROUNDS + 1):
                table.upsert(_rows(range(0, 50, 5), city, 1 + r, f"round{r}"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(city,)) for city in CITIES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a writer hung"
    assert errors == [], f"writers failed: {errors!r}"

    tl = timeline(table_path)
    assert len(tl.completed_writes()) == len(CITIES) + 2 * ROUNDS
    assert_commits_intact(table_path)
    expected = _base_rows() | {f"{c}-{i:04d}": f"round{ROUNDS}-{i}" for c in CITIES for i in range(0, 50, 5)}
    assert lakeward_rows(table_path) == expected
    assert hudi_rows(table_path) == expected


def test_a_write_whose_timeline_a_service_archived_meanwhile_checks_it_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer lists the timeline without the lock, so the daemon's compaction and archival can run
    between its listing and its integrity check: the plan of a compaction that was pending in the
    listing is gone (archived) when the check reads it. The write checks a fresh listing and lands."""
    options = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"}
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", options=options)
    table.upsert(_rows(range(4), "sf", 1, "a"))
    table.upsert(_rows(range(2), "sf", 2, "b"))
    compaction = Table.open(path, options=options).schedule_compaction(force=True)
    assert compaction is not None
    stale = Timeline.load(table.storage)
    assert [i.time for i in stale.pending()] == [compaction]
    Table.open(path, options=options).run_compaction(compaction)
    for ts in range(3, 9):
        Table.open(path, options=options).upsert(_rows(range(2), "sf", ts, f"c{ts}"))
    assert f"{compaction}.commit" in Table.open(path, options=options).archive().archived
    loads = []

    class ListedBeforeTheServices(Timeline):
        @classmethod
        def load(cls, storage: Any, layout: Any = None) -> Timeline:
            loads.append(1)
            return stale if len(loads) == 1 else Timeline.load(storage, layout)

    monkeypatch.setattr(client_module, "Timeline", ListedBeforeTheServices)
    Table.open(path, options=options).upsert(_rows([1], "sf", 20, "last"))
    monkeypatch.undo()
    rows = {r["id"]: r["v"] for r in Table.open(path).read(columns=["id", "v"]).to_pylist()}
    assert rows == {"sf-0000": "c8-0", "sf-0001": "last-1", "sf-0002": "a-2", "sf-0003": "a-3"}


def _schema_table(path: Path, table_type: str, version: int) -> None:
    Table.create(
        str(path),
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
    )
    Table.open(str(path)).upsert(_rows([1], "sf", 1, "base"))


def _rows_with_x(path: Path) -> dict[str, tuple[str, str | None]]:
    return {r["id"]: (r["v"], r["x"]) for r in Table.open(str(path)).read(columns=["id", "v", "x"]).to_pylist()}


@pytest.mark.parametrize("version", [6, 8])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_column_another_writer_added_meanwhile_stays_in_the_schema(
    tmp_path: Path, table_type: str, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writer A adds a column and completes; writer B (a later instant, other file groups: no conflict)
    took the table's schema before and completes last. Readers take the schema of the latest write,
    B's: the column and A's committed values vanished from every read. B commits the union."""
    path = tmp_path / "t"
    _schema_table(path, table_type, version)
    a_wrote, b_wrote, a_done = threading.Event(), threading.Event(), threading.Event()
    real = client_module.reconcile_markers

    def paced(storage: Any, instant_time: str, files: Any) -> Any:  # after the files, before completing
        if threading.current_thread().name == "A":
            a_wrote.set()
            assert b_wrote.wait(30)
        else:
            b_wrote.set()
            assert a_done.wait(30)
        return real(storage, instant_time, files)

    monkeypatch.setattr(client_module, "reconcile_markers", paced)
    errors: list[BaseException] = []

    def writer_a() -> None:
        try:
            Table.open(str(path)).upsert(_rows([7], "nyc", 1, "new").append_column("x", pa.array(["X7"])))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            a_done.set()

    def writer_b() -> None:
        assert a_wrote.wait(30)
        try:
            Table.open(str(path)).upsert(_rows([1], "sf", 2, "again"))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=writer_a, name="A"), threading.Thread(target=writer_b, name="B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    monkeypatch.undo()
    assert errors == []
    assert Table.open(str(path)).schema().names[-1] == "x"
    assert _rows_with_x(path) == {"sf-0001": ("again-1", None), "nyc-0007": ("new-7", "X7")}
    theirs = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(path)).build().read())
    assert {r["id"]: r["x"] for r in theirs.select(["id", "x"]).to_pylist()} == {"sf-0001": None, "nyc-0007": "X7"}
    Table.open(str(path)).upsert(_rows([7], "nyc", 3, "later").append_column("x", pa.array(["X8"])))
    assert _rows_with_x(path) == {"sf-0001": ("again-1", None), "nyc-0007": ("later-7", "X8")}


@pytest.mark.parametrize("version", [6, 8])
def test_a_column_added_under_a_later_instant_completed_meanwhile_is_refused(tmp_path: Path, version: int) -> None:
    """Writer A adds a column; writer B, a later instant without it, completes first. B's schema stays
    the table's (the latest write's), so A's column would vanish: A is refused and its retry lands."""
    path = tmp_path / "t"
    _schema_table(path, "MERGE_ON_READ", version)
    first, second = Table.open(str(path)), Table.open(str(path))
    interleave(first, lambda: second.upsert(_rows([1], "sf", 2, "again")))
    with pytest.raises(ConcurrentWriteError, match="retry the write"):
        first.upsert(_rows([7], "nyc", 1, "new").append_column("x", pa.array(["X7"])))
    assert "x" not in Table.open(str(path)).schema().names
    assert_commits_intact(path)
    Table.open(str(path)).upsert(_rows([7], "nyc", 1, "new").append_column("x", pa.array(["X7"])))
    assert _rows_with_x(path) == {"sf-0001": ("again-1", None), "nyc-0007": ("new-7", "X7")}


def test_a_column_type_another_writer_committed_meanwhile_conflicts(tmp_path: Path) -> None:
    """Both writers added the same column with types that do not merge: the one completing last is refused."""
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    Table.open(str(path)).upsert(_rows([1], "sf", 1, "base"))
    first, second = Table.open(str(path)), Table.open(str(path))
    interleave(first, lambda: second.upsert(_rows([7], "nyc", 1, "n").append_column("x", pa.array(["text"]))))
    with pytest.raises(ConcurrentWriteError, match="schema"):
        first.upsert(_rows([1], "sf", 2, "a").append_column("x", pa.array([5], pa.int64())))
    assert Table.open(str(path)).schema().field("x").type == pa.string()
    assert_commits_intact(path)


@pytest.mark.parametrize("promoted_by_the_later_instant", [True, False])
def test_a_column_type_another_writer_promoted_meanwhile(tmp_path: Path, promoted_by_the_later_instant: bool) -> None:
    """One writer widens `n` from int to double, the other writes ints; the later instant completes
    first. Readers take the latest instant's schema: ints under a double schema land (read as doubles);
    doubles under an int schema would be unreadable, so that write is refused, and its retry lands."""
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    Table.open(str(path)).upsert(_rows([1], "sf", 1, "base").append_column("n", pa.array([1], pa.int32())))
    ints = _rows([2], "sf", 1, "i").append_column("n", pa.array([2], pa.int32()))
    doubles = _rows([7], "nyc", 1, "d").append_column("n", pa.array([7.5], pa.float64()))
    earlier, later = Table.open(str(path)), Table.open(str(path))
    ours, theirs = (ints, doubles) if promoted_by_the_later_instant else (doubles, ints)
    interleave(earlier, lambda: later.upsert(theirs))  # the later instant completes first
    if promoted_by_the_later_instant:
        earlier.upsert(ours)
    else:
        with pytest.raises(ConcurrentWriteError, match="retry the write"):
            earlier.upsert(ours)
        assert Table.open(str(path)).schema().field("n").type == pa.int32()
        assert_commits_intact(path)
        Table.open(str(path)).upsert(ours)
    assert Table.open(str(path)).schema().field("n").type == pa.float64()
    got = {r["id"]: r["n"] for r in Table.open(str(path)).read(columns=["id", "n"]).to_pylist()}
    assert got == {"sf-0001": 1.0, "sf-0002": 2.0, "nyc-0007": 7.5}
    assert_commits_intact(path)


@pytest.mark.parametrize("version", [8, 9])
def test_a_compaction_completing_after_a_write_added_a_column_keeps_it(
    tmp_path: Path, version: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 8+ a compaction is planned beside a pending write, so its instant is the later one. It took
    the table's schema when it started; the write added a column and completed while it ran; the
    compaction then completed with the older schema, the latest instant's, so the column vanished."""
    path = tmp_path / "t"
    _schema_table(path, "MERGE_ON_READ", version)
    Table.open(str(path)).upsert(_rows([1], "sf", 2, "log"))  # a log for the compaction to fold
    wrote, go, done = threading.Event(), threading.Event(), threading.Event()
    real = client_module.reconcile_markers

    def paced(storage: Any, instant_time: str, files: Any) -> Any:
        if threading.current_thread().name == "writer":
            wrote.set()
            assert go.wait(30)
        return real(storage, instant_time, files)

    monkeypatch.setattr(client_module, "reconcile_markers", paced)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            Table.open(str(path)).upsert(_rows([7], "nyc", 1, "new").append_column("x", pa.array(["X7"])))
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer, name="writer")
    thread.start()
    assert wrote.wait(30)
    table = Table.open(str(path))
    plan = table.schedule_compaction(force=True)
    assert plan is not None

    def the_write_completes() -> None:
        go.set()
        assert done.wait(30)

    engine = _InterleavingEngine(table._writer(service="compaction").engine, the_write_completes)
    engine_description = "compact "

    def map_then_write(fn: Any, items: Any, description: str = "") -> Any:
        result = engine.inner.map(fn, items, description)
        if description.startswith(engine_description) and not engine.ran:
            engine.ran = True
            engine.between()
        return result

    engine.map = map_then_write  # type: ignore[method-assign]
    table.run_compaction(plan, engine=engine)
    thread.join(30)
    monkeypatch.undo()
    assert errors == [] and engine.ran
    assert Table.open(str(path)).schema().names[-1] == "x"
    assert _rows_with_x(path) == {"sf-0001": ("log-1", None), "nyc-0007": ("new-7", "X7")}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8])
def test_a_later_instant_completing_before_an_earlier_one_plans_is_a_conflict(
    tmp_path: Path, version: int, table_type: str
) -> None:
    """Writer A takes its instant time, then is delayed before it plans (a pause, a slow listing); writer B
    takes a later instant and completes on the same file group. A's plan then starts from B's slice, but
    its new slice would be named with the earlier instant, which readers order below B's: A's update was
    acknowledged and never seen. As Hudi counts every instant completed since the writer started, B is a
    conflict for A: A fails and leaves no trace, and its retry lands."""
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", ordering_field="ts", table_type=table_type, table_version=version).upsert(
        pa.table({"id": ["a", "b"], "ts": [0, 0], "v": ["init", "init"]})
    )
    first, second = Table.open(str(path)), Table.open(str(path))
    client = first._writer(write=True)
    execute = client._execute
    finished: list[str] = []

    def delayed(*args: Any, **kwargs: Any) -> Any:
        if not finished:
            finished.append(second.upsert(pa.table({"id": ["b"], "ts": [0], "v": ["B"]})).instant_time)
        return execute(*args, **kwargs)

    client._execute = delayed  # type: ignore[method-assign]
    with pytest.raises(ConcurrentWriteError, match=finished[0] if finished else "conflicts"):
        first.upsert(pa.table({"id": ["a"], "ts": [0], "v": ["A"]}))
    assert finished
    expected = {"a": "init", "b": "B"}
    assert lakeward_rows(path) == expected
    assert hudi_rows(path) == expected
    assert_commits_intact(path)
    first.upsert(pa.table({"id": ["a"], "ts": [1], "v": ["A"]}))
    assert lakeward_rows(path) == hudi_rows(path) == {"a": "A", "b": "B"}


def test_a_log_file_rolled_back_while_a_writer_reads_it_is_a_retriable_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v6 merge-on-read: a log file carries its slice's base instant, so writer C lists writer B's log
    while B is in flight. B fails and its rollback deletes the log; C, reading the slice's keys, finds
    it gone. C fails with a ConcurrentWriteError naming the file (not a bare FileNotFoundError), leaves
    nothing behind, and its retry lands."""
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": [0, 0, 0], "v": ["init"] * 3}))
    table.upsert(pa.table({"id": ["a"], "ts": [1], "v": ["a1"]}))  # a log: later writes append
    b_written, b_fail, c_listed, c_go = (threading.Event() for _ in range(4))
    reconcile = client_module.reconcile_markers

    def b_fails_after_writing(*args: Any) -> Any:
        if threading.current_thread().name == "B":
            b_written.set()
            assert b_fail.wait(60)
            raise RuntimeError("writer B fails after writing its log")
        return reconcile(*args)

    block_keys = slice_keys_module._file_block_keys

    def c_pauses_reading(*args: Any) -> Any:
        if threading.current_thread().name == "C" and not c_listed.is_set():
            c_listed.set()
            assert c_go.wait(60)
        return block_keys(*args)

    monkeypatch.setattr(client_module, "reconcile_markers", b_fails_after_writing)
    monkeypatch.setattr(slice_keys_module, "_file_block_keys", c_pauses_reading)
    errors: dict[str, BaseException] = {}

    def run(name: str, key: str) -> None:
        try:
            Table.open(str(path)).upsert(pa.table({"id": [key], "ts": [5], "v": [name]}))
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
            errors[name] = exc

    b = threading.Thread(target=run, args=("B", "b"), name="B")
    b.start()
    assert b_written.wait(60)
    c = threading.Thread(target=run, args=("C", "c"), name="C")
    c.start()
    assert c_listed.wait(60)
    b_fail.set()
    b.join(60)
    c_go.set()
    c.join(60)
    assert isinstance(errors["B"], RuntimeError)
    assert isinstance(errors.get("C"), ConcurrentWriteError), errors.get("C")
    assert ".log." in str(errors["C"]) and "retry" in str(errors["C"])
    assert_commits_intact(path)
    assert lakeward_rows(path) == hudi_rows(path) == {"a": "a1", "b": "init", "c": "init"}
    Table.open(str(path)).upsert(pa.table({"id": ["c"], "ts": [6], "v": ["C"]}))
    assert lakeward_rows(path) == hudi_rows(path) == {"a": "a1", "b": "init", "c": "C"}


@pytest.mark.parametrize("version", [6, 9])
def test_a_first_write_whose_metadata_table_another_process_builds_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    """Two processes make a table's first write under the in-process lock, and both build the metadata
    table. The one that finds the other's finished meanwhile gets SharedLockRequiredError (what to
    configure), not an internal metadata-table error; the table holds the other's write and stays writable."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", table_version=version)
    build = bootstrap.initialize_metadata_table
    other = f"from lakeward import Table; import pyarrow as pa; Table.open({path!r}).upsert(pa.table({{'id': ['o']}}))"

    def racing(storage: Any, config: Any, **kwargs: Any) -> Any:
        subprocess.run([sys.executable, "-c", other], check=True, timeout=120)  # the other process, meanwhile
        return build(storage, config, **kwargs)

    monkeypatch.setattr(bootstrap, "initialize_metadata_table", racing)
    with pytest.raises(SharedLockRequiredError, match="hoodie.write.lock.provider"):
        Table.open(path).upsert(pa.table({"id": ["a"]}))
    monkeypatch.setattr(bootstrap, "initialize_metadata_table", build)
    Table.open(path).upsert(pa.table({"id": ["a"]}))
    assert sorted(Table.open(path).read().column("id").to_pylist()) == ["a", "o"]


@contextmanager
def _frozen_writer(path: Path, ids: Sequence[str]) -> Iterator[str]:
    """An upsert of `ids` in another process, its log written, frozen before it completes (alive: no
    other writer rolls it back); killed on exit. Yields its instant."""
    import pyarrow.parquet as pq

    from tests.support import crash

    batch_file = path.parent / "frozen.parquet"
    pq.write_table(pa.table({"id": list(ids), "ts": [5] * len(ids), "v": ["B"] * len(ids)}), batch_file)
    script = str(crash.SCRIPTS / "crash_writer.py")
    b = subprocess.Popen(
        [sys.executable, script, str(path), "before_complete", str(batch_file)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert b.stdout is not None and b.stdout.readline().startswith("REACHED")
        [pending] = [i.time for i in Table.open(str(path)).timeline().pending()]
        yield pending
    finally:
        b.kill()
        b.wait()
        if b.stdout is not None:
            b.stdout.close()


def _pause_first_call(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> tuple[threading.Event, threading.Event]:
    """Wrap `module.name`: its first call waits; (set when it got there, set to let it go on)."""
    reached, go = threading.Event(), threading.Event()
    original = getattr(module, name)

    def paused(*args: Any, **kwargs: Any) -> Any:
        if not reached.is_set():
            reached.set()
            assert go.wait(60)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, paused)
    return reached, go


def _roll_back_in_another_process(path: Path, instant: str, options: dict[str, str] | None = None) -> None:
    code = f"from lakeward import Table; Table.open({str(path)!r}, options={options or {}!r}).rollback({instant!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run `fn` in a thread; the list gets its result or its exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def _table_with_a_log(path: Path) -> None:
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.upsert(pa.table({"id": ["a", "b", "c"], "ts": [0, 0, 0], "v": ["init"] * 3}))
    table.upsert(pa.table({"id": ["a"], "ts": [1], "v": ["a1"]}))  # a log file


@pytest.mark.zookeeper
def test_a_log_file_another_process_rolled_back_while_a_writer_reads_it_is_a_retriable_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, zookeeper_server: Any
) -> None:
    """The same across processes under the ZooKeeper lock: the writer's check for an instant that began
    or completed meanwhile was served the timeline its operation had cached, which a change made in
    this process refreshes but another process's does not; it saw nothing and let a MissingFileError
    through (a CorruptTableError: "damage", not "retry"). Found by a report-only exploration: two
    writer processes updating the same keys, conflicting writes rolled back."""
    path = tmp_path / "t"
    shared = hudi_lock_options(zookeeper_server.hosts, f"/vanished-log-{tmp_path.name}")
    _table_with_a_log(path)
    with _frozen_writer(path, ["b"]) as b_instant:
        listed, go = _pause_first_call(monkeypatch, slice_keys_module, "_file_block_keys")
        c, errors = _in_thread(
            lambda: Table.open(str(path), options=shared).upsert(pa.table({"id": ["c"], "ts": [6], "v": ["C"]}))
        )
        assert listed.wait(60), errors
    _roll_back_in_another_process(path, b_instant, shared)  # B's writer is gone: its log goes
    go.set()
    c.join(60)
    assert len(errors) == 1 and isinstance(errors[0], ConcurrentWriteError), errors
    assert ".log." in str(errors[0]) and "retry" in str(errors[0])
    assert_commits_intact(path)
    assert lakeward_rows(path) == hudi_rows(path) == {"a": "a1", "b": "init", "c": "init"}
    Table.open(str(path), options=shared).upsert(pa.table({"id": ["c"], "ts": [6], "v": ["C"]}))
    assert lakeward_rows(path) == hudi_rows(path) == {"a": "a1", "b": "init", "c": "C"}


def test_a_read_beside_a_rollback_that_removes_a_log_it_listed_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """v6 merge-on-read: a snapshot read lists the log of a write in flight (its name carries the slice's
    base instant) and opens it to find its blocks; a rollback in another process deletes it meanwhile.
    The read failed with MissingFileError (a CorruptTableError: "damage") although no committed row
    was lost; it now reads again once the timeline moved, and gives the committed rows. Found by a
    report-only exploration (readers beside writer processes whose conflicting writes roll back)."""
    import lakeward.core.file_group.reader as reader_module

    path = tmp_path / "t"
    _table_with_a_log(path)
    with _frozen_writer(path, ["b"]) as b_instant:
        listed, go = _pause_first_call(monkeypatch, reader_module, "visible_log_blocks")
        reader, results = _in_thread(lambda: Table.open(str(path)).read())
        assert listed.wait(60), results
    _roll_back_in_another_process(path, b_instant)
    go.set()
    reader.join(60)
    [got] = results
    assert isinstance(got, pa.Table), got
    assert {r["id"]: r["v"] for r in got.to_pylist()} == {"a": "a1", "b": "init", "c": "init"}
