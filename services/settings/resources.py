"""The ``resources`` section: how runs are isolated from the daemon and how much memory each may use."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from lakeward.services.model import ServiceAction
from lakeward.services.settings.base import Section


class ActionMemory(Section):
    """Largest resident memory (MiB) of one run of each action; a run that grows past it is stopped and fails.

    With ``isolation: process``: on the local engine the bound is on the run's child process (killed
    past it); on the Spark engine on the Spark driver's process tree while the run executes (its
    Python, its JVM and, with a local master, the executors and Spark's Python workers; executors on
    a cluster are bounded by Spark's own memory settings): the run's Spark jobs are cancelled, and the
    driver is restarted when its memory does not come back under the bound. ``null`` leaves an
    action unbounded.
    """

    rollback: int | None = Field(default=2048, gt=0)
    clean: int | None = Field(default=2048, gt=0)
    compaction: int | None = Field(default=4096, gt=0)
    clustering: int | None = Field(default=4096, gt=0)
    archival: int | None = Field(default=2048, gt=0)
    change_tracking: int | None = Field(default=4096, gt=0)
    index_build: int | None = Field(default=4096, gt=0)
    orphan_clean: int | None = Field(default=2048, gt=0)
    metadata_compaction: int | None = Field(default=2048, gt=0)

    def for_action(self, action: ServiceAction) -> int | None:
        value: int | None = getattr(self, action.value)
        return value


class ResourceSettings(Section):
    """Where a run executes and what it may use (see the operations guide, "How runs are isolated")."""

    isolation: Literal["process", "thread"] = Field(
        default="process",
        description=(
            "process: the local engine runs each plan in a child process the runner can terminate "
            "(memory-bounded, crash-contained), the Spark engine runs plans in one Spark driver child "
            "process (the daemon holds no SparkSession); thread: both run plans in threads of the daemon "
            "(the old mode)."
        ),
    )
    max_memory_mb: ActionMemory = Field(default_factory=ActionMemory)
    nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description=(
            "CPU priority of a run's child process and of the Spark driver process (os.nice increment): "
            "runs are batch work, so the API and the discovery cycle of the daemon get the CPU first "
            "when cores are busy."
        ),
    )
    terminate_grace_s: float = Field(
        default=3.0,
        gt=0,
        description=(
            "A run's child process asked to stop (cancel, timeout, drain) gets this long before SIGKILL; "
            "a Spark run this long after its job group's cancel, before the driver process is killed. "
            "A run whose instant's completion is underway (phase committing) finishes it first and gets "
            "30 s instead."
        ),
    )
