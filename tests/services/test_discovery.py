"""Discovery over real tables: static refs and roots, problems, the per-table cache, pending plans."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.services.discovery import DiscoveryCache, RenewingPool, discover, scan_root
from lakeward.services.model import ServiceAction, TableRef


def _rows(i: int) -> pa.Table:
    return pa.table({"id": [1, 2, 3], "v": [i, i, i]})


def make_table(path: Path, *, mor: bool = False, writes: int = 1, **options: object) -> Table:
    t = Table.create(
        str(path),
        record_key="id",
        table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE",
        options={"hoodie.compact.inline.max.delta.commits": 100, **options},
    )
    for i in range(writes):
        t.upsert(_rows(i))
    return t


def test_static_refs_and_roots_nested(tmp_path: Path) -> None:
    make_table(tmp_path / "static")
    root = tmp_path / "root"
    make_table(root / "a")
    make_table(root / "db" / "b")
    make_table(root / "db" / "deeper" / "c")
    # a table inside a table's folder is not looked for; hidden folders are skipped
    (root / "a" / "nested").mkdir()
    (root / ".hidden").mkdir()
    make_table(root / ".hidden" / "x")
    result = discover([TableRef("static", str(tmp_path / "static"))], [str(root)], DiscoveryCache())
    assert not result.problems
    by_path = {s.ref.path: s for s in result.states}
    assert set(by_path) == {str(tmp_path / p) for p in ("static", "root/a", "root/db/b", "root/db/deeper/c")}
    assert by_path[str(tmp_path / "static")].ref.name == "static"
    assert by_path[str(root / "db" / "b")].ref.name == "root.db.b"
    assert all(len(s.completed) == 1 and s.last_completed for s in result.states)
    assert result.seconds > 0


def test_scan_depth_is_bounded(tmp_path: Path) -> None:
    make_table(tmp_path / "l1" / "l2" / "l3" / "t")
    refs, errors = scan_root(str(tmp_path), max_depth=2)
    assert refs == [] and errors == []
    refs, _ = scan_root(str(tmp_path), max_depth=4)
    assert [r.name for r in refs] == [f"{tmp_path.name}.l1.l2.l3.t"]


def test_static_and_root_table_listed_once(tmp_path: Path) -> None:
    make_table(tmp_path / "t")
    result = discover([TableRef("mine", str(tmp_path / "t"))], [str(tmp_path)])
    assert [s.ref.name for s in result.states] == ["mine"]


def test_a_static_file_uri_and_the_same_table_under_a_root_listed_once(tmp_path: Path) -> None:
    make_table(tmp_path / "t")
    result = discover([TableRef("mine", f"file://{tmp_path / 't'}/")], [str(tmp_path)])
    assert [s.ref.name for s in result.states] == ["mine"]


def test_deleted_and_corrupt_tables_are_problems_others_go_on(tmp_path: Path) -> None:
    make_table(tmp_path / "good")
    make_table(tmp_path / "corrupt")
    (tmp_path / "corrupt" / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=x\n")
    refs = [TableRef(n, str(tmp_path / n)) for n in ("good", "corrupt", "deleted")]
    result = discover(refs, [], DiscoveryCache())
    assert [s.ref.name for s in result.states] == ["good"]
    problems = {p.table.name: p.error for p in result.problems}
    assert set(problems) == {"corrupt", "deleted"}
    assert "hoodie.properties" in problems["corrupt"]
    assert "not a table" in problems["deleted"]


def test_an_instant_time_that_is_no_time_makes_its_table_a_problem_others_go_on(tmp_path: Path) -> None:
    """An instant file named with month 13 (Hudi's timeline takes any digits) made the planner's age
    arithmetic raise a ValueError: every discovery cycle failed, for every table, and the API's
    explain of that table answered 500. Now that table is a problem naming the instant."""
    make_table(tmp_path / "good", mor=True)
    make_table(tmp_path / "bad", mor=True)
    (tmp_path / "bad" / ".hoodie" / "20261301000000000.deltacommit.requested").write_bytes(b"")
    refs = [TableRef(n, str(tmp_path / n)) for n in ("good", "bad")]
    result = discover(refs, [], DiscoveryCache())
    assert [s.ref.name for s in result.states] == ["good"]
    assert [p.table.name for p in result.problems] == ["bad"]
    assert "20261301000000000" in result.problems[0].error


def test_a_discovery_root_that_cannot_be_listed_keeps_its_known_tables_as_problems(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storage down while the root is listed: its tables vanished from the daemon (API 404, pause refused,
    their failing metrics gone) and only the root showed as a problem. Each known table is a problem now."""
    root = tmp_path / "root"
    make_table(root / "a")
    make_table(root / "db" / "b")
    cache = DiscoveryCache()
    assert [s.ref.name for s in discover([], [str(root)], cache).states] == ["root.a", "root.db.b"]
    real = Storage._list

    def down(self: Storage, rel: str, recursive: bool) -> list:  # type: ignore[type-arg]
        raise OSError("AWS Error NETWORK_CONNECTION (injected)")

    monkeypatch.setattr(Storage, "_list", down)
    result = discover([], [str(root)], cache)
    assert result.states == []
    problems = {p.table.name: p.error for p in result.problems}
    assert {"root.a", "root.db.b"} <= set(problems), problems
    assert "NETWORK_CONNECTION" in problems["root.a"]
    assert "NETWORK_CONNECTION" in problems["root"]  # and the root's own listing
    monkeypatch.setattr(Storage, "_list", real)
    assert [s.ref.name for s in discover([], [str(root)], cache).states] == ["root.a", "root.db.b"]


def test_a_discovery_root_that_is_gone_is_a_problem(tmp_path: Path) -> None:
    """Its tables left the daemon without a word (no problem, no log line, ready as before)."""
    root = tmp_path / "root"
    make_table(root / "a")
    cache = DiscoveryCache()
    assert len(discover([], [str(root)], cache).states) == 1
    shutil.rmtree(root)
    result = discover([], [str(root)], cache)
    assert result.states == []
    assert [(p.table.name, "does not exist" in p.error) for p in result.problems] == [("root", True)]


def test_table_deleted_between_cycles(tmp_path: Path) -> None:
    make_table(tmp_path / "root" / "t1")
    make_table(tmp_path / "root" / "t2")
    make_table(tmp_path / "static")
    cache = DiscoveryCache()
    refs = [TableRef("static", str(tmp_path / "static"))]
    assert len(discover(refs, [str(tmp_path / "root")], cache).states) == 3
    shutil.rmtree(tmp_path / "root" / "t1")
    shutil.rmtree(tmp_path / "static")
    result = discover(refs, [str(tmp_path / "root")], cache)
    # a root-discovered table that is gone simply disappears; a configured one is a problem
    assert [s.ref.name for s in result.states] == ["root.t2"]
    assert [p.table.name for p in result.problems] == ["static"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads folders whatever their mode")
def test_unreadable_table_is_a_problem(tmp_path: Path) -> None:
    make_table(tmp_path / "good")
    make_table(tmp_path / "locked")
    hoodie = tmp_path / "locked" / ".hoodie"
    hoodie.chmod(0)
    try:
        refs = [TableRef(n, str(tmp_path / n)) for n in ("good", "locked")]
        result = discover(refs, [], DiscoveryCache())
    finally:
        hoodie.chmod(0o755)
    assert [s.ref.name for s in result.states] == ["good"]
    assert [p.table.name for p in result.problems] == ["locked"]
    assert "ermission" in result.problems[0].error


def test_permission_error_is_a_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same as above whatever the user: the listing fails with EACCES."""
    make_table(tmp_path / "good")
    make_table(tmp_path / "locked")
    real_list = Storage.list_dir

    def list_dir(self: Storage, rel: str = "", recursive: bool = False):  # type: ignore[no-untyped-def]
        if "locked" in self.uri:
            raise PermissionError(13, "Permission denied", self.uri_of(rel))
        return real_list(self, rel, recursive)

    monkeypatch.setattr(Storage, "list_dir", list_dir)
    refs = [TableRef(n, str(tmp_path / n)) for n in ("good", "locked")]
    result = discover(refs, [str(tmp_path)], DiscoveryCache())
    assert [s.ref.name for s in result.states] == ["good"]
    assert {p.table.name for p in result.problems} == {"locked"}
    assert all("Permission denied" in p.error for p in result.problems)


def test_cache_hit_costs_one_listing_and_no_reload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tables = [make_table(tmp_path / f"t{i}", writes=2) for i in range(3)]
    refs = [TableRef(f"t{i}", str(tmp_path / f"t{i}")) for i in range(3)]
    cache = DiscoveryCache()
    first = discover(refs, [], cache)
    assert len(first.states) == 3

    listings: list[str] = []
    parses: list[int] = []
    opens: list[str] = []
    real_list, real_parse, real_open = Storage.list_dir, Timeline.from_file_names.__func__, Table.open.__func__  # type: ignore[attr-defined]

    def counting_list(self: Storage, rel: str = "", recursive: bool = False):  # type: ignore[no-untyped-def]
        listings.append(self.uri_of(rel))
        return real_list(self, rel, recursive)

    def counting_parse(cls, names, *layout):  # type: ignore[no-untyped-def]
        parses.append(1)
        return real_parse(cls, names, *layout)

    def counting_open(cls, path, **kw):  # type: ignore[no-untyped-def]
        opens.append(path)
        return real_open(cls, path, **kw)

    monkeypatch.setattr(Storage, "list_dir", counting_list)
    monkeypatch.setattr(Timeline, "from_file_names", classmethod(counting_parse))
    monkeypatch.setattr(Table, "open", classmethod(counting_open))
    second = discover(refs, [], cache)
    # one listing of each table's timeline, and one of its metadata table's (discovery plans its compaction)
    assert sorted(listings) == sorted(f"{r.path}/.hoodie{mdt}" for r in refs for mdt in ("", "/metadata/.hoodie"))
    assert parses == [] and opens == []
    assert [s for s in second.states] == [s for s in first.states]
    assert cache.hits == 3

    # one table changes: only it is rebuilt (its properties are unchanged: not re-read)
    tables[1].upsert(_rows(9))
    listings.clear()
    parses.clear()
    third = discover(refs, [], cache)
    assert sorted(listings) == sorted(f"{r.path}/.hoodie{mdt}" for r in refs for mdt in ("", "/metadata/.hoodie"))
    assert len(parses) == 2 and opens == []  # its timeline and its metadata table's
    changed = {s.ref.name: s for s in third.states}["t1"]
    assert len(changed.completed) == 3


def test_root_scan_with_cache_does_not_relist_known_tables(tmp_path: Path) -> None:
    for i in range(3):
        make_table(tmp_path / "root" / f"t{i}")
    cache = DiscoveryCache()
    discover([], [str(tmp_path / "root")], cache)
    before = cache.listings
    result = discover([], [str(tmp_path / "root")], cache)
    assert len(result.states) == 3
    assert cache.listings - before == 1 + 3  # the root, then each table's .hoodie


def test_pending_compaction_clean_and_clustering_are_pending_plans(tmp_path: Path) -> None:
    mor = make_table(tmp_path / "mor", mor=True, writes=3)
    compaction = mor.schedule_compaction(force=True)
    assert compaction is not None
    cow = make_table(tmp_path / "cow", writes=3, **{"hoodie.cleaner.commits.retained": 1})
    clean = cow.schedule_clean()
    assert clean is not None
    clu = Table.create(str(tmp_path / "clu"), record_key="id", partition_by="p")
    for i in range(3):
        clu.bulk_insert(pa.table({"id": [i], "p": ["a"], "v": [i]}))
    clustering = clu.schedule_clustering()
    assert clustering is not None
    refs = [TableRef(n, str(tmp_path / n)) for n in ("mor", "cow", "clu")]
    result = discover(refs, [], DiscoveryCache(), workers=1)
    assert not result.problems
    states = {s.ref.name: s for s in result.states}
    [plan] = states["mor"].pending_plans
    assert (plan.action, plan.instant, plan.state) == (ServiceAction.COMPACTION, compaction, "requested")
    assert states["mor"].is_merge_on_read and states["mor"].delta_commits_since_compaction == 3
    [plan] = states["cow"].pending_plans
    assert (plan.action, plan.instant) == (ServiceAction.CLEAN, clean)
    assert states["cow"].writes_since_clean == 3
    [plan] = states["clu"].pending_plans
    assert (plan.action, plan.instant) == (ServiceAction.CLUSTERING, clustering)


def test_pending_write_is_not_a_plan(tmp_path: Path) -> None:
    make_table(tmp_path / "t")
    (tmp_path / "t" / ".hoodie" / "20990101000000000.commit.requested").write_bytes(b"")
    (tmp_path / "t" / ".hoodie" / "20990101000000001.rollback.requested").write_bytes(b"")
    [state] = discover([TableRef("t", str(tmp_path / "t"))], []).states
    assert [i.time for i in state.pending_writes] == ["20990101000000000"]
    assert [(p.action, p.instant) for p in state.pending_plans] == [(ServiceAction.ROLLBACK, "20990101000000001")]


def test_a_table_whose_storage_hangs_holds_up_only_itself(tmp_path: Path) -> None:
    """A read that never returns (a hung mount, a bucket that stops answering; a FIFO stands in for one
    here) stalled every discovery cycle, so no table was served. It is now reported as a problem after
    `load_timeout_s`, the other tables are discovered, and it is not read again while the read hangs."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    make_table(tmp_path / "root" / "good")
    hung = make_table(tmp_path / "root" / "hung")
    properties = Path(hung.path) / ".hoodie" / "hoodie.properties"
    properties.unlink()
    os.mkfifo(properties)
    cache = DiscoveryCache()
    pool = ThreadPoolExecutor(max_workers=4)
    results: list = []

    def cycle() -> None:
        results.append(discover([], [str(tmp_path / "root")], cache, pool=pool, load_timeout_s=0.5))

    try:
        for n in (1, 2):
            runner = threading.Thread(target=cycle, daemon=True)
            runner.start()
            runner.join(60)
            assert not runner.is_alive(), f"discovery cycle {n} hung on the table whose storage hangs"
        first, second = results
        for result in results:
            assert [s.ref.name for s in result.states] == ["root.good"]
            assert [p.table.name for p in result.problems] == ["root.hung"]
        assert "no answer within 0.5s" in first.problems[0].error, first.problems[0].error
        assert "has not returned" in second.problems[0].error, second.problems[0].error
    finally:
        try:
            os.close(os.open(properties, os.O_WRONLY | os.O_NONBLOCK))  # lets the hung read return
        except OSError:
            pass  # no read of it is waiting
        pool.shutdown(wait=True)


def test_hung_tables_as_many_as_the_pool_has_threads_do_not_starve_the_others(tmp_path: Path) -> None:
    """Each hung read keeps its thread (Python cannot stop it). With as many hung tables as the daemon's
    pool has threads (one hung mount holding several tables), every other table's load queued behind
    them and timed out, every cycle: the daemon served no table. The pool now moves later work to fresh
    threads once reads hang (`RenewingPool`)."""
    import threading

    make_table(tmp_path / "root" / "good")
    fifos = []
    for name in ("hung1", "hung2"):
        properties = Path(make_table(tmp_path / "root" / name).path) / ".hoodie" / "hoodie.properties"
        properties.unlink()
        os.mkfifo(properties)
        fifos.append(properties)
    cache = DiscoveryCache()
    pool = RenewingPool(2, "discovery")  # as many threads as hung tables
    results: list = []

    def cycle() -> None:
        results.append(discover([], [str(tmp_path / "root")], cache, pool=pool, load_timeout_s=0.5))

    try:
        for n in (1, 2, 3):
            runner = threading.Thread(target=cycle, daemon=True)
            runner.start()
            runner.join(60)
            assert not runner.is_alive(), f"discovery cycle {n} hung"
        for result in results[1:]:  # the first cycle may queue the good table behind the hung reads
            assert [s.ref.name for s in result.states] == ["root.good"], result.problems
            assert sorted(p.table.name for p in result.problems) == ["root.hung1", "root.hung2"]
        assert threading.active_count() < 20  # fresh threads once per hang, not per cycle
    finally:
        for properties in fifos:
            try:
                os.close(os.open(properties, os.O_WRONLY | os.O_NONBLOCK))  # lets the hung read return
            except OSError:
                pass  # no read of it is waiting
        pool.shutdown(wait=True)


def test_a_table_whose_health_read_hangs_holds_up_only_itself(tmp_path: Path) -> None:
    """The health pass of a cycle is bounded the same way: a table whose scoring does not return (its
    policy lookup blocks here, standing in for a listing of hung storage) gets an error, the others a
    score, and it is not scored again while that call hangs."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from lakeward.core.health import HealthPolicy
    from lakeward.services.discovery import assess_health

    make_table(tmp_path / "root" / "good")
    make_table(tmp_path / "root" / "hung")
    cache = DiscoveryCache()
    states = discover([], [str(tmp_path / "root")], cache).states
    release = threading.Event()

    def policy_for(name: str) -> HealthPolicy:
        if name == "root.hung":
            release.wait(60)
        return HealthPolicy()

    pool = ThreadPoolExecutor(max_workers=4)
    try:
        for expected in ("no answer within 0.5s", "has not returned"):
            health = assess_health(states, lambda ref: {}, policy_for, cache, pool=pool, timeout_s=0.5, max_age_s=0)
            assert health["root.good"].report is not None and health["root.good"].error is None
            assert health["root.hung"].report is None and expected in (health["root.hung"].error or "")
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_a_reused_health_snapshot_ages_with_the_clock(tmp_path: Path) -> None:
    """While a table does not change, its snapshot is reused for up to `health_refresh_s` (300 s): its ages
    (since the last compaction, clean, ...) stood still meanwhile, so the page said "5m ago" of a compaction
    ten minutes old, and age-based findings came up to five minutes late."""
    import datetime as dt

    from lakeward.core.health import HealthPolicy
    from lakeward.services.discovery import assess_health

    table = make_table(tmp_path / "t", mor=True, writes=2)
    planned = table.schedule_compaction(force=True)
    assert planned is not None
    table.run_compaction(planned)
    cache = DiscoveryCache()
    states = discover([TableRef("t", str(tmp_path / "t"))], [], cache).states
    start = dt.datetime.now(dt.UTC)

    def since_compaction(now: dt.datetime) -> float:
        report = assess_health(states, lambda ref: {}, lambda name: HealthPolicy(), cache, now=now)["t"].report
        assert report is not None
        age = report.snapshot.seconds_since_last["compaction"]
        assert age is not None
        return age

    first = since_compaction(start)
    later = since_compaction(start + dt.timedelta(seconds=200))  # the same snapshot, reused
    assert later - first == pytest.approx(200, abs=1)
