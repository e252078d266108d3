"""Writers in separate processes' worth of clients, serialised by the ZooKeeper table lock."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from kazoo.client import KazooClient

from lakeward import Table

pytestmark = pytest.mark.zookeeper


def _zk_options(hosts: str) -> dict[str, str]:
    host, port = hosts.split(":")
    return {
        "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider",
        "hoodie.write.lock.zookeeper.url": host,
        "hoodie.write.lock.zookeeper.port": port,
        "hoodie.write.lock.zookeeper.base_path": "/lakeward/locks",
    }


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
