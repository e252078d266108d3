"""APScheduler wiring: one discovery-and-dispatch cycle at a time, every `refresh_interval_s`.

The job runs with jitter (replicas started together spread out), coalescing (a cycle that
was missed while the previous one ran is run once, not several times) and at most one
instance. `run_soon` brings the next cycle forward, e.g. when a run finished and a slot
is free, or when on-call resumed a table.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger(__name__)

JOB_ID = "discovery-cycle"


class CycleScheduler:
    """Runs `cycle` on an interval in a background thread."""

    def __init__(self, cycle: Callable[[], None], interval_s: float, jitter: float = 0.1):
        self.interval_s = interval_s
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

    @staticmethod
    def _safe(cycle: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
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
            job.modify(next_run_time=dt.datetime.now(dt.UTC))

    def shutdown(self, wait: bool = True) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=wait)


__all__ = ["CycleScheduler"]
