"""Table services by action: the one place that lists them.

The daemon (`lakeward.services.execution`) and `Table.services` look a service up here by
its action name (the daemon's `ServiceAction` values). A new service is one module (a
`PlannedService` or `DirectService` subclass) plus one entry below.
"""

from __future__ import annotations

from typing import Any

from lakeward.core.exceptions import ConfigError
from lakeward.core.table_services.archival import ArchivalService
from lakeward.core.table_services.change_tracking import ChangeTrackingService
from lakeward.core.table_services.clean.execute import CleanService
from lakeward.core.table_services.clustering.execute import ClusteringService
from lakeward.core.table_services.compaction.execute import CompactionService
from lakeward.core.table_services.index_build.execute import IndexBuildService
from lakeward.core.table_services.metadata_compaction import MetadataCompactionService
from lakeward.core.table_services.orphan_clean import OrphanCleanService
from lakeward.core.table_services.rollback_service import RollbackService
from lakeward.core.table_services.service import TableService

#: Every table service, keyed by its action.
SERVICES: dict[str, type[TableService[Any]]] = {
    service.action: service
    for service in (
        RollbackService,
        CleanService,
        CompactionService,
        ClusteringService,
        ArchivalService,
        ChangeTrackingService,
        IndexBuildService,
        OrphanCleanService,
        MetadataCompactionService,
    )
}


def service_for(action: str) -> type[TableService[Any]]:
    """The service registered for `action`; ConfigError naming the registered ones otherwise."""
    try:
        return SERVICES[action]
    except KeyError:
        raise ConfigError(f"no table service is registered for {action!r}; registered: {sorted(SERVICES)}") from None


__all__ = ["SERVICES", "service_for"]
