"""Writers in separate processes' worth of clients, serialised by the ZooKeeper table lock."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from lakeward import Table
from tests.support.zookeeper import expire_client_session, hudi_lock_options

pytestmark = pytest.mark.zookeeper


def _zk_options(hosts: str) -> dict[str, str]:
    return hudi_lock_options(hosts, "/lakeward/locks")


def test_writers_with_zookeeper_lock_on_disjoint_partitions_lose_nothing(tmp_path, zookeeper_server):
    path = str(tmp_path / "t")
    options = _zk_options(zookeeper_server.hosts)
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", options=options)
    errors: list[BaseException] = []

    def writer(part: str, base: int) -> None:
        table = Table.open(path, options=options)  # its own ZooKeeper client
        try:
            for round_ in range(4):
                ids = list(range(base + round_ * 10, base + round_ * 10 + 10))
                table.upsert(pa.table({"id": ids, "part": [part] * 10, "ts": [round_] * 10}))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p, b)) for p, b in (("a", 0), ("b", 1000))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    table = Table.open(path)
    ids = sorted(table.read(columns=["id"]).column(0).to_pylist())
    assert ids == list(range(0, 40)) + list(range(1000, 1040))
    assert len(table.completed_instants()) == 8

    zk = KazooClient(hosts=zookeeper_server.hosts)
    zk.start()
    try:
        assert zk.exists("/lakeward/locks/t") is not None  # the lock node Hudi's provider would use
    finally:
        zk.stop()
        zk.close()


def test_a_write_whose_lock_is_lost_before_completing_is_not_completed(tmp_path, zookeeper_server, monkeypatch):
    """The ZooKeeper session expires between the conflict check and completion: no commit, table unchanged."""
    import lakeward.core.write.client as client_mod
    from lakeward.core.exceptions import LockError

    path = str(tmp_path / "t")
    options = _zk_options(zookeeper_server.hosts)
    table = Table.create(path, record_key="id", partition_by="part", options=options)
    table.upsert(pa.table({"id": [1], "part": ["a"], "v": ["before"]}))
    writer = Table.open(path, options=options)
    original = client_mod.WriteClient._check_conflicts

    def expire_session_after_check(self, *args, **kwargs):
        original(self, *args, **kwargs)
        expire_client_session(self.lock._client, zookeeper_server.hosts)  # the writer's own ZooKeeper session

    monkeypatch.setattr(client_mod.WriteClient, "_check_conflicts", expire_session_after_check)
    with pytest.raises(LockError, match="lost"):
        writer.upsert(pa.table({"id": [1], "part": ["a"], "v": ["after"]}))
    monkeypatch.undo()
    reread = Table.open(path)
    assert reread.read(columns=["v"]).column(0).to_pylist() == ["before"]
    assert len([i for i in reread.completed_instants() if i.action.value == "commit"]) == 1
    reread.upsert(pa.table({"id": [2], "part": ["a"], "v": ["next"]}))  # the table is writable
    assert sorted(Table.open(path).read(columns=["v"]).column(0).to_pylist()) == ["before", "next"]
