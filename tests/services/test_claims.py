"""Claims: ZooKeeperCoordinator against a real ZooKeeper (fixture `zookeeper_server`), InProcessCoordinator."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient

from lakeward.services.claims import (
    CoordinatorError,
    InProcessCoordinator,
    SessionEvent,
    ZooKeeperCoordinator,
    split_key,
)
from lakeward.services.control import MemoryControlStore, ZooKeeperControlStore
from lakeward.services.metrics import DaemonMetrics
from lakeward.services.model import ServiceAction, TableRef, WorkItem
from lakeward.services.runner import Runner
from lakeward.services.settings import ConcurrencySettings
from tests.support.zookeeper import expire_session


def wait_for(predicate: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def item_key(table: str, instant: str, action: ServiceAction = ServiceAction.COMPACTION) -> str:
    return WorkItem(0, instant, TableRef(table, f"/tables/{table}"), action, instant).key


@pytest.mark.zookeeper
def test_two_replicas_race_for_100_keys_each_claimed_once(make_coordinator):
    a, b = make_coordinator("a"), make_coordinator("b")
    keys = [item_key(f"t{i % 10}", f"20260101{i:06d}") for i in range(100)]
    won: dict[str, list[str]] = {"a": [], "b": []}
    barrier = threading.Barrier(2)

    def race(name: str, coordinator: ZooKeeperCoordinator) -> None:
        barrier.wait()
        for key in keys:
            if coordinator.try_claim(key) is not None:
                won[name].append(key)

    threads = [threading.Thread(target=race, args=(n, c)) for n, c in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(won["a"] + won["b"]) == sorted(keys)  # every key once, no key twice
    assert not set(won["a"]) & set(won["b"])
    assert a.live_claims() == b.live_claims() == set(keys)
    conflicts = [e for c in (a, b) for e in c.claim_log if e.event == "conflict"]
    assert len(conflicts) == 100
    for claim in a.held_claims():
        assert a.is_valid(claim)
        assert not b.is_valid(claim)


@pytest.mark.zookeeper
def test_release_lets_the_other_replica_claim(make_coordinator):
    a, b = make_coordinator("a"), make_coordinator("b")
    key = item_key("orders", "20260101000001")
    claim = a.try_claim(key)
    assert claim is not None and claim.owner == a.replica_id
    assert b.try_claim(key) is None
    assert a.try_claim(key) is None  # not reentrant: one run per item per replica too
    assert a.release(claim)
    assert not a.is_valid(claim)
    assert not a.release(claim)  # already released
    other = b.try_claim(key)
    assert other is not None and b.is_valid(other)
    assert [e.event for e in a.claim_log] == ["claimed", "conflict", "released"]


@pytest.mark.zookeeper
def test_owner_identity_is_readable_from_the_node(make_coordinator, zookeeper_server):
    a = make_coordinator("reader")
    key = item_key("db/orders", "20260101000002", ServiceAction.CLEAN)  # a slash in the table name
    claim = a.try_claim(key)
    assert claim is not None
    assert split_key(key) == ("db/orders", "clean", "20260101000002")
    assert claim.path == f"{a.claims_path}/db%2Forders/clean/20260101000002"
    raw = KazooClient(hosts=zookeeper_server.hosts)
    raw.start(timeout=10)
    try:
        data, stat = raw.get(claim.path)
        assert stat.ephemeralOwner == a.session_id
    finally:
        raw.stop()
        raw.close()
    identity = json.loads(data)
    assert identity["replica_id"] == a.replica_id
    assert identity["pid"] > 0 and identity["host"] and identity["started_at"] > 0
    assert a.read_owner(key) == a.owner
    assert a.live_claims() == {key}
    a.release(claim)
    assert a.read_owner(key) is None and a.live_claims() == set()


@pytest.mark.zookeeper
def test_an_invalid_claim_says_why(make_coordinator, zookeeper_server):
    """The fence's refusal names its reason (a run ended `claim_lost` says which check failed)."""
    a = make_coordinator("a")
    claim = a.try_claim(item_key("why", "20260101000005"))
    assert claim is not None and a.invalid_reason(claim) is None
    raw = KazooClient(hosts=zookeeper_server.hosts)
    raw.start(timeout=10)
    try:
        raw.delete(claim.path)  # behind the replica's back
    finally:
        raw.stop()
        raw.close()
    assert a.invalid_reason(claim) == f"its node {claim.path} no longer exists"
    assert not a.is_valid(claim)
    a.release(claim)
    assert a.invalid_reason(claim) == "this replica released it (or never held it)"


