"""Table commands next to a running daemon: use its lock settings, or refuse.

`lakeward compact|cluster|clean|rollback ... PATH --config lakeward.yaml` (or with
`LAKEWARD_CONFIG` set) opens the table with the options the daemon opens it with -- its
ZooKeeper table lock, the policy's `hoodie_options` -- so an on-call engineer's command
and the daemon's runs take the same lock. When the daemon serves the table but configures
no lock that another process can see (no `zookeeper.hosts`, no ZooKeeper
`hoodie.write.lock.provider` in the table's `hoodie_options`), the command refuses: two
processes under in-process locks would race on the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakeward.core.config.lock import LOCK_PROVIDER_KEY
from lakeward.services.daemon import table_options_for
from lakeward.services.discovery import table_name_for
from lakeward.services.model import table_location
from lakeward.services.settings import DaemonSettings

#: Lock providers other processes honour (values of hoodie.write.lock.provider).
SHARED_PROVIDERS = frozenset({"zookeeper", "org.apache.hudi.client.transaction.lock.ZookeeperBasedLockProvider"})


class UncoordinatedTableError(ValueError):
    """The daemon serves the table without a lock a table command could share."""


@dataclass(frozen=True)
class ServedTable:
    """The daemon's name of a table path, and the options it opens the table with."""

    name: str
    options: dict[str, str]


def served_name(settings: DaemonSettings, path: str) -> str | None:
    """The name the daemon gives the table at `path` (a static table, or one under a discovery
    root within its depth), or None if the daemon does not serve it."""
    # locations, not strings: /x/t, /x/t/, file:///x/t and /x/y/../t are one table
    target = table_location(path)
    for ref in settings.static_tables():
        if table_location(ref.path) == target:
            return ref.name
    for root in settings.tables.roots:
        base = table_location(root.path)
        if target.startswith(base.rstrip("/") + "/"):
            rel = target[len(base.rstrip("/")) + 1 :]
            if 0 < len(rel.split("/")) <= root.max_depth:
                return table_name_for(root.path, rel)
    return None


def coordinated_options(settings: DaemonSettings, path: str) -> ServedTable | None:
    """The daemon's options for the table at `path`; None when the daemon does not serve it.

    Raises UncoordinatedTableError when it serves it without a shared lock (module doc).
    """
    name = served_name(settings, path)
    if name is None:
        return None
    options = table_options_for(settings, name)
    if options.get(LOCK_PROVIDER_KEY) not in SHARED_PROVIDERS:
        raise UncoordinatedTableError(
            f"the daemon's configuration serves {path} as table {name!r} but configures no table lock "
            f"another process can share: set zookeeper.hosts (the daemon then locks tables in ZooKeeper), "
            f"or {LOCK_PROVIDER_KEY}: zookeeper in policies.overrides.{name}.hoodie_options; "
            f"running this command next to the daemon without one would race it"
        )
    return ServedTable(name, options)


__all__ = ["ServedTable", "UncoordinatedTableError", "coordinated_options", "served_name"]
