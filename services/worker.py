"""A run's child process: one attempt of a plan on the local engine, outside the daemon's process
(`run_attempt` is also what the Spark driver process runs for each Spark run).

The runner (`lakeward.services.supervisor`) starts `main` in a fresh process (the
`forkserver` context: never a fork of the threaded daemon) with a `WorkerJob` and one end
of a pipe. The child opens the table, runs the attempt (`lakeward.services.attempt`) and
sends its result back. What only the daemon knows is asked over the pipe and answered by
the runner: claiming a newly written plan, and the fencing check right before core
completes the instant (the claim must still be held and the run not stopped) -- so a
child never completes a plan whose claim its replica lost.

Messages, child to runner: `("phase", str)`, `("claim_plan", instant)` -> bool,
`("fence",)` -> None or a `RunStopped`, and last one of `("result", AttemptResult, peak)`,
`("stopped", RunStopped, peak)`, `("failed", type name, message, traceback, peak)`, where
peak is the child's peak resident memory in bytes. SIGTERM (cancel, timeout, drain)
raises `Terminated` in the child so that its table lock is released on the way out -- up to
the moment its instant's completion is underway (`ParentLink.completing`: fence passed, table
lock held; the child reports the phase `committing` then). From there on SIGTERM is held
back: the completion goes on, the attempt's last message goes out, and only then does the
child stop (exit code 143), so that a stop never leaves a half-completed instant behind nor
a completed one reported as stopped. A completion that raises lets the held stop take effect
at once.
"""

from __future__ import annotations

import logging
import os
import resource
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from lakeward.core.exceptions import TableVersionChangedError
from lakeward.services import execution
from lakeward.services.attempt import COMMITTING, AttemptSpec, RunStopped, completion_check, completion_scope, perform
from lakeward.services.logs import configure_logging, run_context
from lakeward.services.model import TableRef

log = logging.getLogger(__name__)


class Terminated(BaseException):
    """The runner asked this child to stop (SIGTERM): unwind, releasing locks, and exit."""


@dataclass(frozen=True)
class WorkerJob:
    """Everything a child needs to run one attempt (picklable)."""

    run_id: str
    table: TableRef
    options: dict[str, str]
    spec: AttemptSpec
    #: (format, level, replica) of the daemon's log, or None to leave logging unconfigured.
    logging: tuple[str, str, str] | None = None
    #: The engine the attempt runs on: "local", or a local engine object (pickled over).
    engine: Any = "local"
    #: CPU priority increment of this process (`resources.nice`).
    nice: int = 0


class ParentLink:
    """The attempt's hooks in a child: every question goes to the runner over the pipe."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def send(self, message: tuple[Any, ...]) -> None:
        """One message to the runner (a question, or the attempt's last message)."""
        self.conn.send(message)

    def receive(self) -> Any:
        """The runner's answer to the last question."""
        return self.conn.recv()

    def fence(self) -> None:
        self.send(("fence",))
        answer = self.receive()
        if isinstance(answer, RunStopped):
            raise answer
        log.info("claim re-checked by the daemon before completing")

    def claim_plan(self, instant: str) -> bool:
        self.send(("claim_plan", instant))
        return bool(self.receive())

    def set_phase(self, phase: str) -> None:
        self.send(("phase", phase))

    @contextmanager
    def completing(self) -> Iterator[None]:
        """The completion is underway: the runner learns it (phase `COMMITTING`: it waits for the
        completion before it kills the process of a stopped run)."""
        self.set_phase(COMMITTING)
        yield


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _Termination:
    """SIGTERM in a run's child: `Terminated` at once, except while held (the instant's completion is
    underway): then it is noted, and takes effect at `release` (module doc)."""

    def __init__(self) -> None:
        self.held = False
        self.pending: str | None = None

    def signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.held:
            self.pending = name  # no logging here: a handler may interrupt a log call
            return
        raise Terminated(f"received {name}")

    def hold(self) -> None:
        """From now on SIGTERM waits for `release`."""
        self.held = True

    def release(self, after: str) -> None:
        """SIGTERM takes effect again: `Terminated` now if one came while held (`after`: what it waited for)."""
        self.held = False
        if self.pending is not None:
            log.warning("run process asked to stop (%s) while completing its instant: stopping %s", self.pending, after)
            raise Terminated(f"received {self.pending} while completing its instant")


_TERMINATION = _Termination()


class _ChildLink(ParentLink):
    """The link of a run's own process: SIGTERM is held back from the moment the completion is underway
    until the attempt's last message went out (`main`), or until the completion raised."""

    @contextmanager
    def completing(self) -> Iterator[None]:
        _TERMINATION.hold()  # first: a SIGTERM before this line raised Terminated (the lock wait included)
        try:
            with super().completing():
                yield
        except BaseException:
            _TERMINATION.release("as the completion failed")
            raise


def run_attempt(job: WorkerJob, link: ParentLink, engine: Any) -> None:
    """Run the job's attempt on `engine` and send its last message to the runner (module doc), then
    close the table (the runner has the result meanwhile). `Terminated` goes through."""
    table = None
    try:
        try:
            table = execution.open_table(job.table, job.options, engine, completion_check(link), completion_scope(link))
            result = perform(table, job.spec, engine, link)
        except RunStopped as stopped:
            message: tuple[Any, ...] = ("stopped", stopped, peak_rss_bytes())
        except TableVersionChangedError as changed:  # not retried: the runner re-raises it as it is
            message = ("version_changed", str(changed), changed.expected, changed.found, peak_rss_bytes())
        except Exception as exc:
            message = ("failed", type(exc).__name__, str(exc), traceback.format_exc(limit=8), peak_rss_bytes())
        else:
            message = ("result", result, peak_rss_bytes())
        link.send(message)
    finally:
        if table is not None:
            table.close()  # its ZooKeeper session ends with the run, not at the session timeout


def main(job: WorkerJob, conn: Connection) -> None:
    """Run one attempt and send its outcome to the runner (module doc)."""
    signal.signal(signal.SIGTERM, _TERMINATION.signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the daemon drains, not us
    if job.nice:
        os.nice(job.nice)
    if job.logging is not None:
        configure_logging(*job.logging, stream=sys.stderr)
    spec = job.spec
    link = _ChildLink(conn)
    fields = {"table": job.table.name, "action": spec.action.value, "instant": spec.instant, "run_id": job.run_id}
    exit_code = 0
    with run_context(**fields):
        try:
            run_attempt(job, link, job.engine)
            _TERMINATION.release("now that its result went out")  # a stop held back takes effect
        except Terminated as terminated:  # quietly: the runner that asked knows why
            log.warning("run process stopping: %s", terminated)
            exit_code = 128 + signal.SIGTERM
        finally:
            conn.close()
    if exit_code:
        sys.exit(exit_code)


__all__ = ["ParentLink", "Terminated", "WorkerJob", "run_attempt", "main", "peak_rss_bytes"]
