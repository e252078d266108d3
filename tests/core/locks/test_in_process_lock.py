"""InProcessLockProvider and the lock options parsed by lock_provider_for."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from lakeward.core.exceptions import ConfigError, LockError
from lakeward.core.locks import (
    LOCK_OPTION_KEYS,
    InProcessLockProvider,
    LockProvider,
    lock_provider_for,
    parse_lock_config,
)


@pytest.fixture
def table_path(tmp_path) -> str:
    return str(tmp_path / f"table_{uuid.uuid4().hex}")


def _hold_in_thread(provider: LockProvider) -> tuple[threading.Event, threading.Event, threading.Thread]:
    """Acquire `provider` in another thread and hold it until `release_now` is set."""
    held, release_now = threading.Event(), threading.Event()

    def hold() -> None:
        with provider:
            held.set()
            release_now.wait(30)

    thread = threading.Thread(target=hold)
    thread.start()
    assert held.wait(10)
    return held, release_now, thread


def test_in_process_lock_providers_of_one_table_exclude_each_other(table_path):
    first = InProcessLockProvider(table_path)
    second = InProcessLockProvider(table_path)
    _, release_now, thread = _hold_in_thread(first)

    began = time.monotonic()
    with pytest.raises(LockError, match="timed out .* in-process lock of table"):
        second.acquire(timeout_s=0.3)
    assert time.monotonic() - began >= 0.25
    with pytest.raises(LockError, match="timed out"):
        second.acquire(timeout_s=0)

    release_now.set()
    thread.join(10)
    second.acquire(timeout_s=5)
    assert second.is_held
    second.release()
    assert not second.is_held


def test_in_process_lock_waiter_gets_lock_once_released(table_path):
    first, second = InProcessLockProvider(table_path), InProcessLockProvider(table_path)
    _, release_now, thread = _hold_in_thread(first)
    got_it: list[float] = []

    def wait() -> None:
        with second:
            got_it.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    assert not got_it
    released_at = time.monotonic()
    release_now.set()
    waiter.join(10)
    thread.join(10)
    assert got_it and got_it[0] - released_at < 1.0


def test_in_process_lock_same_provider_shared_by_threads_excludes_them(table_path):
    provider = InProcessLockProvider(table_path)
    _, release_now, thread = _hold_in_thread(provider)
    with pytest.raises(LockError, match="timed out"):
        provider.acquire(timeout_s=0.2)
    release_now.set()
    thread.join(10)
    with provider:
        pass


def test_in_process_lock_different_tables_do_not_exclude(tmp_path):
    _, release_now, thread = _hold_in_thread(InProcessLockProvider(str(tmp_path / "a")))
    try:
        with InProcessLockProvider(str(tmp_path / "b")) as other:
            assert other.is_held
    finally:
        release_now.set()
        thread.join(10)


def test_in_process_lock_spellings_of_one_path_share_a_lock(table_path):
    _, release_now, thread = _hold_in_thread(InProcessLockProvider(table_path + "/"))
    try:
        for spelling in (table_path, f"file://{table_path}", table_path + "/./"):
            with pytest.raises(LockError):
                InProcessLockProvider(spelling).acquire(timeout_s=0.05)
    finally:
        release_now.set()
        thread.join(10)
    assert InProcessLockProvider("s3a://bucket/t/").table_base_path == "s3://bucket/t"


def test_in_process_lock_is_reentrant_for_the_holding_thread(table_path):
    provider, other_provider = InProcessLockProvider(table_path), InProcessLockProvider(table_path)
    with provider:
        with provider:
            provider.ensure_held()
        provider.ensure_held()  # the inner exit did not give the lock back
        other_provider.acquire(timeout_s=1)  # same thread, another provider: no self-deadlock
        other_provider.ensure_held()
        other_provider.release()
        acquired_elsewhere: list[bool] = []
        thread = threading.Thread(target=lambda: acquired_elsewhere.append(_try(InProcessLockProvider(table_path))))
        thread.start()
        thread.join(10)
        assert acquired_elsewhere == [False]
    assert not provider.is_held
    assert _try(InProcessLockProvider(table_path))


def _try(provider: LockProvider) -> bool:
    try:
        provider.acquire(timeout_s=0.1)
    except LockError:
        return False
    provider.release()
    return True


def test_in_process_lock_excludes_concurrent_threads(table_path):
    counter = 0
    inside = 0
    max_inside = 0

    def work() -> None:
        nonlocal counter, inside, max_inside
        provider = InProcessLockProvider(table_path)
        for _ in range(50):
            with provider:
                inside += 1
                max_inside = max(max_inside, inside)
                value = counter
                time.sleep(0)  # invite a thread switch inside the critical section
                counter = value + 1
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert counter == 400
    assert max_inside == 1


def test_in_process_lock_release_errors(table_path):
    provider = InProcessLockProvider(table_path)
    with pytest.raises(LockError, match="does not hold"):
        provider.release()
    provider.acquire(timeout_s=1)
    errors: list[Exception] = []

    def release_from_other_thread() -> None:
        try:
            provider.release()
        except LockError as exc:
            errors.append(exc)

    thread = threading.Thread(target=release_from_other_thread)
    thread.start()
    thread.join(10)
    assert len(errors) == 1
    assert provider.is_held
    with pytest.raises(LockError, match="not held"):
        InProcessLockProvider(table_path).ensure_held()
    provider.release()


def test_in_process_lock_context_manager_releases_on_error(table_path):
    provider = InProcessLockProvider(table_path)
    with pytest.raises(RuntimeError, match="boom"):
        with provider:
            raise RuntimeError("boom")
    assert not provider.is_held
    assert _try(InProcessLockProvider(table_path))


def test_in_process_lock_close_releases(table_path):
    provider = InProcessLockProvider(table_path)
    provider.acquire(timeout_s=1)
    provider.acquire(timeout_s=1)
    provider.close()
    assert not provider.is_held
    thread_result: list[bool] = []
    thread = threading.Thread(target=lambda: thread_result.append(_try(InProcessLockProvider(table_path))))
    thread.start()
    thread.join(10)
    assert thread_result == [True]


def test_in_process_lock_negative_timeout_is_rejected(table_path):
    with pytest.raises(ValueError, match="negative"):
        InProcessLockProvider(table_path).acquire(timeout_s=-1)


@pytest.mark.parametrize(
    "provider_name",
    [None, "in_process", " org.apache.hudi.client.transaction.lock.InProcessLockProvider "],
)
def test_lock_provider_for_in_process(table_path, provider_name):
    options = {"hoodie.datasource.write.recordkey.field": "id"}  # not a lock key: ignored
    if provider_name is not None:
        options["hoodie.write.lock.provider"] = provider_name
    provider = lock_provider_for(table_path, "trips", options)
    assert isinstance(provider, InProcessLockProvider)
    assert provider.default_timeout_s == 60.0


def test_lock_provider_for_waits_wait_time_ms_by_default(table_path):
    provider = lock_provider_for(table_path, "trips", {"hoodie.write.lock.wait_time_ms": 200})
    _, release_now, thread = _hold_in_thread(InProcessLockProvider(table_path))
    try:
        began = time.monotonic()
        with pytest.raises(LockError, match="wait_time_ms"):
            provider.acquire()
        assert 0.15 <= time.monotonic() - began < 2
    finally:
        release_now.set()
        thread.join(10)


def test_lock_provider_for_client_retries_wait_again(table_path):
    provider = lock_provider_for(
        table_path,
        "trips",
        {
            "hoodie.write.lock.wait_time_ms": "100",
            "hoodie.write.lock.client.num_retries": "2",
            "hoodie.write.lock.client.wait_time_ms_between_retry": "100",
        },
    )
    _, release_now, thread = _hold_in_thread(InProcessLockProvider(table_path))
    try:
        began = time.monotonic()
        with pytest.raises(LockError):
            provider.acquire()
        assert time.monotonic() - began >= 0.45  # 3 attempts of 0.1 s and 2 pauses of 0.1 s
        # A release during the retries lets the next attempt succeed.
        threading.Timer(0.15, release_now.set).start()
        provider.acquire()
        provider.release()
    finally:
        release_now.set()
        thread.join(10)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        (
            {"hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.FileSystemBasedLockProvider"},
            "hoodie.write.lock.provider",
        ),
        ({"hoodie.write.lock.provider": "redis"}, "hoodie.write.lock.provider"),
        ({"hoodie.write.lock.wait_time_ms": "soon"}, "hoodie.write.lock.wait_time_ms"),
        ({"hoodie.write.lock.wait_time_ms": -5}, "hoodie.write.lock.wait_time_ms"),
        ({"hoodie.write.lock.client.num_retries": "-1"}, "hoodie.write.lock.client.num_retries"),
        ({"hoodie.write.lock.filesystem.path": "/tmp/locks"}, "hoodie.write.lock.filesystem.path"),
        ({"hoodie.write.lock.wait_time": "10"}, "hoodie.write.lock.wait_time"),
        (
            {"hoodie.write.lock.conflict.resolution.strategy": "com.example.Mine"},
            "hoodie.write.lock.conflict.resolution.strategy",
        ),
    ],
)
def test_lock_config_errors_name_the_key(table_path, options, key):
    with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')}\b"):
        lock_provider_for(table_path, "trips", options)


def test_lock_config_parses_hudi_values():
    config = parse_lock_config(
        {
            "hoodie.write.lock.provider": "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider",
            "hoodie.write.lock.zookeeper.session_timeout_ms": "30000",
            "hoodie.write.lock.conflict.resolution.strategy": (
                "org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy"
            ),
        }
    )
    assert config.provider == "zookeeper"
    assert config.zookeeper_session_timeout_ms == 30000
    assert config.wait_time_ms == 60000


def test_lock_option_keys_cover_the_documented_hudi_keys():
    assert LOCK_OPTION_KEYS >= {
        "hoodie.write.lock.provider",
        "hoodie.write.lock.wait_time_ms",
        "hoodie.write.lock.client.num_retries",
        "hoodie.write.lock.client.wait_time_ms_between_retry",
        "hoodie.write.lock.num_retries",
        "hoodie.write.lock.wait_time_ms_between_retry",
        "hoodie.write.lock.max_wait_time_ms_between_retry",
        "hoodie.write.lock.zookeeper.url",
        "hoodie.write.lock.zookeeper.port",
        "hoodie.write.lock.zookeeper.base_path",
        "hoodie.write.lock.zookeeper.lock_key",
        "hoodie.write.lock.zookeeper.session_timeout_ms",
        "hoodie.write.lock.zookeeper.connection_timeout_ms",
    }
    assert all(key.startswith("hoodie.write.lock.") for key in LOCK_OPTION_KEYS)
