"""ZooKeeperLockProvider against a real ZooKeeper server (fixture `zookeeper_server`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from kazoo.client import KazooClient

from lakeward.core.exceptions import ConfigError, LockError
from lakeward.core.locks import LOCK_OPTION_KEYS, ZooKeeperLockProvider, lock_provider_for
from tests.support.zookeeper import free_port

pytestmark = pytest.mark.zookeeper

ZK_PROVIDER = "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"


@pytest.fixture
def zk_options(zookeeper_server) -> dict[str, str]:
    """Hudi-style options for one fresh lock node (host and port given separately)."""
    return {
        "hoodie.write.lock.provider": ZK_PROVIDER,
        "hoodie.write.lock.zookeeper.url": "127.0.0.1",
        "hoodie.write.lock.zookeeper.port": str(zookeeper_server.port),
        "hoodie.write.lock.zookeeper.base_path": "/lakeward-tests/locks",
        "hoodie.write.lock.zookeeper.lock_key": f"table_{uuid.uuid4().hex}",
        "hoodie.write.lock.zookeeper.session_timeout_ms": "2000",
        "hoodie.write.lock.zookeeper.connection_timeout_ms": "5000",
        "hoodie.write.lock.wait_time_ms": "10000",
    }


@pytest.fixture
def make_provider(zk_options) -> Iterator[Callable[..., ZooKeeperLockProvider]]:
    """Factory of providers on the same lock node, each with its own kazoo client."""
    made: list[ZooKeeperLockProvider] = []

    def make(**overrides: str) -> ZooKeeperLockProvider:
        provider = lock_provider_for("/tables/trips", "trips", {**zk_options, **overrides})
        assert isinstance(provider, ZooKeeperLockProvider)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture
def raw_client(zookeeper_server) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


def test_zookeeper_lock_second_client_times_out_then_acquires_after_release(make_provider):
    first, second = make_provider(), make_provider()
    assert first.lock_path == second.lock_path
    first.acquire()
    assert first.is_held

    began = time.monotonic()
    with pytest.raises(LockError, match="timed out .* ZooKeeper lock /lakeward-tests/locks/"):
        second.acquire(timeout_s=0.5)
    assert time.monotonic() - began >= 0.45
    with pytest.raises(LockError, match="timed out"):
        second.acquire(timeout_s=0)
    assert not second.is_held

    first.release()
    second.acquire(timeout_s=5)
    second.ensure_held()
    with pytest.raises(LockError, match="timed out"):
        first.acquire(timeout_s=0.2)
    second.release()
    with first:
        first.ensure_held()


def test_zookeeper_lock_timeout_message_names_the_holder(make_provider):
    first, second = make_provider(), make_provider()
    with first:
        with pytest.raises(LockError, match=rf"held by .*:{os.getpid()}"):
            second.acquire(timeout_s=0.2)


def test_zookeeper_lock_waiter_wakes_up_when_holder_releases(make_provider):
    first, second = make_provider(), make_provider()
    first.acquire()
    acquired_at: list[float] = []

    def wait_for_lock() -> None:
        second.acquire(timeout_s=20)
        acquired_at.append(time.monotonic())
        second.release()

    waiter = threading.Thread(target=wait_for_lock)
    waiter.start()
    time.sleep(0.5)
    assert not acquired_at, "the second client got the lock while the first held it"
    released_at = time.monotonic()
    first.release()
    waiter.join(timeout=20)
    assert acquired_at, "the second client never got the lock"
    assert acquired_at[0] - released_at < 2.0  # woken by the watch, not by polling


def test_zookeeper_lock_excludes_concurrent_holders(make_provider):
    providers = [make_provider() for _ in range(4)]
    inside = 0
    max_inside = 0
    entries = 0
    state_lock = threading.Lock()

    def work(provider: ZooKeeperLockProvider) -> None:
        nonlocal inside, max_inside, entries
        for _ in range(5):
            with provider:
                with state_lock:
                    inside += 1
                    entries += 1
                    max_inside = max(max_inside, inside)
                time.sleep(0.01)
                with state_lock:
                    inside -= 1

    threads = [threading.Thread(target=work, args=(p,)) for p in providers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert entries == 20
    assert max_inside == 1


def test_zookeeper_lock_is_reentrant_for_the_holding_thread(make_provider):
    provider, other = make_provider(), make_provider()
    with provider:
        with provider:
            provider.ensure_held()
        provider.ensure_held()  # the inner exit did not give the lock back
        with pytest.raises(LockError):
            other.acquire(timeout_s=0.2)
    assert not provider.is_held
    other.acquire(timeout_s=5)
    other.release()


def test_zookeeper_lock_released_when_holder_client_closes(make_provider):
    holder, waiter = make_provider(), make_provider()
    holder.acquire()
    with pytest.raises(LockError):
        waiter.acquire(timeout_s=0.2)
    holder.close()
    waiter.acquire(timeout_s=5)
    waiter.release()
    with pytest.raises(LockError, match="closed"):
        holder.acquire(timeout_s=0.2)


def test_zookeeper_lock_freed_after_holder_process_dies(make_provider, zk_options):
    script = textwrap.dedent(
        f"""
        import sys, time
        from lakeward.core.locks import lock_provider_for
        provider = lock_provider_for("/tables/trips", "trips", {zk_options!r})
        provider.acquire(timeout_s=10)
        print("held", flush=True)
        time.sleep(600)
        """
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            waiter = make_provider()
            with pytest.raises(LockError):
                waiter.acquire(timeout_s=0.5)
            holder.kill()
            holder.wait(timeout=10)
            killed_at = time.monotonic()
            waiter.acquire(timeout_s=15)  # once the dead holder's 2 s session expires
            assert time.monotonic() - killed_at < 10
            waiter.release()
        finally:
            holder.kill()


def test_zookeeper_lock_lost_when_session_expires(make_provider, zookeeper_server):
    holder, other = make_provider(), make_provider()
    holder.acquire()
    holder.ensure_held()

    # Expire the holder's session on the server: attach a second connection to the same
    # session and close it (the way ZooKeeper's own tests force an expiry).
    session_id, password = holder._client.client_id  # type: ignore[union-attr]
    hijacker = KazooClient(hosts=zookeeper_server.hosts, client_id=(session_id, password))
    hijacker.start(timeout=10)
    hijacker.stop()
    hijacker.close()

    other.acquire(timeout_s=10)  # the expired session's node is gone
    with pytest.raises(LockError, match="lock was lost"):
        holder.ensure_held()
    with pytest.raises(LockError, match="lock was lost"):
        holder.release()
    assert not holder.is_held
    other.release()

    # The provider recovers with a new session.
    holder.acquire(timeout_s=10)
    holder.ensure_held()
    holder.release()


def test_zookeeper_lock_survives_server_restart_without_blocking_others(make_provider, zookeeper_server):
    holder = make_provider(**{"hoodie.write.lock.zookeeper.connection_timeout_ms": "1000"})
    holder.acquire()
    zookeeper_server.stop()
    try:
        with pytest.raises(LockError, match="ZooKeeper"):
            holder.ensure_held()
    finally:
        zookeeper_server.start()
    # Whether or not the session outlived the restart, the lock is usable again.
    try:
        holder.release()
    except LockError as exc:
        assert "ZooKeeper" in str(exc)
    other = make_provider()
    other.acquire(timeout_s=15)
    other.release()


def test_zookeeper_lock_excludes_hudi_curator_lock_nodes(make_provider, zk_options, raw_client):
    """A node named like Curator's InterProcessMutex (Hudi's Java writers) holds the lock."""
    lock_path = (
        f"{zk_options['hoodie.write.lock.zookeeper.base_path']}/{zk_options['hoodie.write.lock.zookeeper.lock_key']}"
    )
    raw_client.ensure_path(lock_path)
    curator_node = raw_client.create(
        f"{lock_path}/_c_{uuid.uuid4()}-lock-", b"hudi-java", ephemeral=True, sequence=True
    )
    provider = make_provider()
    with pytest.raises(LockError, match="timed out"):
        provider.acquire(timeout_s=0.3)
    raw_client.delete(curator_node)
    provider.acquire(timeout_s=5)
    provider.release()


def test_zookeeper_lock_node_lives_under_base_path_and_lock_key(make_provider, zk_options, raw_client):
    provider = make_provider()
    lock_path = "/lakeward-tests/locks/" + zk_options["hoodie.write.lock.zookeeper.lock_key"]
    assert provider.lock_path == lock_path
    with provider:
        children = raw_client.get_children(lock_path)
        assert len(children) == 1
    assert raw_client.get_children(lock_path) == []


def test_zookeeper_lock_key_defaults_to_table_name(zookeeper_server):
    options = {
        "hoodie.write.lock.provider": "zookeeper",
        "hoodie.write.lock.zookeeper.url": zookeeper_server.hosts,
        "hoodie.write.lock.zookeeper.base_path": "/lakeward-tests/default-key/",
    }
    table_name = f"trips_{uuid.uuid4().hex[:8]}"
    provider = lock_provider_for("/tables/trips", table_name, options)
    try:
        assert isinstance(provider, ZooKeeperLockProvider)
        assert provider.lock_path == f"/lakeward-tests/default-key/{table_name}"
        assert provider.hosts == zookeeper_server.hosts
        with provider:
            provider.ensure_held()
    finally:
        provider.close()


def test_zookeeper_lock_unreachable_server_raises_lock_error(zookeeper_server):
    provider = lock_provider_for(
        "/tables/trips",
        "trips",
        {
            "hoodie.write.lock.provider": "zookeeper",
            "hoodie.write.lock.zookeeper.url": f"127.0.0.1:{free_port()}",
            "hoodie.write.lock.zookeeper.base_path": "/locks",
            "hoodie.write.lock.zookeeper.connection_timeout_ms": "500",
        },
    )
    began = time.monotonic()
    with pytest.raises(LockError, match="cannot connect to ZooKeeper"):
        provider.acquire(timeout_s=5)
    assert time.monotonic() - began < 5
    provider.close()


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"hoodie.write.lock.zookeeper.base_path": "/locks"}, "hoodie.write.lock.zookeeper.url"),
        ({"hoodie.write.lock.zookeeper.url": "zk"}, "hoodie.write.lock.zookeeper.base_path"),
        (
            {"hoodie.write.lock.zookeeper.url": "zk", "hoodie.write.lock.zookeeper.base_path": "locks"},
            "hoodie.write.lock.zookeeper.base_path",
        ),
        (
            {"hoodie.write.lock.zookeeper.url": "zk:port", "hoodie.write.lock.zookeeper.base_path": "/l"},
            "hoodie.write.lock.zookeeper.url",
        ),
        ({"hoodie.write.lock.zookeeper.port": "99999"}, "hoodie.write.lock.zookeeper.port"),
        ({"hoodie.write.lock.zookeeper.session_timeout_ms": "-1"}, "hoodie.write.lock.zookeeper.session_timeout_ms"),
        (
            {"hoodie.write.lock.zookeeper.connection_timeout_ms": "x"},
            "hoodie.write.lock.zookeeper.connection_timeout_ms",
        ),
        ({"hoodie.write.lock.zookeeper.lock_key": "/abs"}, "hoodie.write.lock.zookeeper.lock_key"),
        ({"hoodie.write.lock.zookeeper.connect_url": "zk"}, "hoodie.write.lock.zookeeper.connect_url"),
        ({"hoodie.write.lock.num_retries": "many"}, "hoodie.write.lock.num_retries"),
    ],
)
def test_zookeeper_lock_config_errors_name_the_key(options, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        lock_provider_for("/tables/trips", "trips", {"hoodie.write.lock.provider": ZK_PROVIDER, **options})


def test_zookeeper_lock_option_keys_are_exported():
    assert {
        "hoodie.write.lock.provider",
        "hoodie.write.lock.zookeeper.url",
        "hoodie.write.lock.zookeeper.port",
        "hoodie.write.lock.zookeeper.base_path",
        "hoodie.write.lock.zookeeper.lock_key",
        "hoodie.write.lock.zookeeper.session_timeout_ms",
        "hoodie.write.lock.zookeeper.connection_timeout_ms",
        "hoodie.write.lock.wait_time_ms",
    } <= LOCK_OPTION_KEYS
