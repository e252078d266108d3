"""`lock_provider_for`: the table lock that Hudi's `hoodie.write.lock.*` keys configure.

The in-process lock, or Hudi's ZooKeeper lock (`zookeeper`, over kazoo). A module of its own so that
`lakeward.core.locks` imports kazoo only when a lock is built (`lakeward.core.lazy`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lakeward.core.config.lock import parse_lock_config
from lakeward.core.exceptions import ConfigError
from lakeward.core.locks.base import LockProvider
from lakeward.core.locks.in_process import InProcessLockProvider
from lakeward.core.locks.zookeeper import ZooKeeperLockProvider

_ZK_HOST = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^:/\[\],\s]+)(?::(\d+))?")


def _zookeeper_hosts(url: str, port: int) -> str:
    """`host[:port],...[/chroot]` with `port` added to every host given without one."""
    hosts, slash, chroot = url.partition("/")
    parts = []
    for host in hosts.split(","):
        match = _ZK_HOST.fullmatch(host.strip())
        if match is None or (match.group(2) and not 0 < int(match.group(2)) < 65536):
            raise ConfigError(
                f"option hoodie.write.lock.zookeeper.url={url!r} is invalid: {host.strip()!r} is not host or host:port"
            )
        parts.append(match.group(0) if match.group(2) else f"{match.group(1)}:{port}")
    return ",".join(parts) + slash + chroot


def lock_provider_for(table_base_path: str, table_name: str, options: Mapping[str, Any]) -> LockProvider:
    """The table lock configured by `options` (Hudi's keys); not yet acquired or connected."""
    config = parse_lock_config(options)
    timing = {
        "default_timeout_s": config.wait_time_ms / 1000,
        "client_num_retries": config.client_num_retries,
        "client_retry_wait_s": config.client_wait_time_ms_between_retry / 1000,
    }
    if config.provider == "in_process":
        return InProcessLockProvider(table_base_path, **timing)
    if config.zookeeper_url is None:
        raise ConfigError("option hoodie.write.lock.zookeeper.url is required with the ZooKeeper lock provider")
    if config.zookeeper_base_path is None:
        raise ConfigError(
            "option hoodie.write.lock.zookeeper.base_path is required with the ZooKeeper lock "
            "provider (for example /hudi/locks)"
        )
    lock_key = config.zookeeper_lock_key or table_name
    if not lock_key or lock_key.startswith("/") or lock_key.endswith("/") or "//" in lock_key:
        raise ConfigError(
            f"option hoodie.write.lock.zookeeper.lock_key is required: the table name "
            f"{table_name!r} cannot serve as the lock key"
        )
    base = config.zookeeper_base_path.rstrip("/")
    return ZooKeeperLockProvider(
        _zookeeper_hosts(config.zookeeper_url, config.zookeeper_port),
        f"{base}/{lock_key}",
        session_timeout_s=config.zookeeper_session_timeout_ms / 1000,
        connection_timeout_s=config.zookeeper_connection_timeout_ms / 1000,
        num_retries=config.num_retries,
        retry_wait_s=config.wait_time_ms_between_retry / 1000,
        retry_max_wait_s=config.max_wait_time_ms_between_retry / 1000,
        **timing,
    )
