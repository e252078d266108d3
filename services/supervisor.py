"""The runner's side of a run's child process: start it, answer it, watch it, stop it.

`run_in_child` starts `lakeward.services.worker.main` in a new process from the
`forkserver` context (a server process without Python threads, started fresh with lakeward
preloaded, forks the children: the threaded daemon is never forked and a run starts in a
fraction of a second), answers the child's questions with the run's hooks (plan claims,
the fencing check), and while the child runs:

- stops it when the run is stopped (cancel, timeout, drain): SIGTERM, then SIGKILL after
  `grace_s`; the attempt then ends as the run's `RunStopped` -- unless the child's completion
  was underway (it reported the phase `committing`: fence passed, table lock held). Such a
  child holds SIGTERM back, completes its instant and sends its result (`worker`); the
  attempt ends with that result, and its SIGKILL waits `completion_grace_s` (default
  `COMPLETION_GRACE_S`, counted from the SIGTERM) instead of `grace_s`: a completion is a
  few small writes under the lock, and a SIGKILL in the middle of it would leave a
  half-completed instant for the next writer to repair;
- reads its resident memory (`/proc/<pid>/status`) every `POLL_S` and SIGKILLs it past
  `max_memory_mb` (`ChildFailed`: "memory limit exceeded"), keeping the peak for the record;
- turns a death without a result into `ChildFailed` with the exit reason ("killed by
  signal 9 (SIGKILL)" -- also what the kernel's OOM killer sends --, "exited with code 1"),
  and a child's exception into `ChildFailed` with its type and message.

A killed child leaves its instant inflight: table services are idempotent (core rolls back
the partial files on the next run), so the next run of the plan completes it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from typing import Any

from lakeward.core.exceptions import TableVersionChangedError
from lakeward.services import worker
from lakeward.services.attempt import COMMITTING, AttemptHooks, AttemptResult, RunStopped
from lakeward.services.worker import WorkerJob

log = logging.getLogger(__name__)

#: How often the supervisor looks at the child's memory and the run's stop flag.
POLL_S = 0.1
#: How long a stopped run whose completion was underway gets to finish it before SIGKILL (module doc):
#: far longer than a completion takes (a metadata delta commit and the completed file, under the lock),
#: short enough that a child hung in its storage does not hold a drain up for long.
COMPLETION_GRACE_S = 30.0
#: Fields of `/proc/<pid>/stat` after the command name: the parent pid and the resident pages.
STAT_PPID, STAT_RSS = 1, 21
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")

#: What the fork server imports once, so that no run's child pays for it: lakeward's services, and
#: pandas, which pyarrow imports on its first conversion of Python values (0.4 s of CPU in every
#: child on this project's 2-core machine: a tiny compaction's child went from 0.93 s to 0.54 s).
#: Not polars: its import starts threads of its own, and polars hangs in a child forked after that.
#: A module that is not installed is skipped.
FORKSERVER_PRELOAD = ["lakeward.services.worker", "pandas"]
CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(FORKSERVER_PRELOAD)


class ChildFailed(Exception):
    """The run's child process died or raised; the message is the reason, as the run record shows it."""


def exit_reason(exitcode: int | None, process: str = "the run's process") -> str:
    """Why a child ended without a result, from its exit code (negative: the signal that killed it)."""
    if exitcode is None:
        return f"{process} is still running"
    if exitcode < 0:
        name = signal.Signals(-exitcode).name if -exitcode in signal.Signals._value2member_map_ else "?"
        hint = "; the kernel's OOM killer sends it too" if -exitcode == signal.SIGKILL else ""
        return f"{process} was killed by signal {-exitcode} ({name}{hint})"
    return f"{process} exited with code {exitcode} without a result"


