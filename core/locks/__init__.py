"""Table locks, held around plan scheduling and commit, configured with Hudi's keys.

`lock_provider_for(base_path, table_name, options)` (`providers`) builds the lock the
`hoodie.write.lock.*` keys name: the in-process lock or Hudi's ZooKeeper lock. The keys, their
defaults and their validation are the lock scope of the config, `lakeward.core.config.lock`
(re-exported here). `lock_provider_for` and `ZooKeeperLockProvider` load on first use: the ZooKeeper
lock imports kazoo, which opening a table to read it does not need (start-up time, issue 23).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakeward.core.config.lock import LOCK_OPTION_KEYS, LockConfig, parse_lock_config
from lakeward.core.lazy import on_first_use
from lakeward.core.locks.base import LockProvider
from lakeward.core.locks.in_process import InProcessLockProvider, normalize_base_path

if TYPE_CHECKING:
    from lakeward.core.locks.providers import lock_provider_for
    from lakeward.core.locks.zookeeper import ZooKeeperLockProvider

__all__ = [
    "LOCK_OPTION_KEYS",
    "InProcessLockProvider",
    "LockConfig",
    "LockProvider",
    "ZooKeeperLockProvider",
    "lock_provider_for",
    "normalize_base_path",
    "parse_lock_config",
]

__getattr__ = on_first_use(__name__, {"ZooKeeperLockProvider": "zookeeper", "lock_provider_for": "providers"})
