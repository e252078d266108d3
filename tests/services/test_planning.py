"""plan_work is pure: states built from timeline file names, no tables on disk."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

import pytest

from lakeward.core.timeline import Timeline
from lakeward.services.discovery import TableState
from lakeward.services.model import ServiceAction, TableRef
from lakeward.services.planning import (
    DEFAULT_POLICY,
    Policy,
    Reason,
    ReasonCode,
    decide,
    instant_moment,
    order_fairly,
    plan_work,
    policy_from_settings,
)
from lakeward.services.settings import EffectivePolicy

NOW = dt.datetime(2026, 1, 2, 0, 0, tzinfo=dt.UTC)
QUIET = Policy(compaction_enabled=False, clean_enabled=False, archival_enabled=False)


def t(n: int) -> str:
    """Instant time n minutes after 2026-01-01 00:00 (UTC timeline)."""
    return (dt.datetime(2026, 1, 1) + dt.timedelta(minutes=n)).strftime("%Y%m%d%H%M%S") + "000"


def state(
    name: str,
    files: list[str],
    *,
    mor: bool = False,
    plans: list[tuple[ServiceAction, str]] = (),  # type: ignore[assignment]
) -> TableState:
    """A TableState as discovery would build it from these timeline file names."""
    from lakeward.core.timeline import Action
    from lakeward.services.discovery import _PLAN_ACTIONS
    from lakeward.services.model import PendingPlan

    ref = TableRef(name, f"/tables/{name}")
    tl = Timeline.from_file_names(files)
    found = [
        PendingPlan(ref, _PLAN_ACTIONS[i.action], i.time, i.state.value)
        for i in tl.pending()
        if i.action in _PLAN_ACTIONS
    ]
    found += [PendingPlan(ref, a, time, "requested") for a, time in plans]
    writes = tl.completed_writes()
    last_comp = max((i.time for i in writes if tl.was_compaction(i.time)), default=None)
    cleans = [i.time for i in tl.completed() if i.action is Action.CLEAN]
    replaces = [i.time for i in writes if i.action is Action.REPLACE_COMMIT]
    completed = tl.completed()
    return TableState(
        ref=ref,
        table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE",
        timeline_timezone="UTC",
        timeline=tl,
        pending_plans=tuple(found),
        pending_writes=(),
        delta_commits_since_compaction=sum(
            1 for i in writes if i.action is Action.DELTA_COMMIT and (last_comp is None or i.time > last_comp)
        ),
        writes_since_clean=sum(1 for i in writes if not cleans or i.time > cleans[-1]),
        rewrites_since_clean=sum(
            1
            for i in writes
            if i.action in (Action.COMMIT, Action.REPLACE_COMMIT) and (not cleans or i.time > cleans[-1])
        ),
        writes_since_replace=sum(1 for i in writes if not replaces or i.time > replaces[-1]),
        last_completed=completed[-1].time if completed else None,
        last_clean=cleans[-1] if cleans else None,
    )


def deltas(*minutes: int) -> list[str]:
    return [f"{t(m)}.deltacommit" for m in minutes]


def commits(*minutes: int) -> list[str]:
    return [f"{t(m)}.commit" for m in minutes]


def summary(items: list) -> list[tuple[str, str, str | None]]:  # type: ignore[type-arg]
    return [(i.table.name, i.action.value, i.instant) for i in items]


def test_every_pending_plan_becomes_work_oldest_first_by_priority() -> None:
    a = state("a", [*deltas(1, 2), f"{t(3)}.compaction.requested", f"{t(5)}.clean.inflight"], mor=True)
    b = state("b", [*commits(1), f"{t(4)}.rollback.requested", f"{t(2)}.clean.requested"])
    items = plan_work([a, b], QUIET, NOW)
    assert summary(items) == [
        ("b", "rollback", t(4)),
        ("b", "clean", t(2)),
        ("a", "clean", t(5)),
        ("a", "compaction", t(3)),
    ]
    assert all(i.reason.startswith("pending") for i in items)


def test_rollbacks_and_cleans_before_older_compactions() -> None:
    a = state("a", [*deltas(1), f"{t(2)}.compaction.inflight"], mor=True)
    b = state("b", [*commits(1), f"{t(50)}.clean.requested"])
    assert [i.action for i in plan_work([a, b], QUIET, NOW)] == [ServiceAction.CLEAN, ServiceAction.COMPACTION]


def test_round_robin_across_tables_when_ages_tie() -> None:
    same = [t(10), t(20), t(30)]
    states = [state(n, commits(1), plans=[(ServiceAction.COMPACTION, x) for x in same]) for n in ("busy", "quiet")]
    states.append(state("other", commits(1), plans=[(ServiceAction.COMPACTION, t(10))]))
    names = [i.table.name for i in plan_work(states, QUIET, NOW)]
    assert names == ["busy", "other", "quiet", "busy", "quiet", "busy", "quiet"]


def test_order_fairly_round_robins_new_items_with_equal_ages() -> None:
    s1 = state("x", commits(1))
    s2 = state("y", commits(1))
    from lakeward.services.model import WorkItem

    items = [
        WorkItem(3, "", s1.ref, ServiceAction.COMPACTION),
        WorkItem(3, "", s1.ref, ServiceAction.CLUSTERING),
        WorkItem(3, "", s2.ref, ServiceAction.COMPACTION),
    ]
    assert [i.table.name for i in order_fairly(items)] == ["x", "y", "x"]


def test_paused_tables_produce_nothing() -> None:
    a = state("a", [*commits(1), f"{t(2)}.clean.requested"])
    b = state("b", [*commits(1), f"{t(2)}.clean.requested"])
    items = plan_work([a, b], {"a": Policy(paused=True)}, NOW)
    assert summary(items) == [("b", "clean", t(2))]


def test_running_items_are_skipped() -> None:
    a = state("a", [*deltas(*range(1, 8)), f"{t(9)}.compaction.requested", f"{t(10)}.clean.requested"], mor=True)
    items = plan_work([a], Policy(), NOW, running_keys={f"a/compaction/{t(9)}"})
    assert summary(items) == [("a", "clean", t(10))]
    items = plan_work([state("m", deltas(*range(1, 8)), mor=True)], QUIET, NOW)
    assert items == []
    compact = Policy(clean_enabled=False, archival_enabled=False)
    m = state("m", deltas(*range(1, 8)), mor=True)
    assert summary(plan_work([m], compact, NOW)) == [("m", "compaction", None)]
    assert plan_work([m], compact, NOW, running_keys={"m/compaction/new"}) == []


def test_compaction_threshold_on_merge_on_read_only() -> None:
    policy = Policy(compaction_delta_commits=3, clean_enabled=False, archival_enabled=False)
    # 2 delta commits since the last compaction (at 3): not due
    files = [*deltas(1, 2), f"{t(3)}.compaction.requested", f"{t(3)}.commit", *deltas(4, 5)]
    assert plan_work([state("m", files, mor=True)], policy, NOW) == []
    [item] = plan_work([state("m", [*files, *deltas(6)], mor=True)], policy, NOW)
    assert (item.action, item.instant, item.sort_instant) == (ServiceAction.COMPACTION, None, t(4))
    assert "3 delta commits" in item.reason
    # copy-on-write tables never compact
    assert plan_work([state("c", commits(1, 2, 3, 4), mor=False)], policy, NOW) == []
    # a pending compaction is run, not a second one scheduled
    pending = state("m", [*deltas(1, 2, 3, 4, 5, 6), f"{t(7)}.compaction.requested"], mor=True)
    assert summary(plan_work([pending], policy, NOW)) == [("m", "compaction", t(7))]


def test_a_pending_write_blocks_new_compactions_on_version_6_only() -> None:
    """Versions 8+ slice logs by completion time: a compaction is planned beside writes in flight
    (as Hudi 1.x plans it); on version 6 it waits for them."""
    policy = Policy(compaction_delta_commits=3, clean_enabled=False, archival_enabled=False)
    due = state("m", deltas(1, 2, 3), mor=True)
    in_flight = Timeline.from_file_names([f"{t(4)}.deltacommit.requested"]).pending_writes()
    for version, planned in ((6, []), (8, [("m", "compaction", None)]), (9, [("m", "compaction", None)])):
        writing = replace(due, pending_writes=tuple(in_flight), table_version=version)
        compactions = [i for i in plan_work([writing], policy, NOW) if i.action is ServiceAction.COMPACTION]
        assert summary(compactions) == planned, version
        assert summary(plan_work([replace(writing, pending_writes=())], policy, NOW)) == [("m", "compaction", None)]


def test_merge_on_read_cleans_wait_for_a_rewrite() -> None:
    """Delta commits only append logs: no clean is proposed until a compaction (a commit) lands."""
    policy = Policy(clean_every_commits=2, compaction_enabled=False, archival_enabled=False)
    assert plan_work([state("m", deltas(1, 2, 3, 4), mor=True)], policy, NOW) == []
    [item] = plan_work([state("m", [*deltas(1, 2, 3), *commits(4)], mor=True)], policy, NOW)
    assert item.action is ServiceAction.CLEAN


def test_clean_every_n_commits_or_when_due() -> None:
    policy = Policy(clean_every_commits=3, compaction_enabled=False, archival_enabled=False)
    files = [*commits(1, 2), f"{t(3)}.clean", *commits(4, 5)]
    assert plan_work([state("c", files)], policy, NOW) == []
    [item] = plan_work([state("c", [*files, *commits(6)])], policy, NOW)
    assert (item.action, item.sort_instant) == (ServiceAction.CLEAN, t(4))
    # by time: the last clean (2026-01-01 00:03 UTC) is older than 12 hours at NOW
    timed = Policy(clean_every_commits=100, clean_interval=dt.timedelta(hours=12), archival_enabled=False)
    assert [i.action for i in plan_work([state("c", files)], timed, NOW)] == [ServiceAction.CLEAN]
    assert plan_work([state("c", files)], timed, NOW - dt.timedelta(hours=23)) == []
    # nothing written since the last clean: nothing to clean, however old
    assert plan_work([state("c", [*commits(1), f"{t(3)}.clean"])], timed, NOW) == []
    # a pending clean is run instead of scheduling another
    pend = state("c", [*commits(1, 2, 4, 5, 6), f"{t(7)}.clean.requested"])
    assert summary(plan_work([pend], policy, NOW)) == [("c", "clean", t(7))]


def test_clustering_only_when_enabled() -> None:
    off = Policy(clean_enabled=False, archival_enabled=False)
    on = Policy(clustering_enabled=True, clustering_every_commits=2, clean_enabled=False, archival_enabled=False)
    s = state("c", [f"{t(1)}.replacecommit", *commits(2, 3)])
    assert plan_work([s], off, NOW) == []
    [item] = plan_work([s], on, NOW)
    assert (item.action, item.sort_instant) == (ServiceAction.CLUSTERING, t(2))
    assert plan_work([state("c", [f"{t(1)}.replacecommit", *commits(2)])], on, NOW) == []


def test_archival_when_timeline_too_long() -> None:
    policy = Policy(archival_min_instants=3, archival_max_instants=5, compaction_enabled=False, clean_enabled=False)
    assert plan_work([state("c", commits(*range(1, 6)))], policy, NOW) == []
    [item] = plan_work([state("c", commits(*range(1, 7)))], policy, NOW)
    assert (item.action, item.sort_instant) == (ServiceAction.ARCHIVAL, t(1))
    assert "6 completed writes" in item.reason


ARCHIVE = Policy(archival_min_instants=3, archival_max_instants=5, compaction_enabled=False, clean_enabled=False)


def explain_reasons(s: TableState, policy: Policy) -> tuple[Reason, ...]:
    [archival] = [d for d in decide(s, policy, NOW) if d.action is ServiceAction.ARCHIVAL]
    return archival.reasons


def test_archival_counts_writes_as_hudi_does_not_cleans() -> None:
    """hoodie.keep.max.commits counts completed writes: 5 commits and 4 cleans archive nothing."""
    cleans = [f"{t(m)}.clean" for m in (10, 11, 12, 13)]
    s = state("c", [*commits(1, 2, 3, 4, 5), *cleans])
    assert plan_work([s], ARCHIVE, NOW) == []
    (reason,) = [r for r in explain_reasons(s, ARCHIVE) if r.code is ReasonCode.NOT_DUE]
    assert "5 completed write(s)" in reason.message


def test_archival_is_not_proposed_while_the_oldest_write_is_held_back() -> None:
    """A run would archive nothing: the first pending instant, a savepoint or the delta commits a
    compaction waits for keep every write from there on (a no-op run would only take a slot)."""
    pending = state("c", [f"{t(1)}.commit.requested", *commits(*range(2, 10))])
    assert plan_work([pending], ARCHIVE, NOW) == []
    assert any(f"pending commit {t(1)}" in r.message for r in explain_reasons(pending, ARCHIVE))
    saved = state("c", [*commits(*range(1, 10)), f"{t(1)}.savepoint"])
    assert plan_work([saved], ARCHIVE, NOW) == []
    assert any(f"savepoint {t(1)}" in r.message for r in explain_reasons(saved, ARCHIVE))
    waiting = state("m", deltas(*range(1, 10)), mor=True)
    assert plan_work([waiting], replace(ARCHIVE, compaction_delta_commits=20), NOW) == []
    # the compaction's delta commits are 9 and 10 of 10: archival may take 1 to 4 (3 are kept)
    [item] = plan_work([state("m", deltas(*range(1, 11)), mor=True)], replace(ARCHIVE, compaction_delta_commits=2), NOW)
    assert item.action is ServiceAction.ARCHIVAL
    later = state("c", [*commits(*range(1, 10)), f"{t(8)}.commit.requested"])
    [item] = plan_work([later], ARCHIVE, NOW)
    assert item.action is ServiceAction.ARCHIVAL


def test_archival_is_not_proposed_while_the_metadata_table_holds_every_movable_write() -> None:
    """Hudi archives no commit that completed after the metadata table's latest compaction; an archival
    compacts the metadata table first, unless a pending data-table instant keeps every delta commit out
    of that compaction: then a run would archive nothing, and explain says what holds it."""
    from lakeward.core.metadata_table.compaction import MetadataCompactionCheck
    from lakeward.core.timeline import Instant

    s = state("c", [*commits(*range(2, 11)), f"{t(9)}.commit.requested"])
    blocker = Instant.parse(f"{t(9)}.commit.requested")
    held = MetadataCompactionCheck(9, 10, 0, None, blocker, compacted_at=t(1))
    assert plan_work([replace(s, metadata_compaction=held)], ARCHIVE, NOW) == []
    reasons = explain_reasons(replace(s, metadata_compaction=held), ARCHIVE)
    assert any(r.code is ReasonCode.BLOCKED and f"compaction at {t(1)}" in r.message for r in reasons), reasons
    # the delta commits before the pending instant can be compacted first: the writes they hold may go
    partly = MetadataCompactionCheck(9, 10, 6, f"{t(8)}999", blocker, compacted_at=t(1))
    [item] = plan_work([replace(s, metadata_compaction=partly)], ARCHIVE, NOW)
    assert item.action is ServiceAction.ARCHIVAL
    # without a metadata table the timeline alone decides (the pending instant comes after the movable writes)
    [item] = plan_work([s], ARCHIVE, NOW)
    assert item.action is ServiceAction.ARCHIVAL


def test_archival_is_not_proposed_while_the_last_clean_retains_every_movable_write() -> None:
    """Archival keeps every write from the last clean's earliestCommitToRetain on. While a clean was stuck
    (quarantined in an S3 outage), the bound stayed and archival ran after every commit, archiving nothing
    each time, with explain naming no reason."""
    cleaned = state("c", [*commits(*range(1, 10)), f"{t(10)}.clean", f"{t(11)}.clean.requested"])
    held = replace(cleaned, clean_retain=t(1))
    assert [i.action for i in plan_work([held], ARCHIVE, NOW)] == [ServiceAction.CLEAN]  # the pending clean
    reasons = explain_reasons(held, ARCHIVE)
    assert any(r.code is ReasonCode.BLOCKED and f"the last clean {t(10)}" in r.message for r in reasons), reasons
    # a clean that retained from write 4 on lets archival take writes 1 to 3
    items = plan_work([replace(cleaned, clean_retain=t(4))], ARCHIVE, NOW)
    assert ServiceAction.ARCHIVAL in [i.action for i in items]


def test_default_policy_for_unlisted_tables_and_validation() -> None:
    s = state("c", commits(*range(1, 12)))
    # the default policy cleans every 10 commits
    assert [i.action for i in plan_work([s], {"other": QUIET}, NOW)] == [ServiceAction.CLEAN]
    with pytest.raises(ValueError, match="compaction_delta_commits"):
        Policy(compaction_delta_commits=0)


def test_instant_moment() -> None:
    assert instant_moment("20260101000300123", "UTC") == dt.datetime(2026, 1, 1, 0, 3, 0, 123000, tzinfo=dt.UTC)
    assert instant_moment("20260101000300", "LOCAL").tzinfo is not None


def test_policy_defaults_are_the_settings_defaults() -> None:
    # One set of defaults: a Policy() the planner builds on its own equals the one the daemon
    # derives from the settings' default policy (e.g. cleans once per settings' min_commits_between).
    from_settings = policy_from_settings(EffectivePolicy())
    assert Policy() == from_settings == DEFAULT_POLICY
    defaults = EffectivePolicy()
    assert Policy().clean_every_commits == defaults.clean.min_commits_between
    assert Policy().compaction_delta_commits == defaults.compaction.max_delta_commits
    assert Policy().archival_max_instants == defaults.archival.keep_max_commits
    assert Policy().archival_min_instants == defaults.archival.keep_min_commits
    assert Policy().clustering_every_commits == defaults.clustering.every_n_commits


def test_explain_of_a_table_never_cleaned_and_never_written_says_so() -> None:
    """The reason read "no completed write since the last clean (None)" on the page and in the API."""
    from lakeward.services.planning import decide

    [clean] = [d for d in decide(state("e", []), DEFAULT_POLICY, NOW) if d.action is ServiceAction.CLEAN]
    texts = [r.message for r in clean.reasons]
    assert any("since the last clean" in x for x in texts), texts
    assert not any("None" in x for x in texts), texts


def test_a_write_completing_after_a_later_one_counts_as_progress_on_version_6() -> None:
    """The daemon's hold-back after a run that found nothing counts the instants completed since
    (`progress_mark`). Version 6 instants carry no completion time: a write requested before the
    latest one that completed after it was not counted, and the hold-back lasted until another."""
    before = state("c", [f"{t(1)}.commit", f"{t(2)}.commit.requested", f"{t(2)}.inflight", f"{t(3)}.commit"])
    mark = before.progress_mark
    assert before.completed_after(mark) == 0
    after = state("c", [f"{t(1)}.commit", f"{t(2)}.commit", f"{t(3)}.commit"])
    assert after.completed_after(mark) == 1
    assert after.completed_after(mark, rewrites_only=True) == 1
    assert state("c", [f"{t(3)}.commit"]).completed_after(mark) == 0  # archival and cleans are no progress


@pytest.mark.parametrize("version", [6, 9])
def test_discovery_reads_the_last_cleans_retained_bound_once(tmp_path, version) -> None:
    import pyarrow as pa

    from lakeward import Table
    from lakeward.services.discovery import DiscoveryCache, load_state

    table = Table.create(
        str(tmp_path / "t"), record_key="id", table_version=version, options={"hoodie.cleaner.commits.retained": 1}
    )
    for i in range(3):
        table.upsert(pa.table({"id": [1], "v": [i]}))
    writes = [i.time for i in table.timeline().completed_writes()]
    assert table.clean() is not None
    cache = DiscoveryCache()
    state = load_state(TableRef(table.name, table.path), cache)
    assert state.clean_retain == writes[-1]
    assert list(cache.clean_retain.values()) == [writes[-1]]