@pytest.mark.zookeeper
def test_session_expiry_fires_callbacks_invalidates_claims_and_frees_them(make_coordinator, zookeeper_server):
    a, b = make_coordinator("a"), make_coordinator("b")
    events: list[SessionEvent] = []
    a.add_session_listener(events.append)
    key = item_key("events", "20260101000003")
    claim = a.try_claim(key)
    assert claim is not None and a.is_valid(claim)
    old_session = a.session_id

    expire_session(a, zookeeper_server.hosts)

    assert wait_for(lambda: SessionEvent.LOST in events)
    assert not a.is_valid(claim)
    assert wait_for(lambda: b.try_claim(key) is not None)  # the ephemeral node went with the session
    assert wait_for(lambda: SessionEvent.NEW_SESSION in events)
    assert a.session_id != old_session and a.connected
    assert not a.is_valid(claim)
    assert any(e.key == key and e.event == "lost" for e in a.claim_log)
    assert not a.release(claim)  # releasing a lost claim does not delete b's node
    assert b.read_owner(key) == b.owner
    # With its new session the coordinator claims again.
    fresh = a.try_claim(item_key("events", "20260101000004"))
    assert fresh is not None and a.is_valid(fresh)


@pytest.mark.slow  # ~20 s: stops and restarts a ZooKeeper server
@pytest.mark.zookeeper
def test_server_stop_suspends_and_invalidates_claims(make_coordinator, zookeeper_server):
    a = make_coordinator("a", session_timeout_s=20.0, connection_timeout_s=2.0)
    events: list[SessionEvent] = []
    a.add_session_listener(events.append)
    claim = a.try_claim(item_key("suspend", "20260101000005"))
    assert claim is not None
    finished = a.try_claim(item_key("suspend", "20260101000008"))
    assert finished is not None
    zookeeper_server.stop()
    try:
        assert wait_for(lambda: SessionEvent.SUSPENDED in events)
        assert not a.is_valid(claim)
        assert not a.connected and a.state == "suspended"
        assert a.try_claim(item_key("suspend", "20260101000006")) is None
        # Reads of the claims fail at once: kazoo would queue them until ZooKeeper is back (an API
        # request or an explain hung that long).
        for read in (a.live_claims, lambda: a.read_owner(claim.key), lambda: a.claimed_by(claim.key)):
            began = time.monotonic()
            with pytest.raises(CoordinatorError, match="not connected"):
                read()
            assert time.monotonic() - began < 1.0
        # Due work is not "claimed by another run", nor counted as a claim conflict.
        runner = Runner(a, MemoryControlStore(), DaemonMetrics(), ConcurrencySettings(), engine="local")
        work = WorkItem(0, "", TableRef("suspend", "/tables/suspend"), ServiceAction.CLEAN, None)
        refused = runner.submit(work)
        assert refused.run is None and "unreachable" in refused.reason, refused.reason
        metric = runner.metrics.registry.get_sample_value
        assert metric("lakeward_claim_attempts_total", {"result": "unavailable"}) == 1
        assert metric("lakeward_claim_attempts_total", {"result": "conflict"}) is None
        # A run that succeeded meanwhile does not wait for ZooKeeper to reset its failure count.
        began = time.monotonic()
        with pytest.raises(CoordinatorError, match="not connected"):
            ZooKeeperControlStore(a).clear_failures(work.key)
        assert time.monotonic() - began < 1.0
        # A run that ends meanwhile releases its claim: its node is deleted once ZooKeeper is back.
        assert a.release(finished) is False
    finally:
        zookeeper_server.start()
    assert wait_for(lambda: a.connected, 30)
    # Same or new session: a claim taken before the suspension stays invalid (its run was cancelled).
    assert not a.is_valid(claim)
    # the listener hears of the outcome just after `connected` (an expired session: LOST, then NEW_SESSION)
    assert wait_for(lambda: events[-1] in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION), 30), events
    if events[-1] is not SessionEvent.NEW_SESSION:  # (a new session took the node with the old one)
        assert wait_for(lambda: a.read_owner(finished.key) is None, 10), "the released claim's node stayed"
    a.release(claim)
    again = a.try_claim(claim.key)
    assert again is not None and a.is_valid(again)


