"""Heartbeats of in-flight writes and the LAZY failed-writes policy (one and several processes)."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lakeward.core.write.client as client_mod
from lakeward.core.config.write import parse_write_config
from lakeward.core.exceptions import SharedLockRequiredError
from lakeward.core.table import Table
from lakeward.core.table_services.rollback import failed_writes
from lakeward.core.timeline import Action, Timeline, avro_plans
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.transitions import create_requested, read_instant, transition_to_inflight
from lakeward.core.write.heartbeat import heartbeat_path, is_heartbeat_expired
from tests.support.zookeeper import hudi_lock_options

SCRIPTS = Path(__file__).parents[1] / "scripts"
LAZY = {
    "hoodie.cleaner.policy.failed.writes": "LAZY",
    "hoodie.client.heartbeat.interval_in_ms": 200,
    "hoodie.client.heartbeat.tolerable.misses": 2,
}


def _rows(table: Table) -> dict[str, str]:
    data = table.read(columns=["id", "v"])
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _hudi_rows(path: str) -> dict[str, str]:
    data = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(path).build().read())
    rows = dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))
    assert len(rows) == data.num_rows
    return rows


def _batch(part: str, ids: list[str], v: str) -> pa.Table:
    return pa.table({"id": ids, "part": [part] * len(ids), "ts": [0] * len(ids), "v": [v] * len(ids)})


def test_config_policies():
    assert not parse_write_config({}).lazy_failed_writes
    assert parse_write_config({"hoodie.cleaner.policy.failed.writes": "lazy"}).lazy_failed_writes
    # As Hudi: optimistic concurrency control forces LAZY.
    occ = parse_write_config({"hoodie.write.concurrency.mode": "optimistic_concurrency_control"})
    assert occ.lazy_failed_writes


def test_heartbeat_exists_and_beats_during_a_lazy_write_and_is_gone_after(tmp_path, monkeypatch):
    path = str(tmp_path / "t")
    # beats every 50 ms; expired only after 20 missed ones, so that a loaded machine that holds the
    # beating thread back for a while does not expire the write
    beats = {"hoodie.client.heartbeat.interval_in_ms": 50, "hoodie.client.heartbeat.tolerable.misses": 20}
    table = Table.create(path, record_key="id", options={**LAZY, **beats})
    seen: dict[str, Any] = {}
    original = client_mod.reconcile_markers

    def spy(storage: Any, instant_time: str, *args: Any, **kwargs: Any) -> Any:
        beat = tmp_path / "t" / heartbeat_path(instant_time)
        seen["first"] = beat.stat().st_mtime_ns
        time.sleep(0.3)
        seen["later"] = beat.stat().st_mtime_ns
        seen["expired"] = is_heartbeat_expired(storage, instant_time, 50, 20)
        return original(storage, instant_time, *args, **kwargs)

    monkeypatch.setattr(client_mod, "reconcile_markers", spy)
    result = table.upsert(pa.table({"id": [1], "v": ["a"]}))
    assert seen["later"] > seen["first"], "the heartbeat was not refreshed"
    assert seen["expired"] is False
    assert not (tmp_path / "t" / heartbeat_path(result.instant_time)).exists()
    assert is_heartbeat_expired(table.storage, result.instant_time, 50, 2)  # missing = expired


def test_a_failed_lazy_write_deletes_its_heartbeat(tmp_path, monkeypatch):
    table = Table.create(str(tmp_path / "t"), record_key="id", options=LAZY)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(client_mod, "reconcile_markers", boom)
    with pytest.raises(RuntimeError):
        table.upsert(pa.table({"id": [1], "v": ["a"]}))
    assert not list((tmp_path / "t" / ".hoodie" / ".heartbeat").iterdir())
    assert Timeline.load(table.storage).pending_writes() == []


def test_eager_writes_keep_a_heartbeat_too(tmp_path, monkeypatch):
    """Unlike Hudi: without it a write of another live process could not be told from a failed one."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    seen = []
    original = client_mod.reconcile_markers

    def spy(storage: Any, instant_time: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((tmp_path / "t" / heartbeat_path(instant_time)).exists())
        return original(storage, instant_time, *args, **kwargs)

    monkeypatch.setattr(client_mod, "reconcile_markers", spy)
    result = table.upsert(pa.table({"id": [1], "v": ["a"]}))
    assert seen == [True]
    assert not (tmp_path / "t" / heartbeat_path(result.instant_time)).exists()


def _start_frozen_writer(path: str, options: dict[str, Any], batch_file: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "heartbeat_writer.py"), path, json.dumps(options), str(batch_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        ready = sel.select(60)
    line = proc.stdout.readline().strip() if ready else ""
    if not line.startswith("REACHED "):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"writer did not get in flight (stdout {line!r}):\n{err}")
    return proc, line.split()[1]


def test_lazy_leaves_a_live_writer_alone_and_rolls_back_one_whose_process_is_gone(tmp_path):
    """A live writer in another process: not rolled back, and this process (in-process lock) is refused.
    Its process gone (same machine), its write is failed at once, recent heartbeat or not. (A writer
    on another machine: once its heartbeat expired, tests/core/write/test_writer_safety.py.)"""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=LAZY)
    table.upsert(_batch("a", ["a1", "a2"], "base"))
    batch_file = tmp_path / "a.parquet"
    pq.write_table(_batch("a", ["a1", "a3"], "from-a"), batch_file)
    proc, instant = _start_frozen_writer(path, LAZY, batch_file)
    try:
        beat = tmp_path / "t" / heartbeat_path(instant)
        # A slow but live writer: well past the expiry (400 ms) its heartbeat is still fresh.
        time.sleep(1.0)
        with pytest.raises(SharedLockRequiredError, match=instant):
            table.upsert(_batch("b", ["b1"], "b-1"))
        pending = [i.time for i in Timeline.load(table.storage).pending_writes()]
        assert pending == [instant], "a live writer was rolled back"
        assert beat.exists()
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    os.utime(beat)  # dead, but its last beat is recent: its process is gone all the same
    table.upsert(_batch("b", ["b1"], "b-1"))
    timeline = Timeline.load(table.storage)
    assert timeline.pending_writes() == [] and not timeline.find(instant)
    rollbacks = [i for i in timeline.completed() if i.action is Action.ROLLBACK]
    assert len(rollbacks) == 1
    meta = avro_plans.deserialize(read_instant(table.storage, rollbacks[0]))
    assert meta["commitsRollback"] == [instant]
    assert not beat.exists()
    expected = {"a1": "base", "a2": "base", "b1": "b-1"}
    assert _rows(table) == _hudi_rows(path) == expected


