"""The daemon's vocabulary: tables, the work found on them, claims and run outcomes.

Plain frozen dataclasses, shared by discovery, planning, claims, the runner, metrics and
the API, so that each of those modules can be tested alone.
"""

from __future__ import annotations

import enum
import os
import posixpath
from dataclasses import dataclass, field
from urllib.parse import urlparse


class ServiceAction(str, enum.Enum):
    """What a work item does to a table (the timeline action it completes, roughly)."""

    ROLLBACK = "rollback"
    CLEAN = "clean"
    COMPACTION = "compaction"
    CLUSTERING = "clustering"
    ARCHIVAL = "archival"
    CHANGE_TRACKING = "change_tracking"
    INDEX_BUILD = "index_build"
    ORPHAN_CLEAN = "orphan_clean"
    METADATA_COMPACTION = "metadata_compaction"

    @classmethod
    def parse(cls, value: str) -> ServiceAction:
        try:
            return cls(value.strip().lower())
        except ValueError:
            names = ", ".join(a.value for a in cls)
            raise ValueError(f"unknown action {value!r}; one of {names}") from None


#: Lower runs first when a table is behind: rollbacks and cleans before long compactions.
ACTION_PRIORITY: dict[ServiceAction, int] = {
    ServiceAction.ROLLBACK: 0,
    ServiceAction.CLEAN: 1,
    ServiceAction.ARCHIVAL: 2,
    ServiceAction.COMPACTION: 3,
    ServiceAction.CLUSTERING: 4,
    ServiceAction.CHANGE_TRACKING: 5,
    ServiceAction.INDEX_BUILD: 6,
    ServiceAction.ORPHAN_CLEAN: 7,
    ServiceAction.METADATA_COMPACTION: 2,
}


@dataclass(frozen=True)
class TableRef:
    """A table the daemon looks after: its base path (URI) and a stable name for APIs and metrics."""

    name: str
    path: str


def table_location(path: str) -> str:
    """`path` spelt one way, to tell whether two spellings name the same table (or folder).

    A local path and a `file:` URI become the absolute path, normalised and with symlinks
    resolved (`/x/t`, `/x/t/`, `file:///x/t` and `/x/y/../t` are one location); another URI
    keeps its scheme (lower case, `s3a` as `s3`) and host, its path normalised (`..`, `//`,
    trailing `/`). The same split into scheme and path as the library's storage makes.
    """
    text = path.strip()
    parsed = urlparse(text)
    if parsed.scheme in ("", "file"):
        return os.path.realpath(parsed.path if parsed.scheme else text)
    scheme = "s3" if parsed.scheme.lower() in ("s3", "s3a") else parsed.scheme.lower()
    rest = posixpath.normpath("/" + parsed.path.lstrip("/")) if parsed.path else "/"
    return f"{scheme}://{parsed.netloc}{'' if rest == '/' else rest}"


def root_name(root: str) -> str:
    """A discovery root's name: its folder's last segment (the first part of its tables' names, and
    their scheduling group by default)."""
    return posixpath.basename(root.rstrip("/")) or "root"


@dataclass(frozen=True)
class PendingPlan:
    """A plan found on a table's timeline: requested or inflight (`state`), written at `instant`."""

    table: TableRef
    action: ServiceAction
    instant: str
    state: str


@dataclass(frozen=True, order=True)
class WorkItem:
    """One unit of work for a replica: run a pending plan (`instant` set) or schedule-and-run one (`instant` None).

    Ordered by (priority, oldest instant, table) so a sorted queue is fair across tables.
    """

    priority: int
    sort_instant: str
    table: TableRef = field(compare=False)
    action: ServiceAction = field(compare=False)
    instant: str | None = field(default=None, compare=False)
    reason: str = field(default="", compare=False)
    #: `hoodie.table.version` the work was planned under (discovery's view); None: not recorded (a trigger).
    table_version: int | None = field(default=None, compare=False)

    @property
    def key(self) -> str:
        """Identity of the work for claims and de-duplication: table, action, instant (or "new")."""
        return f"{self.table.name}/{self.action.value}/{self.instant or 'new'}"


@dataclass(frozen=True)
class Claim:
    """Proof that this replica owns a work item (a ZooKeeper ephemeral node, or an in-process entry)."""

    key: str
    owner: str
    path: str


class Outcome(str, enum.Enum):
    SUCCEEDED = "succeeded"
    NOTHING_TO_DO = "nothing_to_do"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    CLAIM_LOST = "claim_lost"
    SKIPPED_CLAIMED = "skipped_claimed"


@dataclass(frozen=True)
class VersionChange:
    """A table whose `hoodie.table.version` differs from the previous discovery cycle's."""

    table: str
    before: int
    after: int


def version_changes(previous: dict[str, int], current: dict[str, int]) -> list[VersionChange]:
    """Tables (by name) read in both cycles whose version changed, by table name."""
    return [
        VersionChange(name, previous[name], version)
        for name, version in sorted(current.items())
        if name in previous and previous[name] != version
    ]


@dataclass(frozen=True)
class TableProblem:
    """A table that could not be read this cycle (deleted, corrupt properties, permission)."""

    table: TableRef
    error: str


__all__ = [
    "ACTION_PRIORITY",
    "Claim",
    "Outcome",
    "PendingPlan",
    "ServiceAction",
    "TableProblem",
    "TableRef",
    "VersionChange",
    "WorkItem",
    "root_name",
    "table_location",
    "version_changes",
]
