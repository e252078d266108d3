"""A table service completes its instant only while it still holds the ZooKeeper table lock, and the
table's completion scope wraps the completion alone (not the work before it).

A ZooKeeper lock is lost while held when the session expires (a paused process, a partition); the
session is expired here on the real server, the way ZooKeeper's own tests do it, once the service holds
the lock and its completion is underway. Expected rows come from the input batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import LockError
from lakeward.core.metadata_table.services import run_metadata_table_services
from lakeward.core.table_services.namespace import ServiceNamespace
from lakeward.core.timeline import Action, State
from tests.interop.test_hudi_rs_mor_writes import hudi_read
from tests.support.zookeeper import expire_client_session, hudi_lock_options

pytestmark = pytest.mark.zookeeper

ROWS = {i: "old" for i in range(10)} | {1: "new", 2: "new"}


def _mor_table(path: Path, options: dict[str, str]) -> Table:
    """Version 9 merge-on-read with the metadata table, one base file and one log file to compact."""
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        options=options,
        table_version=9,
    )
    table.upsert(pa.table({"id": list(range(10)), "part": ["a"] * 10, "ts": [0] * 10, "v": ["old"] * 10}))
    table.upsert(pa.table({"id": [1, 2], "part": ["a", "a"], "ts": [1, 1], "v": ["new", "new"]}))
    return table


def _rows(path: Path) -> dict[int, str]:
    return _as_dict(Table.open(str(path)).read(columns=["id", "v"]))


def _hudi_rs_rows(path: Path) -> dict[int, str]:
    """What hudi-rs reads (it lists through the metadata table on version 9)."""
    return _as_dict(pa.Table.from_batches(hudi_read(str(path))))


def _as_dict(data: pa.Table) -> dict[int, str]:
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def test_a_compaction_whose_lock_is_lost_once_completing_is_not_completed(tmp_path: Path, zookeeper_server) -> None:
    options = hudi_lock_options(zookeeper_server.hosts, "/lakeward/locks")
    path = tmp_path / "t"
    table = _mor_table(path, options)
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    lock = table.service_context("compaction").lock
    entered: list[str] = []

    @contextmanager
    def expire_the_session(instant_time: str) -> Iterator[None]:
        entered.append(instant_time)
        expire_client_session(lock._client, zookeeper_server.hosts)  # type: ignore[attr-defined]
        yield

    table.completion_scope = expire_the_session
    with pytest.raises(LockError, match="lost"):
        table.run_compaction(instant)
    assert entered == [instant]
    table.close()

    reopened = Table.open(str(path), options=options)
    assert reopened.timeline().state_of(instant, Action.COMPACTION) is State.INFLIGHT  # not completed
    assert _rows(path) == ROWS
    reopened.run_compaction(instant)  # the next run completes the plan
    assert reopened.timeline().state_of(instant, Action.COMPACTION) is State.COMPLETED
    assert _rows(path) == ROWS
    assert _hudi_rs_rows(path) == ROWS
    reopened.close()


@dataclass
class MetadataCompaction:
    """A version 9 table with a planned metadata-table compaction."""

    path: Path
    table: Table
    service: ServiceNamespace[Any]
    instant: str


@pytest.fixture
def metadata_compaction(tmp_path: Path, zookeeper_server) -> Iterator[MetadataCompaction]:
    options = hudi_lock_options(zookeeper_server.hosts, "/lakeward/locks")
    path = tmp_path / "t"
    table = _mor_table(path, options)
    service = table.services["metadata_compaction"]
    instant = service.schedule(force=True)
    assert instant is not None
    yield MetadataCompaction(path, table, service, instant)
    table.close()


def test_the_metadata_compaction_enters_its_completion_scope_once_its_base_files_are_written(
    metadata_compaction: MetadataCompaction,
) -> None:
    """A stop while the metadata table's new base files are written must still cancel the run: the
    completion scope (where the daemon stops interrupting) starts at the instant's completion."""
    path, table, compaction, instant = (
        metadata_compaction.path,
        metadata_compaction.table,
        metadata_compaction.service,
        metadata_compaction.instant,
    )
    mdt_timeline = path / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    seen: list[tuple[bool, bool]] = []

    def base_files_of(instant_time: str) -> list[Path]:
        return [p for p in (path / ".hoodie" / "metadata").rglob(f"*_{instant_time}.hfile")]

    @contextmanager
    def observe(instant_time: str) -> Iterator[None]:
        completed = any(
            p.name.startswith(f"{instant_time}_") and p.name.endswith(".commit") for p in mdt_timeline.iterdir()
        )
        seen.append((bool(base_files_of(instant_time)), completed))
        yield

    table.completion_scope = observe
    result = compaction.execute(instant)
    assert result.compaction.base_files
    assert seen == [(True, False)]  # entered once: base files written, instant not yet completed
    assert base_files_of(instant)
    assert _rows(path) == ROWS
    assert _hudi_rs_rows(path) == ROWS


def test_a_metadata_compaction_stopped_at_its_completion_is_run_again_to_completion(
    metadata_compaction: MetadataCompaction,
) -> None:
    """The daemon refuses a stopped run when it enters the completion scope: the new base files are
    written, the instant stays inflight, readers see the table as before, and the next run completes it."""
    path, table, compaction, instant = (
        metadata_compaction.path,
        metadata_compaction.table,
        metadata_compaction.service,
        metadata_compaction.instant,
    )

    class Stopped(Exception):
        pass

    @contextmanager
    def refuse(instant_time: str) -> Iterator[None]:
        raise Stopped(instant_time)
        yield

    table.completion_scope = refuse
    with pytest.raises(Stopped):
        compaction.execute(instant)
    table.completion_scope = None
    assert compaction.pending() == [instant]
    assert _rows(path) == ROWS
    assert _hudi_rs_rows(path) == ROWS
    again = compaction.execute(instant)
    assert again.compaction.base_files and compaction.pending() == []
    assert _rows(path) == ROWS
    assert _hudi_rs_rows(path) == ROWS