def resident_bytes(pid: int) -> tuple[int, int]:
    """(current, peak) resident memory of process `pid` in bytes; (0, 0) once it is gone."""
    found = {"VmRSS:": 0, "VmHWM:": 0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                fields = line.split()  # "VmRSS:   123456 kB"
                if fields and fields[0] in found:
                    found[fields[0]] = int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0, 0
    return found["VmRSS:"], found["VmHWM:"]


def tree_resident_bytes(root: int) -> int:
    """Resident memory of process `root` and every process descended from it, together, in bytes (0 once
    `root` is gone).

    Read from `/proc/<pid>/stat` (parent pid and resident pages): one file per process of the
    machine, so callers sample it at a coarser pace than one process's status. Descendants, not a
    process group: PySpark's worker daemon makes a group of its own. Pages shared between the
    processes (libraries, copy-on-write) count once per process.
    """
    children: dict[int, list[int]] = {}
    resident: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()  # after "pid (comm)": state ppid pgrp ...
        except OSError:
            continue  # ended meanwhile
        if len(fields) > STAT_RSS:
            pid = int(entry.name)
            resident[pid] = int(fields[STAT_RSS]) * PAGE_BYTES
            children.setdefault(int(fields[STAT_PPID]), []).append(pid)
    total, todo = 0, [root] if root in resident else []
    while todo:
        pid = todo.pop()
        total += resident.get(pid, 0)
        todo.extend(children.get(pid, ()))
    return total


def stop_process(proc: BaseProcess, grace_s: float) -> None:
    """SIGTERM the child, SIGKILL it if it is still there after `grace_s`, and reap it."""
    if proc.is_alive():
        proc.terminate()
        proc.join(grace_s)
    if proc.is_alive():
        log.warning("the run's process %s did not stop within %.1fs of SIGTERM: SIGKILL", proc.pid, grace_s)
        proc.kill()
    proc.join()
    proc.close()  # its pipes now, not when the process object is collected (a kept stop holds it)


class MemoryBound:
    """A run's `resources.max_memory_mb` and the peak resident memory seen while it runs: one rule for a
    run's own process (`Supervision`) and for the Spark driver's process tree (`spark_driver.DriverMemory`)."""

    def __init__(self, max_memory_mb: int | None, where: str = ""):
        self.limit = None if max_memory_mb is None else max_memory_mb * 2**20
        self.peak = 0
        self._where = f" in {where}" if where else ""

    def over(self, rss: int) -> bool:
        """`rss` bytes resident are past the bound."""
        return self.limit is not None and rss > self.limit

    def observe(self, rss: int, peak: int = 0) -> str | None:
        """Record a sample (and a peak the process reported itself); why the run must stop when past the bound."""
        self.peak = max(self.peak, rss, peak)
        if self.limit is None or not self.over(rss):
            return None
        mib = self.limit // 2**20
        return f"memory limit exceeded: {rss / 2**20:.0f} MiB resident{self._where} > max_memory_mb {mib}"


class Supervision:
    """One child being watched (module doc); `peak_rss_bytes` grows as it runs. `conn` takes the
    answers to the child's questions (`send`)."""

    def __init__(self, proc: BaseProcess, conn: Any, hooks: AttemptHooks, max_memory_mb: int | None):
        self.proc, self.conn, self.hooks = proc, conn, hooks
        self.memory = MemoryBound(max_memory_mb)
        #: The child reported that its completion is underway (phase `COMMITTING`): a stop waits for it.
        self.committing = False

    @property
    def peak_rss_bytes(self) -> int:
        return self.memory.peak

    def check_memory(self) -> None:
        """Kill the child and fail the attempt when its resident memory is past the run's bound."""
        assert self.proc.pid is not None
        reason = self.memory.observe(*resident_bytes(self.proc.pid))
        if reason is not None:
            self.proc.kill()
            self.proc.join()
            raise ChildFailed(reason)

    def answer(self, message: tuple[Any, ...]) -> AttemptResult | None:
        """Handle one message of the child; the attempt's result when it is the last one."""
        kind = message[0]
        if kind == "phase":
            self.committing = self.committing or message[1] == COMMITTING
            self.hooks.set_phase(message[1])
        elif kind == "claim_plan":
            self.conn.send(self.hooks.claim_plan(message[1]))
        elif kind == "fence":
            try:
                self.hooks.fence()
            except RunStopped as stopped:
                self.conn.send(stopped)
            else:
                self.conn.send(None)
        else:
            self.memory.observe(0, int(message[-1]))
            if kind == "result":
                result: AttemptResult = message[1]
                return result
            if kind == "stopped":
                raise message[1]
            if kind == "version_changed":
                raise TableVersionChangedError(message[1], message[2], message[3])
            _, type_name, text, trace, _ = message
            log.warning("the run's process raised %s: %s\n%s", type_name, text, trace)
            raise ChildFailed(f"{type_name}: {text}")
        return None

    def next_message(self) -> tuple[Any, ...] | None:
        """The child's next message, None when nothing came within POLL_S; ChildFailed once it is gone."""
        ready = wait([self.conn, self.proc.sentinel], timeout=POLL_S)
        if self.conn in ready or self.conn.poll():
            try:
                message: tuple[Any, ...] = self.conn.recv()
                return message
            except EOFError:
                pass
        elif not ready:
            return None
        self.proc.join()
        raise ChildFailed(exit_reason(self.proc.exitcode))


def run_in_child(
    job: WorkerJob,
    hooks: AttemptHooks,
    *,
    stopped: Callable[[], RunStopped | None],
    max_memory_mb: int | None,
    grace_s: float,
    completion_grace_s: float = COMPLETION_GRACE_S,
    on_start: Callable[[int], None] = lambda pid: None,
    on_memory: Callable[[int], None] = lambda peak: None,
) -> AttemptResult:
    """Run one attempt in a child process and supervise it to its end (module doc).

    `stopped()` is the run's stop (None while it may go on); `on_start(pid)` and
    `on_memory(peak bytes)` report to the run record.
    """
    conn, child_end = CONTEXT.Pipe()
    proc = CONTEXT.Process(target=worker.main, args=(job, child_end), name=f"lakeward-run-{job.run_id}", daemon=True)
    proc.start()
    child_end.close()
    assert proc.pid is not None
    on_start(proc.pid)
    watch = Supervision(proc, conn, hooks, max_memory_mb)
    result: AttemptResult | None = None
    try:
        while result is None:
            stop = stopped()
            if stop is not None:
                result = _stop_child(watch, grace_s, completion_grace_s)
                if result is not None:  # its completion was underway: the instant is completed
                    log.warning("run %s completed its instant before its stop (%s) took effect", job.run_id, stop)
                    return result
                raise stop
            watch.check_memory()
            on_memory(watch.peak_rss_bytes)
            message = watch.next_message()
            result = watch.answer(message) if message is not None else None
        return result
    finally:
        on_memory(watch.peak_rss_bytes)
        conn.close()
        if result is None:
            stop_process(proc, grace_s)
        else:  # the plan is done: report it now, while the child closes its table and exits
            _REAPER.add(proc, grace_s)


def _stop_child(watch: Supervision, grace_s: float, completion_grace_s: float) -> AttemptResult | None:
    """SIGTERM the child and follow it to its end, answering its questions (a fence with the run's stop);
    SIGKILL it `grace_s` after the SIGTERM, or `completion_grace_s` after it once the child reported
    that its completion is underway. The attempt's result when the child sent it (it completed its
    instant: module doc), else None (the stop stands; the child is reaped)."""
    proc = watch.proc
    if proc.is_alive():
        proc.terminate()
    stopped_at = time.monotonic()
    try:
        while time.monotonic() < stopped_at + (completion_grace_s if watch.committing else grace_s):
            message = watch.next_message()
            if message is None:
                continue
            result = watch.answer(message)  # a last message other than a result raises
            if result is not None:  # the child exits by itself (the caller hands it to the reaper)
                return result
    except (ChildFailed, RunStopped, TableVersionChangedError, OSError):  # gone or ended otherwise: the stop stands
        pass
    if proc.is_alive():
        waited = completion_grace_s if watch.committing else grace_s
        log.warning("the run's process %s did not stop within %.1fs of SIGTERM: SIGKILL", proc.pid, waited)
        proc.kill()
    proc.join()
    return None


class _Reaper:
    """Waits for children that sent their result to exit by themselves (SIGKILL after their grace), and
    reaps them: one thread for the whole process, started at the first child and kept (a thread per
    child would make the replica's thread count follow its runs)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._children: list[tuple[BaseProcess, float]] = []
        self._thread: threading.Thread | None = None

    def add(self, proc: BaseProcess, grace_s: float) -> None:
        with self._lock:
            self._children.append((proc, time.monotonic() + grace_s))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="run-reaper", daemon=True)
                self._thread.start()
            self._lock.notify()

    def pending(self) -> int:
        """Children not reaped yet."""
        with self._lock:
            return len(self._children)

    def _loop(self) -> None:
        while True:
            with self._lock:
                while not self._children:
                    self._lock.wait()
                children = list(self._children)
            sentinels = [proc.sentinel for proc, _ in children]
            deadline = min(d for _, d in children)
            wait(sentinels, timeout=max(0.0, min(POLL_S * 5, deadline - time.monotonic())))
            done = []
            for proc, until in children:
                if proc.is_alive() and time.monotonic() >= until:
                    log.warning(
                        "the run's process %s did not exit within its grace after its result: SIGKILL", proc.pid
                    )
                    proc.kill()
                    proc.join(1.0)
                if not proc.is_alive():
                    proc.join()
                    proc.close()
                    done.append(proc)
            with self._lock:
                self._children = [(p, d) for p, d in self._children if p not in done]


_REAPER = _Reaper()


def unreaped_children() -> int:
    """Children of this process that sent their result and are not reaped yet (they exit by themselves)."""
    return _REAPER.pending()


__all__ = [
    "COMPLETION_GRACE_S",
    "CONTEXT",
    "POLL_S",
    "ChildFailed",
    "Supervision",
    "exit_reason",
    "MemoryBound",
    "resident_bytes",
    "run_in_child",
    "stop_process",
    "tree_resident_bytes",
    "unreaped_children",
]
