"""`TableContext`: what a table service needs of its table, and nothing of the write client.

Table services (compaction, clustering, clean, change tracking, index builds, archival,
savepoints) receive a context instead of the `WriteClient`: the table's storage, its
properties (`TableConfig`), the parsed `hoodie.*` write options (`WriteConfig`), the table
lock, the engine that runs per-file-group tasks, the fencing hook the daemon sets (its claim
must still hold when a service completes), the completion scope the daemon sets (a stop must
not cut a completion short once it is underway), and timeline access in the table version's layout.

The write client builds and holds one (`WriteClient.table_context`; it keeps its own commit protocol: heartbeats,
failed-write rollback, conflict checks) and exposes that protocol's recovery through the
small `WriteRecovery` protocol, so the rollback service can ask for it without importing
the client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from lakeward.core import locks  # its ZooKeeper lock (kazoo) loads when a table first needs it
from lakeward.core.config.properties import parse_properties
from lakeward.core.config.table import PROPERTIES_PATH, TableConfig, TableType
from lakeward.core.config.write import WriteConfig, parse_write_config
from lakeward.core.engine import Engine, LocalEngine, resolve_engine
from lakeward.core.exceptions import SchemaError, TableVersionChangedError
from lakeward.core.locks import LOCK_OPTION_KEYS, LockProvider
from lakeward.core.storage import Storage
from lakeward.core.table_schema import resolve_table_schema
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import Timeline, new_instant_time

#: The error every service raises when a plan needs the table's schema and no write ever set one.
NO_SCHEMA_MESSAGE = "the table has no schema: nothing was ever written"


def table_version_on_storage(storage: Storage) -> int:
    """`hoodie.table.version` as the table's `hoodie.properties` says now (6 when absent, as Hudi reads it)."""
    props = parse_properties(storage.read_bytes(PROPERTIES_PATH).decode("utf-8"))
    return int(props.get("hoodie.table.version", "6").strip())


@dataclass(frozen=True)
class Recovery:
    """What one pass of failed-write recovery repaired (the rollback service reports it)."""

    #: Pending writes rolled back: abandoned ones, and the targets of interrupted rollbacks it finished.
    rolled_back: tuple[str, ...] = ()
    #: Interrupted restores it finished from their plans.
    restores_finished: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rolled_back or self.restores_finished)

    def describe(self) -> str:
        """One line for a run's detail; empty when nothing was repaired."""
        parts = [f"finished interrupted restore {t}" for t in self.restores_finished]
        if self.rolled_back:
            parts.append(f"rolled back {list(self.rolled_back)}")
        return "; ".join(parts)


def check_version_unchanged(storage: Storage, expected: int, what: str) -> None:
    """Refuse (TableVersionChangedError) `what` when `hoodie.table.version` on storage is no longer `expected`,
    the version a handle was opened with (the table was upgraded or downgraded meanwhile)."""
    found = table_version_on_storage(storage)
    if found != expected:
        raise TableVersionChangedError(
            f"cannot {what}: it was prepared under table version {expected}, but the table at "
            f"{storage.uri} is now at table version {found} (upgraded meanwhile); nothing was written. "
            "Open the table again (and plan again) to work under the new version's rules",
            expected,
            found,
        )


class WriteRecovery(Protocol):
    """The commit protocol's recovery of failed writes (the write client implements it)."""

    def roll_back_failed_writes(self) -> Timeline:
        """Finish interrupted rollbacks and roll back failed writes (under the table lock)."""
        ...

    def roll_back_abandoned_writes(self) -> Recovery:
        """Finish interrupted restores and rollbacks, roll back pending writes whose writer is certainly
        gone; what was repaired."""
        ...


class HoldsTableContext(Protocol):
    """What the table-service functions take: a `TableContext`, or what holds one (the write client)."""

    @property
    def table_context(self) -> TableContext: ...


