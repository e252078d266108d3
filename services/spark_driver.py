"""The Spark engine's driver: one long-lived child process of the daemon that holds the SparkSession.

With `spark.engine: spark` and `resources.isolation: process` (the default) the daemon holds
no SparkSession: `SparkDriver` starts one child process (the `forkserver` context of
`lakeward.services.supervisor`) that builds the session from the daemon's `spark` settings
(master, conf, fair-scheduler pools) -- that process is the Spark application's driver -- and
hands it every run. Driver-side Python work (planning, the merge commit, the metadata table,
py4j) then shares the driver's GIL, not the API's.

One driver rather than one per run: building a SparkSession in a fresh process took 17-22 s
(and 8 s more for its first job) on this 2-core machine under load, against runs that take a
few seconds; on a cluster each new application also waits for executors of its own.

In the driver each run is a thread under its own Spark job group (the run id) and
fair-scheduler pool, executing the same attempt as a local run's child process
(`lakeward.services.worker.run_attempt`). The messages are the worker's, tagged with the run
id (`(run_id, *message)`) over the one pipe; the daemon answers the questions (`("answer",
run_id, value)`), asks for a cancel (`("cancel", run_id)`: `cancelJobGroup`) and ends the
driver (`("stop",)`). While a run's jobs run the driver reports its task counts (`"progress"`).

Stopping a run (cancel, timeout, drain) cancels its job group, refuses its fence and, when it
passed its fence and waits for the table lock to complete, refuses its completion once it has
the lock (`_DriverLink.completing`). A run whose completion was underway (fence passed, lock
held: phase `committing`) completes its instant all the same (nothing interrupts a completion)
and reports what it did, not the stop; the daemon then waits `completion_grace_s` (the local
engine's, `supervisor.COMPLETION_GRACE_S`) for it rather than `grace_s`. Any other run that
has not ended `grace_s` later (Python work
between jobs cannot be interrupted) is stopped by SIGKILL of the driver's process group, its
JVM included: the other runs in it then fail with that reason (and are retried), and the
next run starts a new driver. A driver that dies fails its runs with its exit reason, never
leaves them stuck.

Memory: while a run executes, the resident memory of the driver's process tree (the
driver's Python, its JVM and what the JVM starts on this machine: a local master's
executors and Spark's Python workers) is sampled every `MEMORY_POLL_S`; its peak is the
run's `peak_rss_bytes`. Past the run's `max_memory_mb` the run is stopped as a cancel is
(its job group cancelled, its fence refused, the driver killed if it has not ended
`grace_s` later) and fails with "memory limit exceeded"; when the tree's memory has not
come back under that bound once the run ended (a JVM keeps the heap it grew), the driver
is killed too, and the next run starts a new one. The runs share the driver, so the bound
is on the driver as a whole while the run executes, whichever of its runs used the memory.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from lakeward.core.engine.spark import SparkEngine, python_worker_conf
from lakeward.services.attempt import AttemptHooks, AttemptResult, RunStopped
from lakeward.services.logs import configure_logging, run_context
from lakeward.services.model import Outcome
from lakeward.services.settings import SparkSettings
from lakeward.services.supervisor import (
    COMPLETION_GRACE_S,
    CONTEXT,
    POLL_S,
    ChildFailed,
    MemoryBound,
    Supervision,
    exit_reason,
    tree_resident_bytes,
)
from lakeward.services.worker import ParentLink, WorkerJob, run_attempt

log = logging.getLogger(__name__)

#: How often the driver reports the Spark task counts of its running runs.
PROGRESS_S = 1.0
#: Messages that end a run's attempt.
LAST_MESSAGES = frozenset({"result", "stopped", "failed", "version_changed"})
#: What the driver process is called in reasons.
DRIVER = "the Spark driver process"
#: How often a run samples the resident memory of the driver's process tree.
MEMORY_POLL_S = 0.5


def build_spark_session(spark: SparkSettings, scratch: Path | None = None) -> Any:
    """A SparkSession from the `spark` settings: master and conf, FAIR scheduling with one pool per action."""
    # lazy: PySpark is optional (lakeward[spark]) and slow to import
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(spark.master).appName(spark.app_name)
    conf = {"spark.ui.showConsoleProgress": "false", "spark.sql.session.timeZone": "UTC"}
    conf.update(python_worker_conf(spark.conf))  # Python workers run this interpreter: they can import lakeward
    if spark.fair_scheduler:
        folder = scratch
        if folder is None:
            folder = Path(tempfile.mkdtemp(prefix="lakeward-spark-"))
            # Spark reads the allocation file when the session starts; the folder goes when this process exits.
            atexit.register(shutil.rmtree, folder, True)
        pools = "".join(
            f'  <pool name="{p}"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>\n'
            for p in spark.pools
        )
        allocation = folder / "fairscheduler.xml"
        allocation.write_text(f'<?xml version="1.0"?>\n<allocations>\n{pools}</allocations>\n')
        conf["spark.scheduler.mode"] = "FAIR"
        conf["spark.scheduler.allocation.file"] = str(allocation)
    conf.update(spark.conf)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class SparkJobGroup:
    """Within it, this thread's Spark jobs belong to the run's job group and fair-scheduler pool."""

    def __init__(self, spark: Any, group: str, description: str, pool: str):
        self.spark, self.group, self.description, self.pool = spark, group, description, pool

    def __enter__(self) -> None:
        if self.spark is not None:
            sc = self.spark.sparkContext
            sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
            sc.setLocalProperty("spark.scheduler.pool", self.pool)

    def __exit__(self, *exc: object) -> None:
        if self.spark is not None:
            sc = self.spark.sparkContext
            sc.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def job_group_progress(spark: Any, group: str) -> str | None:
    """ "running: done/total Spark tasks done" for the job group's jobs; None when it has no task (yet)."""
    try:
        tracker = spark.sparkContext.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
    except Exception:  # the tracker is best effort
        return None
    return f"running: {done}/{total} Spark tasks done" if total else None