# -- housekeeping under the table lock: archival, savepoints, restore, the metadata table's services --


@contextmanager
def session_expired_once_locked(table: Table, zookeeper_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The next time the table's lock is taken, its ZooKeeper session expires right after (once): the
    lock is held, then lost before the operation's irreversible step. Yields the count of expiries."""
    lock = table.service_context("savepoint").lock
    acquire = lock._acquire  # type: ignore[attr-defined]
    expired: list[int] = []

    def acquire_then_expire(timeout_s: float) -> bool:
        acquired = acquire(timeout_s)
        if acquired and not expired:
            expired.append(1)
            expire_client_session(lock._client, zookeeper_server.hosts)  # type: ignore[attr-defined]
        return acquired

    monkeypatch.setattr(lock, "_acquire", acquire_then_expire)
    yield expired
    monkeypatch.undo()


def _data_timeline_files(path: Path) -> list[str]:
    """The data table's timeline: active instants and LSM history."""
    return [f for f in _timeline_files(path) if f.startswith("timeline/")]


def _timeline_files(path: Path) -> list[str]:
    """Every file of the table's `.hoodie` (the active timeline, history, metadata table), relative."""
    hoodie = path / ".hoodie"
    return sorted(str(p.relative_to(hoodie)) for p in hoodie.rglob("*") if p.is_file() and ".lock" not in p.name)


@pytest.fixture
def zk_table(tmp_path: Path, zookeeper_server) -> Iterator[tuple[Path, Table, dict[str, str]]]:
    """A version 9 merge-on-read table under the ZooKeeper lock, with a few commits to archive."""
    options = hudi_lock_options(zookeeper_server.hosts, "/lakeward/locks") | {
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
    }
    path = tmp_path / "t"
    table = _mor_table(path, options)
    for ts in range(2, 6):
        table.upsert(pa.table({"id": [1, 2], "part": ["a", "a"], "ts": [ts, ts], "v": ["new", "new"]}))
    yield path, table, options
    table.close()


def test_a_savepoint_whose_lock_is_lost_writes_nothing(zk_table, zookeeper_server, monkeypatch) -> None:
    path, table, _ = zk_table
    first = min(table.timeline().completed_write_times())
    before = _timeline_files(path)
    with session_expired_once_locked(table, zookeeper_server, monkeypatch) as expired:
        with pytest.raises(LockError, match="lost"):
            table.savepoint(first)
    assert expired == [1]
    assert _timeline_files(path) == before and table.savepoints() == []
    assert table.savepoint(first) == first  # the next attempt, under a new session, savepoints
    with session_expired_once_locked(table, zookeeper_server, monkeypatch):
        with pytest.raises(LockError, match="lost"):
            table.delete_savepoint(first)
    assert table.savepoints() == [first]


def test_an_archival_whose_lock_is_lost_moves_nothing(zk_table, zookeeper_server, monkeypatch) -> None:
    path, table, _ = zk_table
    before = _data_timeline_files(path)
    with session_expired_once_locked(table, zookeeper_server, monkeypatch) as expired:
        with pytest.raises(LockError, match="lost"):
            table.archive()
    assert expired == [1]
    assert _data_timeline_files(path) == before  # nothing archived (its metadata compaction stays inflight)
    assert _rows(path) == ROWS and _hudi_rs_rows(path) == ROWS
    assert table.archive().archived  # the next run archives
    assert _rows(path) == ROWS and _hudi_rs_rows(path) == ROWS


def test_a_restore_whose_lock_is_lost_undoes_nothing(zk_table, zookeeper_server, monkeypatch) -> None:
    path, table, _ = zk_table
    first = min(table.timeline().completed_write_times())
    table.savepoint(first)
    before = _timeline_files(path)
    with session_expired_once_locked(table, zookeeper_server, monkeypatch) as expired:
        with pytest.raises(LockError, match="lost"):
            table.restore(first)
    assert expired == [1]
    assert _timeline_files(path) == before
    assert _rows(path) == ROWS and _hudi_rs_rows(path) == ROWS
    table.restore(first)  # the next attempt restores
    assert _rows(path) == dict.fromkeys(range(10), "old")


def _completed_metadata_compactions(path: Path) -> list[str]:
    timeline = path / ".hoodie" / "metadata" / ".hoodie" / "timeline"
    return sorted(p.name for p in timeline.iterdir() if p.name.endswith(".commit"))


def test_the_metadata_services_pass_completes_no_compaction_once_its_lock_is_lost(
    zk_table, zookeeper_server, monkeypatch
) -> None:
    """The writer's inline pass of the metadata table's services (`run_metadata_table_services`)."""
    path, table, _ = zk_table
    ctx = table.service_context("metadata_compaction")
    before = _completed_metadata_compactions(path)
    with session_expired_once_locked(table, zookeeper_server, monkeypatch) as expired:
        with pytest.raises(LockError, match="lost"):
            run_metadata_table_services(ctx.storage, ctx.lock, ctx.write_config, force=True)
    assert expired == [1]
    assert _completed_metadata_compactions(path) == before  # planned and written, not completed
    assert _rows(path) == ROWS and _hudi_rs_rows(path) == ROWS
    again = run_metadata_table_services(ctx.storage, ctx.lock, ctx.write_config, force=True)
    assert again is not None and again.compactions  # the next pass completes it
    assert len(_completed_metadata_compactions(path)) > len(before)
    assert _rows(path) == ROWS and _hudi_rs_rows(path) == ROWS
