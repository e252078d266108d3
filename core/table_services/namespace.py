"""`Table.services`: one namespace per table service (`table.services.compaction.schedule()`).

Each namespace binds a registered service to its table: `schedule`, `execute`, `pending`
(and `report`, the daemon's summary of a result). `pending` reads the timeline only, so it
works on every table version; `schedule` and `execute` build the table's context through
`Table.service_context(action)`, which refuses a service lakeward does not run on the
table's version (`TableVersion.runs_service`).
The flat methods of `Table` (`schedule_compaction`, `run_compaction`, ...) are aliases of these.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, Protocol, TypeVar

from lakeward.core.config.table import TableConfig
from lakeward.core.context import TableContext, table_version_on_storage
from lakeward.core.engine import Engine, resolve_engine
from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.storage import Storage
from lakeward.core.table_services.archival import ArchiveResult
from lakeward.core.table_services.change_tracking import ChangeTrackingResult
from lakeward.core.table_services.clean import CleanResult
from lakeward.core.table_services.clustering import ClusteringResult
from lakeward.core.table_services.compaction import CompactionResult
from lakeward.core.table_services.index_build import IndexBuildResult
from lakeward.core.table_services.registry import SERVICES, service_for
from lakeward.core.table_services.service import ServiceReport, TableService
from lakeward.core.timeline import Instant, Timeline, instant_time_of

ResultT = TypeVar("ResultT")


class ServiceHost(Protocol):
    """What a namespace needs of its table (`Table` is one)."""

    storage: Storage

    @property
    def config(self) -> TableConfig: ...

    def timeline(self) -> Timeline: ...

    def service_context(self, service: str | None = None) -> TableContext: ...

    def check_open(self) -> None: ...


class ServiceNamespace(Generic[ResultT]):
    """One service of one table: `schedule()`, `execute(instant)`, `pending()`."""

    def __init__(self, host: ServiceHost, service: type[TableService[ResultT]]):
        self._host = host
        self._service = service

    @property
    def action(self) -> str:
        return self._service.action

    @property
    def planned(self) -> bool:
        """Whether the service writes a plan first (else `execute` does the work directly)."""
        return self._service.planned

    def schedule(self, **options: Any) -> str | None:
        """Write a new plan; its instant time, or None when nothing is due (see each service's options)."""
        self._check_request(None)
        return self._bound().schedule(**options)

    def execute(self, instant: str | Instant | None = None, *, engine: Engine | str | None = None) -> ResultT:
        """Run the plan `instant` to completion (idempotent); direct services take no instant."""
        instant_time = instant_time_of(instant) if instant is not None else None
        self._check_request(instant_time)
        ctx = self._host.service_context(self.action)
        return self._service(ctx).execute(instant_time, engine=resolve_engine(engine, default=ctx.engine))

    def _check_request(self, instant_time: str | None) -> None:
        """Refuse, before the table's context is built, what the service would refuse after it: a
        service that does not apply to the table (ConfigError), a plan that is not on the timeline
        (InstantNotFoundError). Building the context may change the table (it builds a missing
        metadata table, drops index partitions lakeward cannot keep), which a refused request must not."""
        self._host.check_open()
        reason = self.unavailable_reason()
        if reason is not None:
            raise ConfigError(reason)
        if instant_time is None or not self.planned:
            return
        storage, timeline = self._host.storage, self._host.timeline()
        pending = self._service.pending_of(storage, timeline)  # metadata compactions: on the metadata timeline
        if instant_time in pending or any(i.time == instant_time for i in timeline.instants):
            return
        if table_version_on_storage(storage) == self._host.config.table_version:  # else refused as stale, below
            raise InstantNotFoundError(f"no {self.action} plan {instant_time}; pending: {pending or 'none'}")

    def pending(self) -> list[str]:
        """Instant times of this service's plans that have not completed, oldest first."""
        return self._service.pending_of(self._host.storage, self._host.timeline())

    def unavailable_reason(self) -> str | None:
        """Why the service cannot run on this table (None: it can); checks nothing else."""
        return self._service.unavailable_reason(self._host.storage, self._host.config)

    def report(self, result: ResultT) -> ServiceReport:
        """The daemon's summary of a result of `execute` (counts and one line)."""
        return self._bound().report(result)

    def _bound(self) -> TableService[ResultT]:
        return self._service(self._host.service_context(self.action))


class TableServices:
    """The table services of one table, as namespaces (also by action: `services["compaction"]`)."""

    def __init__(self, host: ServiceHost):
        self._host = host
        self.compaction: ServiceNamespace[CompactionResult] = self["compaction"]
        self.clustering: ServiceNamespace[ClusteringResult] = self["clustering"]
        self.clean: ServiceNamespace[CleanResult] = self["clean"]
        self.change_tracking: ServiceNamespace[ChangeTrackingResult] = self["change_tracking"]
        self.index_build: ServiceNamespace[IndexBuildResult] = self["index_build"]
        self.archival: ServiceNamespace[ArchiveResult] = self["archival"]
        self.rollback: ServiceNamespace[list[str]] = self["rollback"]
        self.orphan_clean: ServiceNamespace[Any] = self["orphan_clean"]
        self.metadata_compaction: ServiceNamespace[Any] = self["metadata_compaction"]

    def __getitem__(self, action: str) -> ServiceNamespace[Any]:
        return ServiceNamespace(self._host, service_for(action))

    def __iter__(self) -> Iterator[str]:
        return iter(SERVICES)


__all__ = ["ServiceHost", "ServiceNamespace", "TableServices"]