@pytest.mark.zookeeper
def test_close_releases_claims_and_refuses_more(make_coordinator):
    a, b = make_coordinator("a"), make_coordinator("b")
    key = item_key("close", "20260101000007")
    assert a.try_claim(key) is not None
    a.close()
    assert b.try_claim(key) is not None
    with pytest.raises(CoordinatorError, match="closed"):
        a.try_claim(key)


def test_split_key_refuses_malformed_keys():
    with pytest.raises(ValueError, match="table/action/instant"):
        split_key("only/two")
    with pytest.raises(ValueError):
        split_key("t//x")


def test_in_process_coordinator_claims_releases_and_validates(tmp_path):
    tables = [TableRef("a", str(tmp_path / "a")), TableRef("b", str(tmp_path / "b"))]
    with InProcessCoordinator(tables, lock_dir=tmp_path / "locks") as coordinator:
        key = item_key("a", "20260101000001")
        claim = coordinator.try_claim(key)
        assert claim is not None and coordinator.is_valid(claim)
        assert coordinator.try_claim(key) is None
        assert coordinator.live_claims() == {key}
        assert coordinator.read_owner(key) == coordinator.owner
        assert coordinator.release(claim) and not coordinator.is_valid(claim)
        assert coordinator.live_claims() == set()
        assert coordinator.try_claim(key) is not None
        assert [e.event for e in coordinator.claim_log] == ["claimed", "conflict", "released", "claimed"]
    assert not coordinator.is_valid(claim)


def test_in_process_coordinator_refuses_a_second_instance_on_the_same_tables(tmp_path):
    lock_dir = tmp_path / "locks"
    first = InProcessCoordinator([str(tmp_path / "a"), str(tmp_path / "b")], lock_dir=lock_dir)
    first.start()
    overlapping = InProcessCoordinator([str(tmp_path / "b"), str(tmp_path / "c")], lock_dir=lock_dir)
    with pytest.raises(CoordinatorError, match="another in-process coordinator"):
        overlapping.start()
    # A disjoint table set is fine, and the refused one did not keep c's guard.
    disjoint = InProcessCoordinator([str(tmp_path / "c")], lock_dir=lock_dir)
    disjoint.start()
    disjoint.close()
    first.close()
    overlapping.start()  # once the first is gone
    overlapping.close()


def test_in_process_coordinator_guards_a_table_however_it_is_spelt(tmp_path):
    lock_dir = tmp_path / "locks"
    first = InProcessCoordinator([str(tmp_path / "a")], lock_dir=lock_dir)
    first.start()
    try:
        for spelling in (f"file://{tmp_path / 'a'}", f"{tmp_path / 'a'}/", f"{tmp_path / 'x'}/../a"):
            with pytest.raises(CoordinatorError, match="another in-process coordinator"):
                InProcessCoordinator([spelling], lock_dir=lock_dir).start()
    finally:
        first.close()


def test_in_process_coordinator_guard_holds_across_processes(tmp_path):
    import subprocess
    import sys

    lock_dir = tmp_path / "locks"
    first = InProcessCoordinator([str(tmp_path / "a")], lock_dir=lock_dir)
    first.start()
    script = (
        "import sys\n"
        "from lakeward.services.claims import InProcessCoordinator, CoordinatorError\n"
        f"c = InProcessCoordinator([{str(tmp_path / 'a')!r}], lock_dir={str(lock_dir)!r})\n"
        "try:\n    c.start()\nexcept CoordinatorError:\n    sys.exit(3)\nsys.exit(0)\n"
    )
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 3
    first.close()
    assert subprocess.run([sys.executable, "-c", script], timeout=60).returncode == 0
