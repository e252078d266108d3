"""Following runs through any replica's API: `lakeward trigger --wait` and `lakeward runs --follow`.

Every replica answers `/runs` for the whole deployment (the shared history), so a run is
followed wherever it executes, through whichever replica the URL reaches. When the
triggered run ended `skipped_claimed` -- it wrote the plan, but another replica had
claimed it first and runs it -- the wait goes on with that other replica's run of the
same plan (the same work item key).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lakeward.services.client import DaemonAPIError, DaemonClient
from lakeward.services.history import ENDED

#: How long a run may be unknown (404) or the API unreachable before the wait gives up.
GRACE_S = 30.0
SKIPPED_CLAIMED = "skipped_claimed"

Emit = Callable[[dict[str, Any]], None]


class RunWaitTimeout(TimeoutError):
    """The run had not ended when the wait's time was up."""


def run_of_plan(
    client: DaemonClient, key: str, *, exclude: str = "", running_only: bool = False
) -> dict[str, Any] | None:
    """The newest run of the work item `key` (table/action/instant) on any replica, other than
    `exclude` and not itself skipped; None if there is none (yet)."""
    table = key.rsplit("/", 2)[0]
    for run in client.runs("running" if running_only else "all", table, 1000):
        if run["key"] == key and run["run_id"] != exclude and run.get("outcome") != SKIPPED_CLAIMED:
            return run
    return None


def _signature(run: dict[str, Any]) -> tuple[Any, ...]:
    return (run["run_id"], run["state"], run.get("phase"), run.get("outcome"))


def wait_for_run(
    client: DaemonClient,
    run_id: str,
    *,
    poll_s: float = 1.0,
    timeout_s: float | None = None,
    emit: Emit = lambda run: None,
) -> dict[str, Any]:
    """Poll until the run ends (following a skipped run to the replica that runs its plan, module
    doc); the last state of the run that did the work. `emit` sees every change of state or phase."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    current, last, trouble_since = run_id, None, None
    while True:
        try:
            run = client.run(current)
            trouble_since = None
        except DaemonAPIError as exc:
            if exc.status is not None and exc.status not in (404, 502, 503, 504):
                raise
            # A replica restarting behind the Service, or a history write not seen yet: try again.
            trouble_since = trouble_since or time.monotonic()
            if time.monotonic() - trouble_since > GRACE_S:
                raise
            run = None
        if run is not None:
            if _signature(run) != last:
                last = _signature(run)
                emit(run)
            if run["state"] in ENDED:
                if run.get("outcome") != SKIPPED_CLAIMED or run.get("instant") is None:
                    return run
                other = run_of_plan(client, run["key"], exclude=run["run_id"])
                if other is not None:
                    current = other["run_id"]
                    continue
                if time.monotonic() - float(run.get("ended_at") or 0) > GRACE_S:
                    return run  # nobody recorded a run of the plan: report the skip as it is
        if deadline is not None and time.monotonic() > deadline:
            raise RunWaitTimeout(f"run {current} had not ended after {timeout_s:g}s")
        time.sleep(poll_s)


def follow_runs(
    client: DaemonClient,
    emit: Emit,
    *,
    poll_s: float = 2.0,
    limit: int = 100,
    table: str | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Call `emit` with each run of the deployment that is new or changed since the last poll
    (the first poll shows the current ones), oldest change first, until `stop()` says so."""
    seen: dict[str, tuple[Any, ...]] = {}
    while not stop():
        changed = []
        for run in client.runs("all", table, limit):
            if seen.get(run["run_id"]) != _signature(run):
                seen[run["run_id"]] = _signature(run)
                changed.append(run)
        for run in sorted(changed, key=lambda r: float(r["started_at"])):
            emit(run)
        time.sleep(poll_s)


__all__ = ["ENDED", "RunWaitTimeout", "follow_runs", "run_of_plan", "wait_for_run"]
