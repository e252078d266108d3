"""Priorities and fairness: groups of tables share the replica's runs by their priorities, within
their max_concurrent_runs, and a table whose health score is below `scheduling.starving_score` gets
the next slot. The order itself (`order_fairly`, pure) and the real daemon (real tables under two
discovery roots, the in-process coordinator, the local engine)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.services.claims import InProcessCoordinator, OwnerInfo
from lakeward.services.daemon import Daemon
from lakeward.services.fairness import FairShareLedger, Served, Share, order_fairly
from lakeward.services.model import ACTION_PRIORITY, ServiceAction, TableRef, WorkItem
from lakeward.services.settings import ConfigurationError, load_settings
from tests.services.test_daemon import wait_for
from tests.services.test_runner import GatedEngine, concurrency, item, make_runner, mor_table


def _item(table: str, since: str = "20260101000000000", action: ServiceAction = ServiceAction.COMPACTION) -> WorkItem:
    return WorkItem(ACTION_PRIORITY[action], since, TableRef(table, f"/t/{table}"), action)


def test_order_gives_groups_runs_in_proportion_to_their_priorities() -> None:
    items = [_item(f"a{i}") for i in range(12)] + [_item(f"b{i}") for i in range(12)]
    shares = {
        i.table.name: Share(group=i.table.name[0], group_priority=3 if i.table.name[0] == "a" else 1) for i in items
    }
    groups = [i.table.name[0] for i in order_fairly(items, shares)]
    assert "".join(groups[:12]) == "abaaabaaabaa"  # 9 to 3
    # what was started before counts: a group far ahead waits until the other caught up
    behind = order_fairly(items, shares, Served(groups={"a": 2.0, "b": 0.0}))
    assert "".join(i.table.name[0] for i in behind[:5]) == "bbaba"


def test_order_within_a_group_by_action_then_table_turn_then_age() -> None:
    items = [
        _item("x", "20260101000000001"),
        _item("x", "20260101000000002"),
        _item("y", "20260101000000009"),
        _item("y", "20260101000000003", ServiceAction.CLEAN),
    ]
    assert [(i.table.name, i.action.value) for i in order_fairly(items)] == [
        ("y", "clean"),
        ("x", "compaction"),
        ("y", "compaction"),  # y's first compaction before x's second, though x's is older
        ("x", "compaction"),
    ]
    # table priority: x (2) takes two items per turn of y (1)
    weighted = order_fairly(
        [_item("x", f"2026010100000000{n}") for n in range(4)] + [_item("y", "20260101000000000")],
        {"x": Share(priority=2)},
    )
    assert [i.table.name for i in weighted] == ["x", "y", "x", "x", "x"]
    assert [i.table.name for i in order_fairly(weighted, {"x": Share(priority=2)}, Served(tables={"x": 5.0}))][0] == "y"


def test_starving_tables_go_first_lowest_score_first() -> None:
    items = [
        _item("a"),
        _item("b"),
        _item("c", action=ServiceAction.CLUSTERING),
        _item("d", action=ServiceAction.ROLLBACK),
    ]
    scores = {"a": 90.0, "b": 40.0, "c": 10.0}
    assert [i.table.name for i in order_fairly(items, scores=scores, starving_below=50)] == ["c", "b", "d", "a"]
    assert [i.table.name for i in order_fairly(items, scores=scores, starving_below=None)] == ["d", "a", "b", "c"]


def test_ledger_counts_runs_by_priority_and_an_idle_group_comes_back_level() -> None:
    ledger = FairShareLedger()
    fast, slow = Share(group="a", group_priority=2), Share(group="b")
    assert ledger.served({"a"}, {"t"}).groups == {"a": 0.0}
    for _ in range(4):
        ledger.started("t", fast)
    assert ledger.served({"a"}, {"t"}) == Served({"a": 2.0}, {"t": 4.0})
    # b had no work while a ran: it comes back at a's virtual time, not 0 (it cannot claim runs it did not ask for)
    assert ledger.served({"a", "b"}, {"t", "u"}).groups == {"a": 2.0, "b": 2.0}
    ledger.started("u", slow)
    assert ledger.served({"a", "b"}, {"t", "u"}).groups == {"a": 2.0, "b": 3.0}


def test_scheduling_settings_are_validated(tmp_path: Path) -> None:
    settings = load_settings(
        env={
            "LAKEWARD_SCHEDULING__GROUPS": '{"ingest": {"priority": 3, "max_concurrent_runs": 2}}',
            "LAKEWARD_POLICIES__DEFAULTS__SCHEDULING__PRIORITY": "2",
        }
    )
    assert settings.scheduling.group("ingest").priority == 3 and settings.scheduling.group("other").priority == 1
    assert settings.policy_for("t").scheduling.priority == 2 and settings.scheduling.starving_score == 50
    bad = [
        ({"LAKEWARD_SCHEDULING__GROUPS": '{"a b": {}}'}, "scheduling.groups['a b']: 'a b' is not a valid group name"),
        ({"LAKEWARD_SCHEDULING__GROUPS": '{"a": {"priority": 0}}'}, "scheduling.groups.a.priority: must be >= 1"),
        ({"LAKEWARD_SCHEDULING__STARVING_SCORE": "101"}, "scheduling.starving_score: must be <= 100"),
        (
            {"LAKEWARD_SCHEDULING__GROUPS": '{"a": {"max_concurrent_runs": 5}}'},
            "scheduling.groups.a.max_concurrent_runs: must be <= concurrency.max_running (4)",
        ),
        (
            {"LAKEWARD_POLICIES__DEFAULTS__SCHEDULING__MAX_CONCURRENT_RUNS": "9"},
            "policies.defaults.scheduling.max_concurrent_runs: must be <= concurrency.max_running (4)",
        ),
        ({"LAKEWARD_TABLES__ROOTS": '[{"path": "/x", "group": "no/slash"}]'}, "tables.roots[0].group"),
    ]
    for env, problem in bad:
        with pytest.raises(ConfigurationError) as err:
            load_settings(env=env)
        assert any(p.startswith(problem) for p in err.value.problems), (problem, err.value.problems)


def test_runner_applies_the_table_and_group_limits_of_each_share(tmp_path: Path) -> None:
    one, two, other = (mor_table(tmp_path / n) for n in ("one", "two", "other"))
    key = "policies.overrides.one.scheduling.max_concurrent_runs"
    shares = {
        "one": Share(group="g", group_max_runs=1, max_runs=1, max_runs_key=key),
        "two": Share(group="g", group_max_runs=1),
        "other": Share(group="h"),
    }
    coordinator = InProcessCoordinator([str(tmp_path)], lock_dir=tmp_path / "locks", owner=OwnerInfo.current("r1"))
    coordinator.start()
    engine = GatedEngine()
    runner = make_runner(
        coordinator,
        engine,
        settings=concurrency(max_running=4, max_running_per_table=2),
        share_of=lambda ref: shares[ref.name],
    )
    try:
        first = runner.submit(item(one), force=True)
        assert first.run is not None and engine.arrived.wait(20)
        # the table's own limit (1), though max_running_per_table allows 2
        again = runner.submit(item(one, ServiceAction.CLEAN))
        assert again.run is None and f"({key}=1) on one" in again.reason
        # the group's limit: one run of group g at a time, whichever table
        grouped = runner.submit(item(two), force=True)
        assert grouped.run is None and grouped.reason.startswith("group concurrency limit reached: group g of two")
        assert "scheduling.groups.g.max_concurrent_runs=1" in grouped.reason and first.run.run_id in grouped.reason
        assert runner.submit(item(other), force=True).run is not None  # another group: free
    finally:
        engine.gate.set()
        assert runner.wait_idle(60)
        runner.close()
        coordinator.close()


# -- the daemon ------------------------------------------------------------------------------
def _mor(path: Path, upserts: int = 3) -> Table:
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
    table.bulk_insert(pa.table({"id": list(range(10)), "v": [0] * 10, "ts": [0] * 10}))
    for i in range(1, upserts + 1):
        table.upsert(pa.table({"id": [1], "v": [i], "ts": [i]}))
    return table


def _daemon(tmp_path: Path, scheduling: str, max_running: int, engine: object = "local") -> Daemon:
    config = tmp_path / "lakeward.yaml"
    config.write_text(
        f"""