def _zk_options(hosts: str) -> dict[str, Any]:
    return {
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        **hudi_lock_options(hosts, "/lakeward/heartbeat-test"),
        "hoodie.client.heartbeat.interval_in_ms": 500,
    }


def _zk_batch(writer: int, round_: int) -> list[tuple[str, str, str]]:
    """(partition, key, value) rows of a round: mirrors tests/core/scripts/zk_writer.py."""
    rows = [(f"p{writer}", f"w{writer}-{round_}-{k}", f"w{writer}r{round_}") for k in range(3)]
    if round_ % 2 == 1:
        rows += [("shared", f"shared-{k}", f"w{writer}r{round_}") for k in range(2)]
    return rows


@pytest.mark.zookeeper
@pytest.mark.slow
def test_zookeeper_writer_processes_under_lazy_policy(tmp_path, zookeeper_server):
    path = str(tmp_path / "t")
    options = _zk_options(zookeeper_server.hosts)
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=options)
    table.upsert(_batch("shared", ["shared-0", "shared-1"], "init"))
    writers, rounds = 3, 4
    procs = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "zk_writer.py"), path, json.dumps(options), str(w), str(rounds)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    outcomes: dict[int, list[dict[str, Any]]] = {}
    for w, proc in enumerate(procs):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes[w] = [json.loads(line) for line in out.splitlines()]
        assert len(outcomes[w]) == rounds, err

    completed = {o["instant"]: (w, o["round"]) for w, rs in outcomes.items() for o in rs if o["instant"]}
    failed = [o for rs in outcomes.values() for o in rs if o["error"]]
    assert all(o["error"] == "ConcurrentWriteError" and o["failed"] for o in failed)
    # Disjoint partitions never conflict: every failure is an overlapping (odd) round.
    assert all(o["round"] % 2 == 1 for o in failed)

    timeline = Timeline.load(Table.open(path).storage)
    assert timeline.pending() == []
    assert set(timeline.completed_write_times()) == set(completed) | {timeline.completed_writes()[0].time}
    rolled_back = {
        t
        for i in timeline.completed()
        if i.action is Action.ROLLBACK
        for t in avro_plans.deserialize(read_instant(table.storage, i))["commitsRollback"]
    }
    assert rolled_back == {o["failed"] for o in failed}
    assert failed_writes(timeline) == []
    assert not list((tmp_path / "t" / ".hoodie" / ".heartbeat").iterdir())

    expected = {"shared-0": "init", "shared-1": "init"}
    for instant in sorted(completed):  # the completed writes, in instant order, and nothing else
        for _, key, value in _zk_batch(*completed[instant]):
            expected[key] = value
    assert _rows(Table.open(path)) == _hudi_rows(path) == expected


