"""The HTTP API's request bodies and response models: the shapes the OpenAPI schema documents.

Responses mirror the dictionaries the daemon builds (`TableView.to_dict`, `RunRecord.to_dict`,
`plan_dict`), key for key, so declaring them changes no answer; they name and type every field.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lakeward.services.model import ServiceAction

# ------------------------------------------------------------------------------------------ requests


class TriggerBody(BaseModel):
    """What to do now on a table."""

    model_config = ConfigDict(extra="forbid")

    action: ServiceAction = Field(description="compaction, clean, clustering, archival, rollback, ...")
    mode: Literal["schedule_and_run", "schedule", "run"] = Field(
        default="schedule_and_run",
        description="schedule_and_run: write a new plan (forced) and run it; schedule: only write it; "
        "run: run a pending plan (`instant`, default the oldest).",
    )
    instant: str | None = Field(default=None, description="The pending plan to run (mode run).")


class PauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(default="", max_length=500, description="Why (shown in the API and logs).")


class ReleaseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=5, description="The quarantined work item: table/action/instant.")


# ----------------------------------------------------------------------------------------- responses


class Health(BaseModel):
    """Liveness: the process answers."""

    status: str
    replica: str


class Readiness(BaseModel):
    """Readiness of this replica, with the reasons it does not take new work (if any)."""

    ready: bool
    replica: str
    reasons: list[str]


class PlanInfo(BaseModel):
    """A pending plan on a table's timeline (requested or inflight)."""

    table: str
    action: ServiceAction
    instant: str
    state: str = Field(description="requested or inflight.")
    key: str = Field(description="The work item: table/action/instant.")


class PlanStatus(PlanInfo):
    """A pending plan with what the daemon does about it."""

    quarantined: bool
    running_here: str | None = Field(description="The run id when this replica runs it now.")


class RunInfo(BaseModel):
    """One run of a work item on this replica."""

    run_id: str
    table: str
    action: ServiceAction
    instant: str | None
    key: str
    trigger: str
    mode: str
    replica: str
    state: str = Field(description="running, waiting_retry or finished.")
    phase: str
    progress: str
    attempts: int
    outcome: str | None
    started_at: float
    ended_at: float | None
    duration_s: float
    error: str | None
    detail: str
    records_written: int
    bytes_written: int
    pid: int | None = Field(default=None, description="The child process running the attempt now (local engine).")
    peak_rss_mb: float | None = Field(
        default=None, description="Peak resident memory of the run's child processes, MiB (local engine)."
    )


class TableInfo(BaseModel):
    """A table with its state: pending plans, problems, pause."""

    name: str
    path: str
    table_type: str | None
    table_version: int | None
    read_only: str | None
    paused: bool
    paused_by: str | None = Field(description="policy or on-call.")
    pause_reason: str | None
    paused_via: str | None = Field(description="The replica that took the on-call pause.")
    paused_since: str | None
    healthy: bool
    problem: str | None
    last_completed_instant: str | None
    pending_plans: list[PlanInfo]
    pending_writes: list[str]
    delta_commits_since_compaction: int | None
    writes_since_clean: int | None
    completed_instants: int | None


class TableDetail(TableInfo):
    """A table with its recent runs on this replica (newest first, at most 20)."""

    runs: list[RunInfo]


class QuarantineInfo(BaseModel):
    """A work item held back until on-call releases it."""

    key: str
    reason: str
    failures: int
    since: float
    replica: str


class ClaimEvent(BaseModel):
    """One line of the claim log: `event` is claimed, conflict, released, lost or invalid."""

    time: float
    key: str
    owner: str
    event: str


class Claims(BaseModel):
    """This replica's claim log and the claims it holds."""

    replica: str
    held: list[str]
    log: list[ClaimEvent]


class PauseResult(BaseModel):
    table: str
    paused: bool
    changed: bool


class CancelResult(BaseModel):
    run_id: str
    cancelling: bool


class ReleaseResult(BaseModel):
    key: str
    released: bool