class DriverMemory:
    """The resident memory of the driver's process tree while one run executes (module doc): its peak,
    and whether it went past the run's bound (`MemoryBound`), sampled every `MEMORY_POLL_S`."""

    def __init__(self, proc: BaseProcess, max_memory_mb: int | None):
        assert proc.pid is not None
        self.proc = proc
        self.bound = MemoryBound(max_memory_mb, f"{DRIVER} and its children")
        self._next_sample = 0.0

    @property
    def peak(self) -> int:
        return self.bound.peak

    def sample(self) -> int:
        """The tree's resident memory now, in bytes."""
        assert self.proc.pid is not None
        rss = tree_resident_bytes(self.proc.pid)
        self.bound.observe(rss)
        return rss

    def exceeded(self) -> str | None:
        """Why the run must stop, when a sample (every `MEMORY_POLL_S`) finds the tree past the bound."""
        now = time.monotonic()
        if now < self._next_sample:
            return None
        self._next_sample = now + MEMORY_POLL_S
        assert self.proc.pid is not None
        return self.bound.observe(tree_resident_bytes(self.proc.pid))


# -- the driver process ---------------------------------------------------------------------------
class _DriverLink(ParentLink):
    """A run's hooks in the driver: its messages tagged with the run id, its answers from its inbox."""

    def __init__(self, conn: Connection, send_lock: threading.Lock, run_id: str):
        super().__init__(conn)
        self.send_lock, self.run_id = send_lock, run_id
        self.inbox: queue.Queue[Any] = queue.Queue()
        #: The daemon asked to stop the run (`("cancel", run_id)`).
        self.cancelled = False

    def send(self, message: tuple[Any, ...]) -> None:
        with self.send_lock:
            self.conn.send((self.run_id, *message))

    def receive(self) -> Any:
        return self.inbox.get()

    @contextmanager
    def completing(self) -> Iterator[None]:
        """A run stopped while it waited for the table lock does not complete (nothing else interrupts a
        thread); once past this check, its completion goes on whatever comes (module doc)."""
        if self.cancelled:
            raise RunStopped(Outcome.CANCELLED, "stopped before its completion started")
        with super().completing():
            yield


#: Builds the driver's engine from its session (picklable: a class or a module-level function).
EngineFactory = Callable[[Any], Any]


