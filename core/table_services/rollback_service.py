"""Rolling back abandoned writes as a table service (the daemon's `rollback` action).

Kept apart from `rollback.py` (the rollback of one instant, which the write client, the
metadata-table writer and every service use) so that the service template can use those
without an import cycle.
"""

from __future__ import annotations

from lakeward.core.context import Recovery
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError
from lakeward.core.table_services.service import DirectService, ServiceReport


class RollbackService(DirectService[Recovery]):
    """Rolling back abandoned writes as a table service (the daemon's `rollback` action; no plan).

    Finishes interrupted restores and rollbacks and rolls back pending writes whose writer is
    certainly gone, through the write client's recovery (the context's `recovery`): it owns the
    heartbeats that tell a dead writer from a live one.
    """

    action = "rollback"

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> Recovery:
        """What was repaired."""
        if self.ctx.recovery is None:
            raise ConfigError(f"rolling back abandoned writes of {self.ctx.storage.uri} needs a write client")
        return self.ctx.recovery.roll_back_abandoned_writes()

    def report(self, result: Recovery) -> ServiceReport:
        return ServiceReport(None, nothing_to_do=not result, detail=result.describe())
