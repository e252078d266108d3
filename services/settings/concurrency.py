"""The ``concurrency`` section: how much the runner runs at once, timeouts, retries and quarantine."""

from __future__ import annotations

from pydantic import Field, model_validator

from lakeward.services.model import ServiceAction
from lakeward.services.settings.base import Section


class ActionTimeouts(Section):
    """Seconds a run of each action may take before it is cancelled (and counted as a failure)."""

    rollback: float = Field(default=600, gt=0)
    clean: float = Field(default=1800, gt=0)
    compaction: float = Field(default=3600, gt=0)
    clustering: float = Field(default=7200, gt=0)
    archival: float = Field(default=600, gt=0)
    change_tracking: float = Field(default=3600, gt=0)
    index_build: float = Field(default=7200, gt=0)
    orphan_clean: float = Field(default=1800, gt=0)
    metadata_compaction: float = Field(default=600, gt=0)

    def for_action(self, action: ServiceAction) -> float:
        value: float = getattr(self, action.value)
        return value


class RetrySettings(Section):
    """Retries of a failed run, with exponential backoff: base * 2**(attempt-1), capped at max.

    The runner waits :meth:`backoff_s` before each retry (the one place the formula lives).
    """

    max_attempts: int = Field(default=3, ge=1, description="Runs of a plan per claim, the first included.")
    backoff_base_s: float = Field(default=5.0, gt=0, description="Wait before the first retry.")
    backoff_max_s: float = Field(default=300.0, gt=0, description="Longest wait between retries.")

    @model_validator(mode="after")
    def _order(self) -> RetrySettings:
        if self.backoff_max_s < self.backoff_base_s:
            raise ValueError(f"backoff_max_s: must be >= backoff_base_s ({self.backoff_base_s})")
        return self

    def backoff_s(self, attempt: int) -> float:
        """Wait before retry number ``attempt`` (1: the first retry)."""
        return float(min(self.backoff_max_s, self.backoff_base_s * 2 ** max(0, attempt - 1)))


class ConcurrencySettings(Section):
    """How much runs at once on this replica, timeouts, retries and quarantine."""

    max_running: int = Field(default=4, gt=0, description="Plans running at once on this replica.")
    max_running_per_table: int = Field(default=1, gt=0, description="Plans running at once on one table.")
    timeouts_s: ActionTimeouts = Field(default_factory=ActionTimeouts)
    retries: RetrySettings = Field(default_factory=RetrySettings)
    quarantine_after_failures: int = Field(
        default=3, gt=0, description="A plan that failed this many times is quarantined until released by on-call."
    )

    @model_validator(mode="after")
    def _order(self) -> ConcurrencySettings:
        if self.max_running_per_table > self.max_running:
            raise ValueError(f"max_running_per_table: must be <= max_running ({self.max_running})")
        return self
