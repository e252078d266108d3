"""The ``policies`` section: when each table service is scheduled, retention, pause, ``hoodie.*`` options.

The planner (:mod:`lakeward.services.planning`) derives its policy from these models, so their
defaults are the only defaults of scheduling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from lakeward.core.health.policy import HealthPolicy
from lakeward.core.table_services.orphan_clean import DRY_RUN_KEY, OLDER_THAN_KEY
from lakeward.services.model import ServiceAction
from lakeward.services.settings.base import Section, option_str, problems
from lakeward.services.settings.scheduling import TableScheduling


class ActionPolicy(Section):
    """What every action has: whether the daemon schedules it on its own."""

    enabled: bool = Field(
        default=True, description="Schedule new plans of this action by policy (pending ones always run)."
    )


class CompactionPolicy(ActionPolicy):
    """Merge-on-read compaction."""

    max_delta_commits: int = Field(
        default=5, gt=0, description="Schedule a compaction once this many delta commits completed since the last one."
    )
    max_delta_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Also schedule once the oldest uncompacted delta commit is this old (None: off).",
    )


class CleanPolicy(ActionPolicy):
    """Cleaning of old file slices; its retention keeps what readers of older instants need."""

    policy: Literal["KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS"] = Field(
        default="KEEP_LATEST_COMMITS", description="Which file slices stay (hoodie.cleaner.policy)."
    )
    commits_retained: int = Field(
        default=10, gt=0, description="KEEP_LATEST_COMMITS: slices for the last N commits stay."
    )
    file_versions_retained: int = Field(
        default=3, gt=0, description="KEEP_LATEST_FILE_VERSIONS: the latest N slices stay."
    )
    hours_retained: int = Field(default=24, gt=0, description="KEEP_LATEST_BY_HOURS: slices for the last N hours stay.")
    min_commits_between: int = Field(
        default=1, gt=0, description="Schedule a clean at most once per N completed commits."
    )


class ClusteringPolicy(ActionPolicy):
    """Clustering of small files."""

    enabled: bool = Field(default=False, description="Schedule clustering plans by policy.")
    every_n_commits: int = Field(default=4, gt=0, description="Schedule a clustering once per N completed commits.")
    small_file_limit_bytes: int = Field(
        default=300 * 1024 * 1024, ge=0, description="Base files smaller than this are clustered."
    )
    target_file_max_bytes: int = Field(
        default=1024 * 1024 * 1024, gt=0, description="Size of the files a clustering writes."
    )
    max_num_groups: int = Field(default=30, gt=0, description="At most this many groups per plan.")
    sort_columns: list[str] = Field(default_factory=list, description="Columns the rewritten files are sorted by.")


class ArchivalPolicy(ActionPolicy):
    """Archival of the active timeline (timeline retention)."""

    keep_min_commits: int = Field(default=20, gt=0, description="The active timeline keeps at least this many commits.")
    keep_max_commits: int = Field(
        default=30, gt=0, description="Archive when the active timeline holds more than this."
    )


class ChangeTrackingPolicy(ActionPolicy):
    """Change tracking (CDC) of new commits."""

    enabled: bool = Field(default=False, description="Schedule change-tracking plans by policy.")
    every_n_commits: int = Field(default=1, gt=0, description="Schedule once per N completed commits.")


class IndexBuildPolicy(ActionPolicy):
    """Secondary-index builds."""

    enabled: bool = Field(default=False, description="Schedule index builds by policy.")
    columns: list[str] = Field(default_factory=list, description="Columns to index (required when enabled).")


class OrphanCleanPolicy(ActionPolicy):
    """Removal of orphan files (files no instant references; docs/health.md, "Orphan files")."""

    enabled: bool = Field(default=False, description="Look for orphan files by policy (off by default).")
    dry_run: bool = Field(
        default=True, description="Only list the orphans in the run's record; set false to delete them."
    )
    older_than_s: float = Field(
        default=86400, gt=0, description="Only files (and instants) older than this are orphans."
    )
    interval_s: float = Field(
        default=86400, gt=0, description="A table is searched again this long after its last run on this replica."
    )


#: hoodie.* keys that a policy field sets: give the policy field instead (one place for each knob).
_POLICY_OWNED_KEYS: dict[str, str] = {
    "hoodie.compact.inline.max.delta.commits": "compaction.max_delta_commits",
    "hoodie.cleaner.policy": "clean.policy",
    "hoodie.cleaner.commits.retained": "clean.commits_retained",
    "hoodie.cleaner.fileversions.retained": "clean.file_versions_retained",
    "hoodie.cleaner.hours.retained": "clean.hours_retained",
    "hoodie.clustering.plan.strategy.small.file.limit": "clustering.small_file_limit_bytes",
    "hoodie.clustering.plan.strategy.target.file.max.bytes": "clustering.target_file_max_bytes",
    "hoodie.clustering.plan.strategy.max.num.groups": "clustering.max_num_groups",
    "hoodie.clustering.plan.strategy.sort.columns": "clustering.sort_columns",
    "hoodie.keep.min.commits": "archival.keep_min_commits",
    "hoodie.keep.max.commits": "archival.keep_max_commits",
}

HoodieValue = str | int | float | bool


class PolicySettings(Section):
    """A table policy: when each action is scheduled, retention, pause, and extra ``hoodie.*`` options.

    As an override, only the keys given replace the defaults' (maps are merged key by key).
    """

    paused: bool = Field(default=False, description="Nothing is scheduled or run on the table (pending plans wait).")
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)
    clean: CleanPolicy = Field(default_factory=CleanPolicy)
    clustering: ClusteringPolicy = Field(default_factory=ClusteringPolicy)
    archival: ArchivalPolicy = Field(default_factory=ArchivalPolicy)
    change_tracking: ChangeTrackingPolicy = Field(default_factory=ChangeTrackingPolicy)
    index_build: IndexBuildPolicy = Field(default_factory=IndexBuildPolicy)
    orphan_clean: OrphanCleanPolicy = Field(default_factory=OrphanCleanPolicy)
    hoodie_options: dict[str, HoodieValue] = Field(
        default_factory=dict, description="Extra hoodie.* options passed to the table when it is opened."
    )
    scheduling: TableScheduling = Field(
        default_factory=TableScheduling,
        description="The table's group, priority and max_concurrent_runs (docs/daemon.md, 'Priorities and fairness').",
    )
    health: HealthPolicy = Field(
        default_factory=HealthPolicy,
        description="Health score weights and finding thresholds (`weights.<factor>`, `thresholds.<key>`; "
        "see docs/health.md). Ages are seconds or ISO 8601 durations.",
    )

    @field_validator("hoodie_options")
    @classmethod
    def _hoodie_keys(cls, options: dict[str, HoodieValue]) -> dict[str, HoodieValue]:
        for key in options:
            if not key.startswith("hoodie."):
                raise ValueError(f"[{key!r}]: option keys must start with 'hoodie.'")
            if key in _POLICY_OWNED_KEYS:
                raise ValueError(f"[{key!r}]: set by the policy; use `{_POLICY_OWNED_KEYS[key]}` instead")
        return options


class EffectivePolicy(PolicySettings):
    """The policy of one table: the defaults merged with the table's override, cross-checked."""

    table: str | None = Field(default=None, description="The table it applies to (None: the defaults).")

    @model_validator(mode="after")
    def _consistent(self) -> EffectivePolicy:
        if self.archival.keep_min_commits >= self.archival.keep_max_commits:
            raise ValueError(
                f"archival.keep_min_commits: must be < archival.keep_max_commits ({self.archival.keep_max_commits})"
            )
        if self.index_build.enabled and not self.index_build.columns:
            raise ValueError("index_build.columns: required when index_build is enabled")
        return self

    def for_action(self, action: ServiceAction) -> ActionPolicy | None:
        """The policy section of ``action`` (None for rollback, which is never scheduled by policy)."""
        if action is ServiceAction.ROLLBACK:
            return None
        section: ActionPolicy = getattr(self, action.value)
        return section

    def schedules(self, action: ServiceAction) -> bool:
        """Whether the daemon schedules new plans of ``action`` on this table (False when paused)."""
        section = self.for_action(action)
        return not self.paused and section is not None and section.enabled

    def table_options(self) -> dict[str, str]:
        """The options for the table: the policy's ``hoodie.*`` knobs and orphan removal's
        ``lakeward.orphan_clean.*`` keys, then ``hoodie_options``."""
        opts: dict[str, Any] = {
            "hoodie.compact.inline.max.delta.commits": self.compaction.max_delta_commits,
            "hoodie.cleaner.policy": self.clean.policy,
            "hoodie.cleaner.commits.retained": self.clean.commits_retained,
            "hoodie.cleaner.fileversions.retained": self.clean.file_versions_retained,
            "hoodie.cleaner.hours.retained": self.clean.hours_retained,
            "hoodie.clustering.plan.strategy.small.file.limit": self.clustering.small_file_limit_bytes,
            "hoodie.clustering.plan.strategy.target.file.max.bytes": self.clustering.target_file_max_bytes,
            "hoodie.clustering.plan.strategy.max.num.groups": self.clustering.max_num_groups,
            "hoodie.keep.min.commits": self.archival.keep_min_commits,
            "hoodie.keep.max.commits": self.archival.keep_max_commits,
        }
        opts[OLDER_THAN_KEY] = self.orphan_clean.older_than_s
        opts[DRY_RUN_KEY] = self.orphan_clean.dry_run
        if self.clustering.sort_columns:
            opts["hoodie.clustering.plan.strategy.sort.columns"] = ",".join(self.clustering.sort_columns)
        opts.update(self.hoodie_options)
        return {k: option_str(v) for k, v in opts.items()}


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


class PoliciesSettings(Section):
    """Default policy for every table, and per-table overrides keyed by table name."""

    defaults: PolicySettings = Field(default_factory=PolicySettings)
    overrides: dict[str, PolicySettings] = Field(
        default_factory=dict, description="Per-table overrides (table name -> the keys that differ)."
    )

    def effective(self, table: str | None) -> EffectivePolicy:
        merged = self.defaults.model_dump()
        if table is not None and table in self.overrides:
            merged = _deep_merge(merged, self.overrides[table].model_dump(exclude_unset=True))
        return EffectivePolicy.model_validate({**merged, "table": table})

    @model_validator(mode="after")
    def _check_effective(self) -> PoliciesSettings:
        for where, table in [("defaults", None), *((f"overrides.{name}", name) for name in self.overrides)]:
            try:
                self.effective(table)
            except ValidationError as exc:
                first = problems(exc)[0]
                raise ValueError(f"{where}.{first}") from None
        return self