def driver_main(
    settings: SparkSettings,
    logging_setup: tuple[str, str, str] | None,
    nice: int,
    engine_factory: EngineFactory | None,
    conn: Connection,
) -> None:
    """The driver process (module doc): build the session, run what the daemon hands over, until told to stop."""
    os.setsid()  # a group of its own, its JVM in it: SIGKILL of the group takes both
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the terminal's group: the daemon drains
    if nice:
        os.nice(nice)
    if logging_setup is not None:
        configure_logging(*logging_setup, stream=sys.stderr)
    send_lock = threading.Lock()
    try:
        spark = build_spark_session(settings)
    except Exception as exc:
        log.error("the Spark session did not start: %s", exc)
        with send_lock:
            conn.send((None, "broken", f"the Spark session did not start: {type(exc).__name__}: {exc}"))
        sys.exit(1)
    engine = engine_factory(spark) if engine_factory is not None else SparkEngine(spark)
    with send_lock:
        conn.send((None, "ready", spark.sparkContext.applicationId))
    links: dict[str, _DriverLink] = {}

    def run(job: WorkerJob, pool: str, description: str, link: _DriverLink) -> None:
        spec = job.spec
        fields = {"table": job.table.name, "action": spec.action.value, "instant": spec.instant, "run_id": job.run_id}
        try:
            with run_context(**fields), SparkJobGroup(spark, job.run_id, description, pool):
                run_attempt(job, link, engine)  # (reports every failure of the attempt itself)
        except Exception as exc:
            # Outside the attempt only the session's JVM fails (py4j cannot reach it): every later run
            # would fail on it too, and this one would wait for an answer until its timeout. The driver
            # says why and exits: the daemon fails its runs with that reason and starts a new driver.
            reason = f"the Spark session's JVM is gone: {type(exc).__name__}: {exc}"
            log.error("%s; the driver process exits", reason)
            with send_lock:
                conn.send((None, "broken", reason))
            os._exit(1)
        finally:
            links.pop(job.run_id, None)

    def report_progress() -> None:
        while True:
            time.sleep(PROGRESS_S)
            for run_id, link in list(links.items()):
                progress = job_group_progress(spark, run_id)
                if progress is not None:
                    link.send(("progress", progress))

    threading.Thread(target=report_progress, name="progress", daemon=True).start()
    while True:
        try:
            message = conn.recv()
        except EOFError:  # the daemon is gone
            break
        kind = message[0]
        if kind == "run":
            job, pool, description = message[1:]
            link = links[job.run_id] = _DriverLink(conn, send_lock, job.run_id)
            # daemon threads: a driver told to stop exits without waiting for runs the daemon gave up on
            args = (job, pool, description, link)
            threading.Thread(target=run, args=args, name=f"run-{job.run_id}", daemon=True).start()
        elif kind == "answer" and message[1] in links:
            links[message[1]].inbox.put(message[2])
        elif kind == "cancel":
            if message[1] in links:
                links[message[1]].cancelled = True
            spark.sparkContext.cancelJobGroup(message[1])
        elif kind == "stop":
            break
    spark.stop()


# -- the daemon's side ----------------------------------------------------------------------------
class _Answers:
    """Where `Supervision` sends the answers to one run's questions: the driver, tagged with the run id."""

    def __init__(self, driver: SparkDriver, run_id: str):
        self.driver, self.run_id = driver, run_id

    def send(self, value: Any) -> None:
        self.driver._send(("answer", self.run_id, value))