@dataclass
class TableContext:
    """One table as its services see it: storage, config, write config, lock, engine and hooks.

    Mutable on purpose: the daemon sets `completion_check` and `completion_scope` per run, and a caller may swap the
    `engine` of a long-lived client (tests interleave writers that way).
    """

    storage: Storage
    config: TableConfig
    write_config: WriteConfig
    lock: LockProvider
    engine: Engine
    #: The `hoodie.*` options the table was opened with.
    options: Mapping[str, Any] = field(default_factory=dict)
    #: Called with a table service's instant time right before it completes; raising stops the
    #: completion (the instant stays inflight). The daemon's fencing: its claim must still hold.
    completion_check: Callable[[str], None] | None = None
    #: Entered with a table service's instant time once its completion is underway -- past the
    #: fencing check and holding the table lock when the completion takes it -- and left when the
    #: completion ended (the instant completed, or it raised). The daemon marks its run
    #: "committing" there: a stop that comes inside no longer interrupts the completion, and one
    #: that came before (while the run waited for the lock) may still refuse it by raising on entry.
    completion_scope: Callable[[str], AbstractContextManager[None]] | None = None
    #: The write client's recovery of failed writes (None: a context without a writer).
    recovery: WriteRecovery | None = None

    @classmethod
    def build(
        cls,
        storage: Storage,
        config: TableConfig,
        options: Mapping[str, Any] | None = None,
        engine: Engine | str | None = None,
        lock: LockProvider | None = None,
    ) -> TableContext:
        """Parse the options, resolve the engine (default: local threads) and the table's lock provider."""
        opts = dict(options or {})
        write_config = parse_write_config(opts, extra_known=LOCK_OPTION_KEYS)
        return cls(
            storage=storage,
            config=config,
            write_config=write_config,
            lock=lock or locks.lock_provider_for(storage.uri, config.name, opts),
            engine=resolve_engine(engine, default=LocalEngine(write_config.parallelism)),
            options=opts,
        )

    @property
    def table_context(self) -> TableContext:
        """Itself: a context holds itself (`HoldsTableContext`)."""
        return self

    @property
    def layout(self) -> TimelineLayout:
        """The table version's timeline layout (where instants live, completion times in names)."""
        return self.config.version.timeline_layout

    @property
    def merge_on_read(self) -> bool:
        return self.config.table_type is TableType.MERGE_ON_READ

    def timeline(self) -> Timeline:
        """The active timeline, loaded now."""
        return Timeline.load(self.storage, self.layout)

    def new_instant_time(self, timeline: Timeline) -> str:
        """A new instant time after every instant of `timeline`, in the table's timeline time zone."""
        return new_instant_time(timeline.latest_time(), self.config.timeline_timezone)

    def schema(self, timeline: Timeline) -> pa.Schema | None:
        """The table's data schema as of `timeline`; None before the first write."""
        return resolve_table_schema(self.storage, timeline, self.config)

    def require_schema(self, timeline: Timeline) -> pa.Schema:
        """The table's data schema; SchemaError (the same for every service) when nothing was ever written."""
        schema = self.schema(timeline)
        if schema is None:
            raise SchemaError(NO_SCHEMA_MESSAGE)
        return schema

    def check_version(self, what: str) -> None:
        """Refuse (TableVersionChangedError) `what` when `hoodie.table.version` on storage is no longer the
        version this context was opened with: the table was upgraded meanwhile, and a write or plan prepared
        under the old version's rules (timeline folder, file naming) must not run against the new one."""
        check_version_unchanged(self.storage, self.config.table_version, what)

    def storage_version(self) -> int:
        """`hoodie.table.version` as `hoodie.properties` says now (6 when absent, as Hudi reads it)."""
        return table_version_on_storage(self.storage)

    def check_completion(self, instant_time: str) -> None:
        """Run the fencing hook (if any) for a table service about to complete `instant_time`."""
        if self.completion_check is not None:
            self.completion_check(instant_time)

    @contextmanager
    def completing(self, instant_time: str) -> Iterator[None]:
        """Around the writes that complete a table service's `instant_time`, entered once the completion is
        underway (fence passed, table lock held when the completion takes it): the completion scope (if any),
        then -- right before the irreversible writes -- the check that the table lock is still this thread's.

        A ZooKeeper lock is lost while held when its session expires (a long compaction under the lock, a
        paused process): LockError then, and the instant stays inflight for the next run, as a writer's does.
        """
        with self.completion_scope(instant_time) if self.completion_scope is not None else nullcontext():
            if self.lock.is_held:
                self.lock.ensure_held()
            yield


__all__ = [
    "NO_SCHEMA_MESSAGE",
    "check_version_unchanged",
    "HoldsTableContext",
    "Recovery",
    "TableContext",
    "WriteRecovery",
    "table_version_on_storage",
]