tables:
  roots:
    - path: {tmp_path / "teama"}
    - {{path: {tmp_path / "teamb"}, group: b}}
  refresh_interval_s: 3600
policies:
  defaults:
    compaction: {{max_delta_commits: 3}}
    clean: {{enabled: false}}
    archival: {{enabled: false}}
scheduling:
{scheduling}
concurrency: {{max_running: {max_running}, max_running_per_table: 1}}
spark: {{engine: local}}
log: {{format: text}}
drain_time_s: 1
"""
    )
    daemon = Daemon(load_settings(config, env={}))
    if engine != "local":
        daemon._engine = lambda: engine  # type: ignore[method-assign]  # the runs wait at its gate
    return daemon


@pytest.fixture
def two_teams(tmp_path: Path) -> Path:
    for i in range(6):
        _mor(tmp_path / "teama" / f"t{i}")
    for i in range(4):
        _mor(tmp_path / "teamb" / f"t{i}")
    return tmp_path


def _started(daemon: Daemon) -> list[str]:
    """The tables of the runs started so far, first first."""
    return [r.table.name for r in sorted(daemon.runs(), key=lambda r: r.created_at)]


def _drive(daemon: Daemon, runs: int) -> list[str]:
    """Cycles, one at a time, until `runs` runs started (one slot: each cycle starts one). The
    scheduler is stopped after its first cycle: the test's cycles are the only ones."""
    assert daemon.runner is not None and daemon.scheduler is not None
    wait_for(lambda: daemon.ready)
    daemon.scheduler.shutdown(wait=True)
    while len(_started(daemon)) < runs:
        assert daemon.runner.wait_idle(60)
        daemon.cycle()
    assert daemon.runner.wait_idle(60)
    return _started(daemon)