class SparkDriver:
    """The daemon's handle on its Spark driver process (module doc): the engine its runner runs Spark runs on."""

    name = "spark"

    def __init__(
        self,
        settings: SparkSettings,
        *,
        logging_setup: tuple[str, str, str] | None = None,
        nice: int = 0,
        engine_factory: EngineFactory | None = None,
    ):
        self.settings = settings
        self.logging_setup, self.nice, self.engine_factory = logging_setup, nice, engine_factory
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._generation = 0
        #: run id -> (driver generation, the run's inbox)
        self._inboxes: dict[str, tuple[int, queue.Queue[tuple[Any, ...]]]] = {}
        self._progress: dict[str, str] = {}
        self._closed = False
        self._ready = threading.Event()
        #: The Spark application id of the current driver, once its session started.
        self.application_id: str | None = None

    @property
    def pid(self) -> int | None:
        """The driver process's pid while it runs."""
        with self._lock:
            proc = self._proc
        return proc.pid if proc is not None and proc.is_alive() else None

    @property
    def ready(self) -> bool:
        """The driver process runs and its SparkSession has started."""
        with self._lock:
            return self._proc is not None and self._ready.is_set()

    @property
    def starting(self) -> bool:
        """The driver process runs and its SparkSession has not started yet."""
        with self._lock:
            return self._proc is not None and not self._ready.is_set()

    def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the driver's SparkSession has started (starting the driver if none runs)."""
        with self._lock:
            self._ensure_started()
            ready = self._ready
        return ready.wait(timeout_s)

    def start(self) -> None:
        """Start the driver process now (the session builds in the background), unless it runs."""
        with self._lock:
            self._ensure_started()

    def _ensure_started(self) -> BaseProcess:
        """The running driver process, started if there is none (call under the lock)."""
        if self._closed:
            raise ChildFailed("the replica is stopping: its Spark driver is closed")
        if self._proc is not None:
            return self._proc
        conn, child_end = CONTEXT.Pipe()
        args = (self.settings, self.logging_setup, self.nice, self.engine_factory, child_end)
        proc = CONTEXT.Process(target=driver_main, args=args, name="lakeward-spark-driver", daemon=True)
        proc.start()
        child_end.close()
        self._generation += 1
        self._proc, self._conn = proc, conn
        generation = self._generation
        self._ready = threading.Event()
        reader = (proc, conn, generation, self._ready)
        threading.Thread(target=self._read, args=reader, name="spark-driver", daemon=True).start()
        log.info("Spark driver process %s started (master %s)", proc.pid, self.settings.master)
        return proc

    def _read(self, proc: BaseProcess, conn: Connection, generation: int, ready: threading.Event) -> None:
        """The reader of one driver process: each run's messages to its inbox; when it ends, tell its runs why."""
        broken: str | None = None
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            run_id, body = message[0], tuple(message[1:])
            if run_id is None:
                if body[0] == "ready":
                    self.application_id = body[1]
                    ready.set()
                broken = body[1] if body[0] == "broken" else broken
                continue
            if body[0] == "progress":
                self._progress[run_id] = body[1]
                continue
            with self._lock:
                found = self._inboxes.get(run_id)
            if found is not None and found[0] == generation:
                found[1].put(body)
        conn.close()
        proc.join(5)
        reason = broken or exit_reason(proc.exitcode, DRIVER)
        with self._lock:
            if self._proc is proc:
                self._proc = self._conn = None
            orphans = [inbox for gen, inbox in self._inboxes.values() if gen == generation]
        for inbox in orphans:
            inbox.put(("died", reason))
        if not self._closed:
            log.warning("%s %s ended: %s", DRIVER, proc.pid, reason)

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            conn = self._conn
        if conn is None:
            raise ChildFailed(f"{DRIVER} is gone")
        try:
            with self._send_lock:
                conn.send(message)
        except OSError as exc:
            raise ChildFailed(f"{DRIVER} is gone ({exc})") from None

    def progress(self, run_id: str) -> str | None:
        """The run's Spark task counts as the driver last reported them."""
        return self._progress.get(run_id)

    def run(
        self,
        job: WorkerJob,
        hooks: AttemptHooks,
        *,
        pool: str,
        description: str,
        stopped: Callable[[], RunStopped | None],
        grace_s: float,
        completion_grace_s: float = COMPLETION_GRACE_S,
        max_memory_mb: int | None = None,
        on_start: Callable[[int], None] = lambda pid: None,
        on_memory: Callable[[int], None] = lambda peak: None,
    ) -> AttemptResult:
        """Run one attempt in the driver and follow it to its end, as `supervisor.run_in_child` does a child's.

        `max_memory_mb` bounds the driver process tree's resident memory while the run executes
        (module doc); `on_memory` sees the tree's peak so far.
        """
        inbox: queue.Queue[tuple[Any, ...]] = queue.Queue()
        with self._lock:
            proc = self._ensure_started()
            self._inboxes[job.run_id] = (self._generation, inbox)
        assert proc.pid is not None
        on_start(proc.pid)
        watch = Supervision(proc, _Answers(self, job.run_id), hooks, None)
        memory = DriverMemory(proc, max_memory_mb)
        try:
            self._send(("run", job, pool, description))
            while True:
                stop = stopped()
                if stop is not None:
                    completed = self._stop_run(job.run_id, inbox, watch, (grace_s, completion_grace_s))
                    if completed is not None:  # it passed its fence before the stop: the instant is completed
                        log.warning("run %s completed its instant before its stop (%s) took effect", job.run_id, stop)
                        return completed
                    raise stop
                exceeded = memory.exceeded()
                on_memory(memory.peak)
                if exceeded is not None:
                    graces = (grace_s, completion_grace_s)
                    return self._stop_over_memory(job.run_id, inbox, watch, graces, memory, exceeded)
                try:
                    message = inbox.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if message[0] == "died":
                    raise ChildFailed(message[1])
                result = watch.answer(message)
                if result is not None:
                    return result
        finally:
            on_memory(memory.peak)
            with self._lock:
                self._inboxes.pop(job.run_id, None)
            self._progress.pop(job.run_id, None)

    def _stop_run(
        self,
        run_id: str,
        inbox: queue.Queue[tuple[Any, ...]],
        watch: Supervision,
        graces: tuple[float, float],
        refusal: RunStopped | None = None,
    ) -> AttemptResult | None:
        """Cancel the run's Spark jobs and wait for it to end -- `grace_s`, or `completion_grace_s` once its
        completion is underway (`graces`) --; past that, kill the driver.

        Its fence is answered with the run's stop, or with `refusal` when the runner did not stop it.
        The attempt's result when the run completed its instant all the same (its completion was
        underway before the stop: it is not interrupted), else None.
        """
        try:
            self._send(("cancel", run_id))
        except ChildFailed:
            return None
        stopped_at = time.monotonic()
        grace_s, completion_grace_s = graces
        while (left := stopped_at + (completion_grace_s if watch.committing else grace_s) - time.monotonic()) > 0:
            try:
                message = inbox.get(timeout=left)
            except queue.Empty:
                break
            if message[0] == "result":
                result: AttemptResult = message[1]
                return result
            if message[0] == "died" or message[0] in LAST_MESSAGES:
                return None
            try:
                if refusal is not None and message[0] == "fence":
                    watch.conn.send(refusal)
                else:
                    watch.answer(message)  # a fence is answered with the run's stop
            except Exception:
                return None
        waited = completion_grace_s if watch.committing else grace_s
        self.kill(f"run {run_id} did not stop within {waited:g}s of its cancel")
        return None

    def _stop_over_memory(
        self,
        run_id: str,
        inbox: queue.Queue[tuple[Any, ...]],
        watch: Supervision,
        graces: tuple[float, float],
        memory: DriverMemory,
        reason: str,
    ) -> AttemptResult:
        """Stop a run past its memory bound as a cancel does (its instant is not completed); kill the
        driver when its memory has not come back under the bound once the run ended (module doc).
        Raises ChildFailed with `reason`; the attempt's result when it completed its instant all the same."""
        log.warning("stopping run %s: %s", run_id, reason)
        completed = self._stop_run(run_id, inbox, watch, graces, RunStopped(Outcome.FAILED, reason))
        left = memory.sample()
        if memory.bound.over(left):
            self.kill(
                f"its memory ({left / 2**20:.0f} MiB) did not come back under max_memory_mb "
                f"{(memory.bound.limit or 0) // 2**20} "
                f"after run {run_id} went past it",
                only=memory.proc,
            )
        if completed is not None:
            log.warning("run %s completed its instant before its stop took effect", run_id)
            return completed
        raise ChildFailed(reason)

    def kill(self, reason: str, only: BaseProcess | None = None) -> None:
        """SIGKILL the driver's process group (its JVM too); its runs fail with `reason`, the next run starts
        a new driver. `only`: kill the driver only if it is still this process."""
        with self._lock:
            proc = self._proc
        if proc is None or proc.pid is None or (only is not None and proc is not only):
            return
        log.warning("killing %s %s: %s", DRIVER, proc.pid, reason)
        with self._lock:
            for gen, inbox in self._inboxes.values():
                if gen == self._generation:
                    inbox.put(("died", f"{DRIVER} was killed: {reason}"))
            self._generation += 1  # what the old reader reports goes to no run now
            self._proc = self._conn = None
        _kill_group(proc)

    def close(self, grace_s: float = 10.0) -> None:
        """Stop the driver: its session stops, then its process ends (killed after `grace_s`)."""
        with self._lock:
            self._closed = True
            proc, conn = self._proc, self._conn
            self._proc = self._conn = None
        if proc is None or conn is None:
            return
        try:
            with self._send_lock:
                conn.send(("stop",))
        except OSError:
            pass
        proc.join(grace_s)
        if proc.is_alive():
            log.warning("%s %s did not stop within %.0fs: SIGKILL", DRIVER, proc.pid, grace_s)
        _kill_group(proc)
        # the pipe is closed by the driver's reader thread (`_read`), which sees it end: closing it here
        # too raced that close (EBADF on SIGTERM, or closing a descriptor reused in between)


def _kill_group(proc: BaseProcess) -> None:
    """SIGKILL the driver's process group (its JVM is in it) and reap the driver."""
    assert proc.pid is not None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.join()


__all__ = [
    "DRIVER",
    "DriverMemory",
    "EngineFactory",
    "SparkDriver",
    "SparkJobGroup",
    "build_spark_session",
    "driver_main",
    "job_group_progress",
]
