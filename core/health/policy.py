"""The health policy: the weight of each health factor and the thresholds of each finding.

A `HealthPolicy` is a validated pydantic model (unknown keys and bad values, infinities and
NaN included, are errors naming the key, e.g. `weights.compaction`); `parse_health_policy` turns a plain mapping
(from settings or a request) into one. The defaults are documented in docs/health.md.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lakeward.core.exceptions import ConfigError

#: The health factors, in the order reports list them.
FACTORS = ("compaction", "small_files", "pending_plans", "pending_writes", "cleaner", "archival", "metadata_table")

#: Factors that count only on tables they apply to (the metadata table's lag: tables that have one).
CONDITIONAL_FACTORS = frozenset({"metadata_table"})


class HealthWeights(BaseModel):
    """Relative weight of each factor in the score; a factor with weight 0 does not count.

    The score is `100 * (1 - sum(weight * penalty) / sum(weights))`, a factor's penalty
    being 0 (no finding), 0.5 (a warning) or 1 (a critical finding). `metadata_table` counts
    only on tables with a metadata table (the others' scores are as without it).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    compaction: float = Field(default=25, ge=0)
    small_files: float = Field(default=15, ge=0)
    pending_plans: float = Field(default=15, ge=0)
    pending_writes: float = Field(default=15, ge=0)
    cleaner: float = Field(default=15, ge=0)
    archival: float = Field(default=15, ge=0)
    metadata_table: float = Field(default=20, ge=0)

    @model_validator(mode="after")
    def _some_weight(self) -> HealthWeights:
        if not sum(self.of(f) for f in FACTORS if f not in CONDITIONAL_FACTORS) > 0:
            raise ValueError("at least one weight must be above 0")
        return self

    def of(self, factor: str) -> float:
        return float(getattr(self, factor))


class HealthThresholds(BaseModel):
    """When a measured number becomes a warning or a critical finding."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: A file group with more log files than this in its latest slice is behind on compaction.
    max_log_files: int = Field(default=10, ge=1)
    #: Share of file groups over `max_log_files` from which compaction is critical (any: warning).
    log_files_critical_share: float = Field(default=0.25, gt=0, le=1)
    #: Fewer small base files than this are never a finding (each partition fills one at a time).
    small_files_min_count: int = Field(default=10, ge=1)
    #: Share of base files under `hoodie.parquet.small.file.limit`: warning / critical from here.
    small_files_warning_share: float = Field(default=0.5, gt=0, le=1)
    small_files_critical_share: float = Field(default=0.8, gt=0, le=1)
    #: Age of the oldest pending table-service plan: warning / critical from here.
    pending_plan_warning_age: dt.timedelta = dt.timedelta(hours=1)
    pending_plan_critical_age: dt.timedelta = dt.timedelta(hours=6)
    #: Fewer files the cleaner would delete than this are never a finding.
    cleaner_min_files: int = Field(default=10, ge=1)
    #: Files the cleaner would delete per live file: warning / critical from here.
    cleaner_warning_ratio: float = Field(default=1.0, gt=0)
    cleaner_critical_ratio: float = Field(default=3.0, gt=0)
    #: Completed commits on the active timeline per `hoodie.keep.max.commits`: warning above
    #: 1 (archival is due and has not run), critical from this ratio.
    archival_critical_ratio: float = Field(default=2.0, gt=1)
    #: The metadata table misses completed data instants: a warning, critical once the oldest
    #: of them completed this long ago (a writer that maintains it repairs it on its next commit).
    metadata_lag_critical_age: dt.timedelta = dt.timedelta(minutes=15)

    @model_validator(mode="after")
    def _ordered(self) -> HealthThresholds:
        pairs = (
            ("small_files_warning_share", "small_files_critical_share"),
            ("pending_plan_warning_age", "pending_plan_critical_age"),
            ("cleaner_warning_ratio", "cleaner_critical_ratio"),
        )
        for low, high in pairs:
            if getattr(self, low) > getattr(self, high):
                raise ValueError(f"thresholds.{low} ({getattr(self, low)}) must not exceed thresholds.{high}")
        return self


class HealthPolicy(BaseModel):
    """Weights and thresholds of a health report (`table_health(table, policy=...)`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    weights: HealthWeights = Field(default_factory=HealthWeights)
    thresholds: HealthThresholds = Field(default_factory=HealthThresholds)


def parse_health_policy(values: Mapping[str, Any] | None) -> HealthPolicy:
    """A policy from a mapping such as `{"weights": {"compaction": 40}}`; ConfigError names the bad key."""
    try:
        return HealthPolicy.model_validate(dict(values or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(part) for part in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if not key:
            raise ConfigError(f"health policy is invalid: {msg}") from None
        raise ConfigError(f"health policy key {key}={err.get('input')!r} is invalid: {msg}") from None
