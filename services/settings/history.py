"""The ``history`` section: retention of the run history and the audit log every replica shares."""

from __future__ import annotations

from pydantic import Field

from lakeward.services.settings.base import Section

DAY_S = 86_400.0


class HistorySettings(Section):
    """How long the shared run history and audit log keep their records (ZooKeeper, or memory without it).

    A record is pruned when it is older than its ``*_max_age_s`` or beyond the newest
    ``*_max_count``; each record is one small JSON znode of at most ``record_max_bytes``.
    """

    runs_max_count: int = Field(default=1000, ge=1, description="Runs kept in the shared history (newest).")
    runs_max_age_s: float = Field(default=7 * DAY_S, gt=0, description="Runs older than this are pruned.")
    audit_max_count: int = Field(default=5000, ge=1, description="Audit entries kept (newest).")
    audit_max_age_s: float = Field(default=30 * DAY_S, gt=0, description="Audit entries older than this are pruned.")
    record_max_bytes: int = Field(
        default=4096, ge=512, le=500_000, description="Size cap of one record: longer texts in it are shortened."
    )