def test_repair_rolls_back_only_writes_whose_heartbeat_went_stale(tmp_path):
    """`Table.repair` (the daemon's rollback action) never touches a write without a heartbeat file."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=LAZY)
    table.upsert(_batch("a", ["a1", "a2"], "base"))
    batch_file = tmp_path / "a.parquet"
    pq.write_table(_batch("a", ["a1", "a3"], "from-a"), batch_file)
    proc, lazy_instant = _start_frozen_writer(path, LAZY, batch_file)
    try:
        # An EAGER writer in flight keeps no heartbeat file: its pending instant, by hand.
        eager_instant = new_instant_time(lazy_instant)
        transition_to_inflight(table.storage, create_requested(table.storage, eager_instant, Action.COMMIT))
        assert table.repair() == []  # the LAZY writer is alive; the other one cannot be judged
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    time.sleep(0.6)  # past interval * tolerable misses for the LAZY writer's last beat
    assert table.repair() == [lazy_instant]
    pending = [i.time for i in Timeline.load(table.storage).pending_writes()]
    assert pending == [eager_instant], "a write without a heartbeat may belong to a live EAGER writer"
    assert table.repair() == []


def test_a_write_whose_own_rollback_failed_keeps_its_heartbeat_for_repair(tmp_path: Path, monkeypatch) -> None:
    """A write that failed and could not roll itself back (S3 refusing) deleted its heartbeat file anyway:
    `repair` (the daemon's rollback) never touches a write without one, so with no later write the instant
    and its files stayed pending for good. The file now stays, expires, and repair rolls the write back."""
    from lakeward.core.exceptions import StorageError

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=LAZY)
    table.upsert(_batch("a", ["1"], "x"))

    def fail_mid_write(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the write failed")

    def storage_refuses(*args: Any, **kwargs: Any) -> None:
        raise StorageError("cannot delete: S3 answered 500")

    with monkeypatch.context() as patched:
        patched.setattr(client_mod.WriteClient, "_execute", fail_mid_write)
        patched.setattr(client_mod, "delete_pending_files", storage_refuses)  # the rollback's first step
        with pytest.raises(RuntimeError, match="the write failed"):
            table.upsert(_batch("a", ["2"], "y"))
    pending = [i.time for i in Timeline.load(table.storage).pending_writes()]
    assert len(pending) == 1
    assert table.storage.exists(heartbeat_path(pending[0]))
    wc = parse_write_config(LAZY)
    deadline = time.monotonic() + 30
    while not is_heartbeat_expired(table.storage, pending[0], wc.heartbeat_interval_ms, wc.heartbeat_tolerable_misses):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert Table.open(path).repair() == pending
    assert Timeline.load(table.storage).pending_writes() == []
    assert _rows(table) == {"1": "x"}
