"""APScheduler wiring: one discovery-and-dispatch cycle at a time, every `refresh_interval_s`.

The job runs with jitter (replicas started together spread out), coalescing (a cycle that
was missed while the previous one ran is run once, not several times) and at most one
instance. `run_soon` brings the next cycle forward, e.g. when a run finished and a slot
is free, or when on-call resumed a table.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)

JOB_ID = "discovery-cycle"


class CycleScheduler:
    """Runs `cycle` on an interval in a background thread."""

    def __init__(self, cycle: Callable[[], None], interval_s: float, jitter: float = 0.1):
        self.interval_s = interval_s
        #: `run_soon` never starts cycles closer than this: a burst of finished runs must not turn
        #: discovery into a busy loop that starves the API and the runs of CPU.
        self.min_gap_s = min(interval_s, 1.0)
        self._last_start = 0.0
        self._scheduler = BackgroundScheduler(
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None},
            timezone=dt.UTC,
        )
        self._scheduler.add_job(
            self._safe(cycle),
            "interval",
            seconds=interval_s,
            jitter=max(0.0, interval_s * jitter) or None,
            id=JOB_ID,
            next_run_time=dt.datetime.now(dt.UTC),
        )

    def _safe(self, cycle: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            self._last_start = time.monotonic()
            try:
                cycle()
            except Exception:  # a failed cycle must not stop the next ones
                log.exception("discovery cycle failed")

        return run

    def start(self) -> None:
        self._scheduler.start()

    def run_soon(self) -> None:
        """Run the next cycle now (or right after the current one ends)."""
        if not self._scheduler.running:
            return
        job = self._scheduler.get_job(JOB_ID)
        if job is not None:
            wait = max(0.0, self._last_start + self.min_gap_s - time.monotonic())
            soon = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=wait)
            if job.next_run_time is None or soon < job.next_run_time:
                job.modify(next_run_time=soon)

    def shutdown(self, wait: bool = True) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)


__all__ = ["CycleScheduler"]