def test_two_groups_under_a_concurrency_limit_get_runs_by_their_priorities(two_teams: Path) -> None:
    daemon = _daemon(two_teams, "  groups: {teama: {priority: 3}, b: {priority: 1}}", max_running=1)
    daemon.start()
    try:
        started = _drive(daemon, 8)[:8]
        groups = "".join("a" if name.startswith("teama.") else "b" for name in started)
        # 6 to 2: weights 3 and 1, both with work all along (the first tie goes by group name: b, teama)
        assert groups == "baaabaaa", started
        assert len(set(started)) == 8  # every run a different table: each table's compaction ran once
        assert {daemon.share_of(TableRef(n, "")).group for n in started} == {"teama", "b"}
    finally:
        daemon.drain(5)


def test_a_group_max_concurrent_runs_is_respected_and_explain_names_it(two_teams: Path) -> None:
    engine = GatedEngine()
    daemon = _daemon(two_teams, "  groups: {teama: {max_concurrent_runs: 1}}", max_running=6, engine=engine)
    daemon.start()
    try:
        assert daemon.runner is not None
        # one run of team a's 6 due tables, every one of team b's 4: 5 runs, a slot left free
        wait_for(lambda: len(daemon.runner.running()) == 5)  # type: ignore[union-attr]
        daemon.cycle()  # another cycle: the limits still hold
        running = [r.table.name for r in daemon.runner.running()]
        assert sum(n.startswith("teama.") for n in running) == 1 and len(running) == 5, running
        waiting = next(f"teama.t{i}" for i in range(6) if f"teama.t{i}" not in running)
        decision = next(d for d in daemon.explain(waiting, ServiceAction.COMPACTION) if d.item is not None)
        assert [r.code.value for r in decision.reasons] == ["concurrency_limit"]
        message = decision.reasons[0].message
        assert message.startswith("group concurrency limit reached: group teama")
        assert "scheduling.groups.teama.max_concurrent_runs=1" in message
        held = next(r for r in daemon.runner.running() if r.table.name.startswith("teama."))
        assert held.run_id in message
    finally:
        engine.gate.set()
        daemon.drain(10)


def test_a_starving_table_gets_the_next_slot(tmp_path: Path) -> None:
    for i in range(4):  # older work than the sick table's: oldest first, they would all go before it
        _mor(tmp_path / "teama" / f"t{i}")
    _mor(tmp_path / "teama" / "u_sick", upserts=11)  # 11 log files on a file group: compaction is behind
    daemon = _daemon(tmp_path, "  starving_score: 90", max_running=1)
    daemon.start()
    try:
        assert daemon.runner is not None
        wait_for(lambda: daemon.ready)
        wait_for(lambda: daemon.health("teama.u_sick").report is not None)  # the first cycle scored it
        sick = daemon.health("teama.u_sick").report
        assert sick is not None and sick.score < 90 and daemon.health("teama.t1").report.score == 100  # type: ignore[union-attr]
        started = _drive(daemon, 2)
        assert started[0] == "teama.t0" and started[1] == "teama.u_sick", started
    finally:
        daemon.drain(5)
