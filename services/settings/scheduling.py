"""The ``scheduling`` section and a table policy's ``scheduling`` keys: priorities and fairness.

Tables belong to a **group**: the label their policy gives (``policies.*.scheduling.group``),
else the discovery root they were found under (its ``group``, else its folder's name), else
:data:`DEFAULT_GROUP`. Groups share the replica's slots in proportion to their ``priority``
(a weight), each within its ``max_concurrent_runs``; tables share their group's runs in
proportion to theirs. A table whose health score is below ``starving_score`` goes first.
The queue discipline is :mod:`lakeward.services.fairness` (docs/daemon.md, "Priorities and fairness").
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from lakeward.services.settings.base import Section

#: The group of a table with no label that no discovery root found (static tables).
DEFAULT_GROUP = "default"

_GROUP_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def check_group_name(name: str) -> str:
    """A group name as metrics and claims can carry it (letters, digits, '.', '_', '-')."""
    if not _GROUP_RE.match(name):
        raise ValueError(f"{name!r} is not a valid group name (letters, digits, '.', '_', '-')")
    return name


class GroupSettings(Section):
    """How one group of tables shares the replica's slots."""

    priority: int = Field(
        default=1, ge=1, description="Weight: a group gets runs in proportion to it while others wait too."
    )
    max_concurrent_runs: int | None = Field(
        default=None, gt=0, description="Runs of the group's tables at once on this replica (null: no limit)."
    )


class TableScheduling(Section):
    """A table policy's scheduling keys (``policies.defaults.scheduling``, ``policies.overrides.<t>.scheduling``)."""

    group: str | None = Field(
        default=None,
        description="The table's group label (null: its discovery root's group, else `default`).",
    )
    priority: int = Field(
        default=1, ge=1, description="Weight: the table's share of its group's runs while others wait too."
    )
    max_concurrent_runs: int | None = Field(
        default=None, gt=0, description="Runs on the table at once (null: `concurrency.max_running_per_table`)."
    )

    @field_validator("group")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        return None if value is None else check_group_name(value)


class SchedulingSettings(Section):
    """Groups of tables with their priority and limits, and the health score that puts a table first."""

    groups: dict[str, GroupSettings] = Field(
        default_factory=dict,
        description="Per group name (a label, or a discovery root's group): priority and max_concurrent_runs; "
        "groups not listed have priority 1 and no limit.",
    )
    starving_score: float | None = Field(
        default=50,
        ge=0,
        le=100,
        description="A table whose last health score is below this is scheduled before every other "
        "(lowest score first; null: off).",
    )

    @field_validator("groups")
    @classmethod
    def _names(cls, groups: dict[str, GroupSettings]) -> dict[str, GroupSettings]:
        for name in groups:
            try:
                check_group_name(name)
            except ValueError as exc:
                raise ValueError(f"[{name!r}]: {exc}") from None
        return groups

    def group(self, name: str) -> GroupSettings:
        """The settings of group `name` (the defaults when it is not listed)."""
        return self.groups.get(name) or GroupSettings()
