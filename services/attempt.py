"""One attempt of a run: schedule a plan (if asked) and run it, wherever the attempt executes.

The same steps run in a run's child process (`lakeward.services.worker`), in a thread of the
Spark driver process (`lakeward.services.spark_driver`) and in a thread of the daemon
(`resources.isolation: thread`). What needs the daemon --
claiming a newly written plan, the fencing check, reporting the phase -- goes through
`AttemptHooks`: called directly in the daemon, answered by the runner over a pipe from a child.

A stop (cancel, timeout, drain) takes effect up to the moment the attempt holds the table lock
for its completion: the fence refuses it, or (in a child) SIGTERM unwinds it, waiting for the
lock included. Once the completion is underway (`AttemptHooks.completing`: fence passed, lock
held; the run's phase is `COMMITTING`), a stop no longer interrupts it: the attempt completes
its instant and reports what it did.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from lakeward.core.exceptions import InstantExistsError, InstantNotFoundError
from lakeward.core.table import Table
from lakeward.services import execution
from lakeward.services.model import Outcome, ServiceAction

#: The run's phase once its instant's completion is underway (fence passed, table lock held):
#: a stop no longer interrupts it (module doc).
COMMITTING = "committing"


class RunStopped(Exception):
    """The run must stop without completing its instant (cancelled, timed out, claim lost)."""

    def __init__(self, outcome: Outcome, reason: str):
        super().__init__(reason)
        self.outcome = outcome

    def __reduce__(self) -> tuple[Any, ...]:  # sent from a run's child process to the runner
        return (RunStopped, (self.outcome, str(self)))


@dataclass(frozen=True)
class AttemptSpec:
    """What to do: the action on the table, for the plan `instant` (None: a new plan or a direct action)."""

    action: ServiceAction
    instant: str | None
    mode: str
    force: bool
    #: The table version the work was planned under (`WorkItem.table_version`; None: not recorded).
    table_version: int | None = None


@dataclass(frozen=True)
class AttemptResult:
    """What an attempt did: the execution, the plan's instant, and an outcome when not the usual one."""

    execution: execution.Execution
    instant: str | None
    outcome: Outcome | None = None


class AttemptHooks(Protocol):
    """What an attempt asks of the runner."""

    def fence(self) -> None:
        """Raise RunStopped unless the run may go on (not stopped, every claim still valid)."""

    def claim_plan(self, instant: str) -> bool:
        """Claim the plan this attempt just wrote; False when another replica claimed it first."""

    def set_phase(self, phase: str) -> None:
        """Report the run's phase (scheduling, running, completing, committing)."""

    def completing(self) -> AbstractContextManager[None]:
        """Around the instant's completion once it is underway (fence passed, table lock held): raise
        RunStopped on entry when the run was stopped meanwhile and nothing else would stop it; inside,
        a stop no longer interrupts the attempt (module doc). Reports the phase `COMMITTING`."""


def completion_check(hooks: AttemptHooks) -> Any:
    """The table's fencing hook: right before core completes an instant, the run must still hold."""

    def check(instant_time: str) -> None:
        hooks.set_phase("completing")
        hooks.fence()

    return check


def completion_scope(hooks: AttemptHooks) -> Callable[[str], AbstractContextManager[None]]:
    """The table's completion scope (`TableContext.completion_scope`): the hooks' `completing`."""

    def scope(instant_time: str) -> AbstractContextManager[None]:
        return hooks.completing()

    return scope


def perform(table: Table, spec: AttemptSpec, engine: Any, hooks: AttemptHooks) -> AttemptResult:
    """Schedule (mode permitting) and run `spec` on `table`; the table's completion check and scope must be set."""
    action, instant = spec.action, spec.instant
    execution.check_planned_version(table, spec.table_version)
    planned = action in execution.PLANNED_ACTIONS
    if instant is None and planned and spec.mode != "run":
        hooks.set_phase("scheduling")
        instant = execution.schedule(table, action, force=spec.force)
        if instant is None:
            nothing = execution.Execution(None, nothing_to_do=True, detail="nothing due: no plan written")
            return AttemptResult(nothing, None)
        if not hooks.claim_plan(instant):  # another replica discovered the new plan first: it runs it
            detail = f"scheduled {instant}; claimed by another replica"
            return AttemptResult(execution.Execution(instant, detail=detail), instant, Outcome.SKIPPED_CLAIMED)
    if spec.mode == "schedule":
        return AttemptResult(execution.Execution(instant, detail=f"scheduled {instant}"), instant)
    if instant is None and planned:
        pending = execution.pending_of(table, action)
        detail = f"pending plans: {pending}; name one" if pending else "no pending plan to run"
        return AttemptResult(execution.Execution(None, nothing_to_do=True, detail=detail), None)
    if planned and instant is not None and instant not in execution.pending_of(table, action):
        # Discovery is a cycle old: the plan may have completed since (its runner released
        # the claim after completing). Running it again would complete it twice.
        detail = "the plan is no longer pending"
        return AttemptResult(execution.Execution(instant, nothing_to_do=True, detail=detail), instant)
    hooks.fence()
    hooks.set_phase("running")
    try:
        return AttemptResult(execution.execute(table, action, instant, engine), instant)
    except InstantExistsError as exc:
        return AttemptResult(execution.Execution(instant, nothing_to_do=True, detail=str(exc)), instant)
    except InstantNotFoundError:
        if not planned or instant in execution.pending_of(table, action):
            raise
        # completed or undone since the check above (a writer runs the metadata table's compaction)
        detail = "the plan is no longer pending"
        return AttemptResult(execution.Execution(instant, nothing_to_do=True, detail=detail), instant)


__all__ = [
    "COMMITTING",
    "AttemptHooks",
    "AttemptResult",
    "AttemptSpec",
    "RunStopped",
    "completion_check",
    "completion_scope",
    "perform",
]
