"""N writer processes x rounds of upserts to one table, on local disk and on S3 (SeaweedFS),
with the ZooKeeper lock and with the default in-process lock; with the ZooKeeper lock on
table versions 8 and 9 too, merge-on-read ones with a compactor process beside the writers.

Each process (`scripts/mp_writer.py`) writes its own partition every round and a partition
shared by all on odd rounds. Whatever the interleaving: every write that returned success
is in the final table, every write that failed is absent, lakeward and hudi-rs read the
same rows, and nothing is left pending. With the ZooKeeper lock only overlapping writes may
fail (ConcurrentWriteError); with the in-process lock, which cannot order processes, a
writer that meets another process's write in flight is refused (SharedLockRequiredError)
instead of rolling it back (issue 18, item 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.storage import Storage
from lakeward.core.table import Table
from lakeward.core.timeline import Timeline
from lakeward.core.write.heartbeat import HEARTBEAT_FOLDER
from tests.core.scripts.mp_writer import batch
from tests.support.zookeeper import hudi_lock_options

SCRIPT = Path(__file__).parent / "scripts" / "mp_writer.py"
COMPACTOR = Path(__file__).parent / "scripts" / "mp_compactor.py"


def _zk_options(hosts: str) -> dict[str, Any]:
    return {
        "hoodie.write.concurrency.mode": "optimistic_concurrency_control",
        # one lock per test table
        **hudi_lock_options(hosts, "/lakeward/multiprocess-test", f"t{time.time_ns()}"),
    }


def _rows(uri: str, storage_options: Mapping[str, str]) -> dict[str, str]:
    """The snapshot as lakeward and as hudi-rs read it; they must agree, with no duplicate key."""
    ours = Table.open(uri, storage_options=storage_options).read(columns=["id", "v"])
    mine = dict(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist(), strict=True))
    assert len(mine) == ours.num_rows, "lakeward returned duplicate keys"
    builder = hudi.HudiTableBuilder.from_base_uri(uri)
    if storage_options:
        builder = builder.with_storage_options(dict(storage_options))
    theirs = pa.Table.from_batches(builder.build().read())
    rows = dict(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True))
    assert len(rows) == theirs.num_rows, "hudi-rs returned duplicate keys"
    assert mine == rows, "lakeward and hudi-rs disagree"
    return mine


def run_writers(
    uri: str,
    options: dict[str, Any],
    storage_options: Mapping[str, str],
    writers: int,
    rounds: int,
    table_version: int = 6,
    table_type: str = "COPY_ON_WRITE",
    compactions: int = 0,
) -> dict[int, list[dict[str, Any]]]:
    """Create the table, run the writer processes together; their outcomes by writer id.

    `compactions` > 0 (merge-on-read): one more process (`scripts/mp_compactor.py`) plans and
    runs that many compactions meanwhile (or as many as it can in a minute); its outcomes are
    under key -1.
    """
    table = Table.create(
        uri,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type=table_type,
        options=options,
        storage_options=storage_options,
        table_version=table_version,
    )
    table.upsert(pa.table({"id": ["shared-0", "shared-1"], "part": ["shared"] * 2, "ts": [0, 0], "v": ["init"] * 2}))
    setup = json.dumps({"options": options, "storage_options": dict(storage_options)})
    commands = {w: [str(SCRIPT), uri, setup, str(w), str(rounds)] for w in range(writers)}
    if compactions:
        commands[-1] = [str(COMPACTOR), uri, setup, str(compactions)]
    procs = {
        w: subprocess.Popen(
            [sys.executable, *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w, command in commands.items()
    }
    try:
        for w, proc in procs.items():  # every process has imported lakeward and opened the table
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            assert line == "READY", f"writer {w} did not start: {line!r}"
        for proc in procs.values():  # then all begin at once
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        outcomes: dict[int, list[dict[str, Any]]] = {}
        for w, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, f"writer {w} crashed:\n{err}"
            outcomes[w] = [json.loads(line) for line in out.splitlines()]
            assert len(outcomes[w]) == rounds or w < 0, err
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return outcomes


def check_outcomes(
    uri: str, storage_options: Mapping[str, str], outcomes: dict[int, list[dict[str, Any]]], shared_lock: bool
) -> None:
    """Every acknowledged write is in the table, every failed one absent, nothing left pending.

    Compactions (outcomes of key -1, the compactor process) must all succeed and complete.
    """
    compacted = {o["instant"] for o in outcomes.get(-1, ()) if o["instant"]}
    assert [o for o in outcomes.get(-1, ()) if o["error"]] == [], "a compaction failed"
    writes = {w: rs for w, rs in outcomes.items() if w >= 0}
    succeeded = {o["instant"]: (w, o["round"]) for w, rs in writes.items() for o in rs if o["instant"]}
    failed = [(w, o) for w, rs in writes.items() for o in rs if o["error"]]
    # Under ZooKeeper some write always wins. Under the in-process lock every writer that meets
    # another's write in flight is refused, so when the processes stay in step (S3 is slow) all of
    # them can be: then the check is that each refusal left nothing behind.
    assert succeeded or not shared_lock, "no write succeeded"
    for w, o in failed:
        if shared_lock:
            # Serialised by ZooKeeper: only writes to the shared partition (odd rounds) can conflict.
            assert o["error"] == "ConcurrentWriteError" and o["round"] % 2 == 1, (w, o)
        else:
            assert o["error"] in ("SharedLockRequiredError", "ConcurrentWriteError"), (w, o)
            if o["error"] == "SharedLockRequiredError":
                assert "hoodie.write.lock.provider" in o["message"], o["message"]
            else:
                assert o["round"] % 2 == 1, (w, o)

    storage = Storage.for_uri(uri, storage_options)
    timeline = Timeline.load(storage, Table.open(uri, storage_options=storage_options).version.timeline_layout)
    assert timeline.pending() == [], f"left pending: {timeline.pending()}"
    first = timeline.completed_writes()[0].time
    assert set(timeline.completed_write_times()) == set(succeeded) | {first} | compacted, "acknowledged = completed"
    assert all(timeline.was_compaction(t) for t in compacted)
    assert [e for e in storage.list_dir(HEARTBEAT_FOLDER, recursive=True) if not e.is_dir] == []

    expected = {"shared-0": "init", "shared-1": "init"}
    for instant in sorted(succeeded):  # the acknowledged writes in instant order, and nothing else
        rows = batch(*succeeded[instant])
        expected.update(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True))
    assert _rows(uri, storage_options) == expected


# -- local disk ------------------------------------------------------------------------------
def test_writer_processes_with_the_in_process_lock_lose_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    outcomes = run_writers(uri, {}, {}, writers=3, rounds=4)
    check_outcomes(uri, {}, outcomes, shared_lock=False)


@pytest.mark.zookeeper
def test_writer_processes_with_the_zookeeper_lock_lose_nothing(tmp_path: Path, zookeeper_server: Any) -> None:
    uri = str(tmp_path / "t")
    outcomes = run_writers(uri, _zk_options(zookeeper_server.hosts), {}, writers=3, rounds=4)
    check_outcomes(uri, {}, outcomes, shared_lock=True)


@pytest.mark.slow
@pytest.mark.zookeeper
@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_writer_processes_on_hudi_1x_tables_with_the_zookeeper_lock_lose_nothing(
    tmp_path: Path, zookeeper_server: Any, version: int, table_type: str
) -> None:
    """Optimistic concurrency under the ZooKeeper lock on table versions 8 and 9, as on 6; on
    merge-on-read a compactor process plans and runs compactions beside the writes in flight
    (completion-time slicing): no acknowledged write is lost, no compaction fails."""
    uri = str(tmp_path / "t")
    mor = table_type == "MERGE_ON_READ"
    outcomes = run_writers(
        uri, _zk_options(zookeeper_server.hosts), {}, 3, 5, version, table_type, compactions=3 if mor else 0
    )
    check_outcomes(uri, {}, outcomes, shared_lock=True)
    if mor:
        assert any(o["instant"] for o in outcomes[-1]), "no compaction ran"


# -- S3 --------------------------------------------------------------------------------------
@pytest.mark.s3
def test_writer_processes_on_s3_with_the_in_process_lock_lose_nothing(s3_server: Any, s3_table_uri: str) -> None:
    outcomes = run_writers(s3_table_uri, {}, s3_server.options, writers=3, rounds=3)
    check_outcomes(s3_table_uri, s3_server.options, outcomes, shared_lock=False)


@pytest.mark.s3
@pytest.mark.zookeeper
def test_writer_processes_on_s3_with_the_zookeeper_lock_lose_nothing(
    s3_server: Any, s3_table_uri: str, zookeeper_server: Any
) -> None:
    options = _zk_options(zookeeper_server.hosts)
    outcomes = run_writers(s3_table_uri, options, s3_server.options, writers=3, rounds=3)
    check_outcomes(s3_table_uri, s3_server.options, outcomes, shared_lock=True)


# -- larger ----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.s3
@pytest.mark.zookeeper
@pytest.mark.parametrize("storage", ["local", "s3"])
@pytest.mark.parametrize("lock", ["in_process", "zookeeper"])
def test_many_writer_processes_lose_nothing(
    tmp_path: Path, s3_server: Any, s3_table_uri: str, zookeeper_server: Any, storage: str, lock: str
) -> None:
    uri, storage_options = (str(tmp_path / "t"), {}) if storage == "local" else (s3_table_uri, s3_server.options)
    options = _zk_options(zookeeper_server.hosts) if lock == "zookeeper" else {}
    outcomes = run_writers(uri, options, storage_options, writers=6, rounds=10)
    check_outcomes(uri, storage_options, outcomes, shared_lock=lock == "zookeeper")
