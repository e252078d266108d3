"""API latency benchmark: the daemon's read endpoints at a steady request rate, idle and while plans run (issue 6).

Creates `--tables` small MERGE_ON_READ tables (`id` record key, `part` partition, `ts`
ordering field; every key seeded with `bulk_insert`), starts a local standalone ZooKeeper
(`tests.support.zookeeper.ZooKeeperServer`, or `--hosts`) and one daemon replica as a
subprocess (`python -m lakeward.services.cli serve --config cfg.yaml`: the tables as
`tables.static`, `refresh_interval_s: 1`, `compaction.max_delta_commits: 2`, ZooKeeper
claims and table locks, `--engine spark` with `local[2]` or `--engine local`;
`--isolation process` (the default: on the local engine each plan in a child process, on the
Spark engine every plan in the one Spark driver child process, the daemon holding no
SparkSession) or `--isolation thread` (the old mode: plans in threads of the daemon, which
holds the SparkSession), issue 20).

Two phases of `--seconds` each, with the same load: an open-loop schedule of `--rps`
GET requests (request i starts at t0 + i/rps whether or not earlier ones have answered;
asyncio), round-robin over the endpoints on-call reads (`/healthz`, `/readyz`,
`/metrics`, `/api/v1/tables`, `/api/v1/plans`, `/api/v1/runs?limit=100`), sent over
keep-alive HTTP/1.1 connections on asyncio streams (`--client httpx` for httpx, which costs
the load generator several times more CPU per request). Latency is measured from the
scheduled start, so a stalled client or server is not hidden (no coordinated omission).
A response other than 200, or no response within `--timeout`, is an error.

1. idle: no writer; measured once no run is running and no plan is pending.
2. load: a writer process upserts updates of existing keys into the tables, round-robin,
   under the daemon's ZooKeeper table lock (`table_lock_options`, optimistic concurrency),
   so compactions, cleans and archivals keep being planned and run; measured once runs
   have started.

Before each phase, `--quiet-seconds` without any request measure what the daemon spends by
itself. For those windows and the measured ones it prints the CPU seconds used by the
daemon's process (and per request), by its runs' child processes (or the Spark driver), the writer, the load
generator and the whole machine (from /proc): on a machine shared with other work the
latencies measure the machine as much as the daemon, these do not.

Prints per endpoint and overall p50 / p95 / p99 / max in ms for both phases and the
load/idle ratios, achieved request rates, errors, the runs that finished inside each
measured window, the writer's commits; then SIGTERMs the daemon and checks it exits 0.
The exit status is 1 on any request error or a non-zero daemon exit.

Everything (the load generator, the writer, the daemon with its Spark JVM, ZooKeeper)
shares this machine's cores: the figures include that contention, as on a small node.

Usage: python benchmarks/api_latency.py [--tables 20] [--rps 200] [--seconds 20] [--engine spark|local]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import yaml

import lakeward
from lakeward.core.table import Table
from lakeward.services.daemon import table_lock_options
from lakeward.services.settings import load_settings

ENDPOINTS = (
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/v1/tables",
    "/api/v1/plans",
    "/api/v1/runs?limit=100",
)
PARTS = ("p0", "p1", "p2", "p3")


# ------------------------------------------------------------------------------------------ tables


def batch(ids: list[int], ts: int, rng: random.Random) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": [PARTS[i % len(PARTS)] for i in ids],
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "amount": [round(rng.uniform(1, 500), 2) for _ in ids],
            "name": [f"name_{i}_{ts}" for i in ids],
        }
    )


def create_tables(base: Path, count: int, keys: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    paths = []
    for n in range(count):
        path = str(base / f"t{n:03d}")
        table = Table.create(
            path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ"
        )
        table.bulk_insert(batch(list(range(keys)), 0, rng))
        paths.append(path)
    return paths


def writer_main(
    paths: list[str],
    options: dict[str, str],
    keys: int,
    rows: int,
    interval_s: float,
    seed: int,
    stop: Any,
    commits: Any,
    failures: Any,
    last_error: Any,
) -> None:
    """The writer process: updates of `rows` existing keys into each table in turn, every `interval_s`."""
    tables = [Table.open(p, options=options) for p in paths]
    rng = random.Random(seed)
    round_no = 0
    while not stop.is_set():
        round_no += 1
        table = tables[round_no % len(tables)]
        try:
            table.upsert(batch(rng.sample(range(keys), rows), round_no, rng))
            with commits.get_lock():
                commits.value += 1
        except Exception as exc:  # a conflict with a plan, a lock timeout: count it and go on
            with failures.get_lock():
                failures.value += 1
            last_error.value = f"{type(exc).__name__}: {exc}"[:500].encode("utf-8", "replace")
        stop.wait(interval_s)


# ------------------------------------------------------------------------------------------ daemon


def daemon_config(
    paths: list[str], hosts: str, port: int, engine: str, drain_s: float, isolation: str = "process"
) -> dict[str, Any]:
    return {
        "resources": {"isolation": isolation},
        "tables": {"static": [{"path": p} for p in paths], "refresh_interval_s": 1},
        "policies": {"defaults": {"compaction": {"max_delta_commits": 2}}},
        "zookeeper": {"hosts": hosts, "chroot": f"/lakeward-bench-{os.getpid()}"},
        "spark": {
            "master": "local[2]",
            "engine": engine,
            "conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": False},
        },
        "http": {"host": "127.0.0.1", "port": port},
        "log": {"format": "text", "level": "INFO"},
        "drain_time_s": drain_s,
    }


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def get_json(client: httpx.Client, path: str) -> Any:
    response = client.get(path)
    response.raise_for_status()
    return response.json()


def wait_ready(client: httpx.Client, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> float:
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        if process.poll() is not None:
            raise RuntimeError(f"the daemon exited with {process.returncode} while starting; log:\n{log_tail(log)}")
        try:
            if client.get("/readyz").status_code == 200:
                return time.monotonic() - began
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the daemon was not ready within {timeout_s:.0f}s; log:\n{log_tail(log)}")


def wait_quiet(client: httpx.Client, polls: int = 3, timeout_s: float = 120.0) -> float:
    """Wait until no run is running and no plan is pending, `polls` times in a row (1 s apart)."""
    began = time.monotonic()
    quiet = 0
    while quiet < polls:
        if time.monotonic() - began > timeout_s:
            raise RuntimeError(f"the daemon did not go quiet within {timeout_s:.0f}s")
        busy = get_json(client, "/api/v1/runs?state=running") or get_json(client, "/api/v1/plans")
        quiet = 0 if busy else quiet + 1
        time.sleep(1.0)
    return time.monotonic() - began


def wait_runs(client: httpx.Client, since: float, timeout_s: float) -> float:
    """Wait until a run started after `since` (wall clock) has succeeded (a plan written and run)."""
    began = time.monotonic()
    while time.monotonic() - began < timeout_s:
        runs = get_json(client, "/api/v1/runs?state=finished&limit=1000")
        if any(r["started_at"] >= since and r["outcome"] == "succeeded" for r in runs):
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"no run succeeded within {timeout_s:.0f}s of the writer's start")


# --------------------------------------------------------------------------------------------- cpu

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 0
    except (OSError, IndexError):
        return None


def process_cpu_s(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a process (with its reaped children's when `children`); 0 if gone."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / CLOCK_TICKS


def descendants(pid: int) -> list[int]:
    """Live descendants of `pid` (from /proc)."""
    parent: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None:
                parent[int(fields[1])].append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parent.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def machine_busy_s() -> tuple[float, float]:
    """(all busy, busy at nice > 0) CPU seconds of the machine since boot (/proc/stat)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return math.nan, math.nan
    busy = sum(values) - values[3] - values[4]  # all but idle and iowait
    return busy / CLOCK_TICKS, values[1] / CLOCK_TICKS


def renice_threads(pid: int, nice: int) -> None:
    """Set the nice value of every thread of `pid` (threads it starts later inherit their creator's;
    below 0 needs root). With the daemon below 0 the runs' children end at `nice` + `resources.nice`:
    they are forked by a forkserver that a run thread starts."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.setpriority(os.PRIO_PROCESS, int(tid), nice)


@dataclass
class CpuSample:
    """CPU seconds used so far by each party of the benchmark, and the machine's."""

    daemon: float
    runs: float  # the daemon's descendants: the forkserver and the runs' child processes
    writer: float
    client: float  # this process: the load generator
    machine: float
    machine_nice: float

    @classmethod
    def take(cls, daemon: int, writer: int | None) -> CpuSample:
        runs = sum(process_cpu_s(p, children=True) for p in descendants(daemon))
        return cls(
            process_cpu_s(daemon),
            runs,
            process_cpu_s(writer) if writer else 0.0,
            time.process_time(),
            *machine_busy_s(),
        )

    def minus(self, earlier: CpuSample) -> CpuSample:
        return CpuSample(*(a - b for a, b in zip(vars(self).values(), vars(earlier).values(), strict=True)))


# -------------------------------------------------------------------------------------------- load


@dataclass
class Phase:
    name: str
    samples: dict[str, list[float]] = field(default_factory=lambda: collections.defaultdict(list))
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    error_by_endpoint: collections.Counter[str] = field(default_factory=collections.Counter)
    requests: int = 0
    offered_s: float = 0.0
    sent_s: float = 0.0
    done_s: float = 0.0
    window: tuple[float, float] = (0.0, 0.0)
    runs: collections.Counter[str] = field(default_factory=collections.Counter)
    runs_started: int = 0
    running_at_end: int = 0
    commits: int = 0
    write_failures: int = 0
    load_avg: float = 0.0
    #: CPU seconds used during the measured window by each party, and during `--quiet-seconds`
    #: just before it with no request (the daemon's own background work).
    cpu: CpuSample | None = None
    quiet_cpu: CpuSample | None = None
    quiet_s: float = 0.0


class RawHttp:
    """GETs over keep-alive HTTP/1.1 connections on asyncio streams, at most `connections` at once.

    A fraction of httpx's CPU per request (httpx took ~3 ms of CPU per request: at 200
    requests/s the load generator used more of the shared cores than the daemon it measures).
    """

    def __init__(self, url: str, connections: int, timeout_s: float):
        parts = httpx.URL(url)
        self.host, self.port, self.timeout_s = parts.host, parts.port or 80, timeout_s
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._slots = asyncio.Semaphore(connections)

    async def get(self, path: str) -> int:
        """The status code of `GET path`."""
        async with self._slots:
            for attempt in range(2):
                while self._idle and (self._idle[-1][0].at_eof() or self._idle[-1][1].is_closing()):
                    self._idle.pop()[1].close()  # closed by the server (its keep-alive timeout)
                reused = attempt == 0 and bool(self._idle)
                conn = self._idle.pop() if reused else await asyncio.open_connection(self.host, self.port)
                try:
                    status, keep = await asyncio.wait_for(self._exchange(*conn, path), self.timeout_s)
                except (asyncio.IncompleteReadError, ConnectionError) as exc:
                    conn[1].close()
                    if reused and not (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                        continue  # the server closed the idle connection as the request went out: a new one
                    raise
                except BaseException:
                    conn[1].close()
                    raise
                if keep:
                    self._idle.append(conn)
                else:
                    conn[1].close()
                return status
            raise AssertionError("unreachable: the second attempt returns or raises")

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
    ) -> tuple[int, bool]:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode("ascii"))
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip().lower()
        if b"chunked" in headers.get(b"transfer-encoding", b""):
            while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
                await reader.readexactly(size + 2)
            await reader.readuntil(b"\r\n")
        else:
            await reader.readexactly(int(headers.get(b"content-length", b"0")))
        return status, headers.get(b"connection") != b"close"

    def close(self) -> None:
        for _, writer in self._idle:
            writer.close()


class HttpxGet:
    """GETs through httpx (`--client httpx`, the client of the figures before 2026-11-24 16:30)."""

    def __init__(self, url: str, connections: int, timeout_s: float):
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self.client = httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits)
        # At most `connections` requests in flight; the others wait here (their wait counts in the latency)
        # rather than in httpx's pool, whose queue of waiting requests gets slow when it is long.
        self._slots = asyncio.Semaphore(connections)

    async def get(self, path: str) -> int:
        async with self._slots:
            return (await self.client.get(path)).status_code

    async def aclose(self) -> None:
        await self.client.aclose()


async def drive(
    url: str, rps: float, seconds: float, timeout_s: float, connections: int, phase: Phase | None, kind: str = "raw"
) -> None:
    """Open-loop load: request i starts at t0 + i/rps; its latency counts from that scheduled start."""
    loop = asyncio.get_running_loop()
    total = int(round(rps * seconds))
    client: RawHttp | HttpxGet = (RawHttp if kind == "raw" else HttpxGet)(url, connections, timeout_s)
    try:

        async def one(path: str, scheduled: float) -> None:
            error = None
            try:
                status = await client.get(path)
                if status != 200:
                    error = f"HTTP {status}"
            except (
                httpx.HTTPError,
                OSError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
                ValueError,
            ) as exc:
                error = "ReadTimeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            latency = loop.time() - scheduled
            if phase is None:
                return
            phase.samples[path].append(latency)
            if error is not None:
                phase.errors[error] += 1
                phase.error_by_endpoint[path] += 1

        tasks = []
        wall0 = time.time()
        t0 = loop.time() + 0.05
        for i in range(total):
            scheduled = t0 + i / rps
            delay = scheduled - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(ENDPOINTS[i % len(ENDPOINTS)], scheduled)))
        sent = loop.time()
        await asyncio.gather(*tasks)
        done = loop.time()
    finally:
        if isinstance(client, HttpxGet):
            await client.aclose()
        else:
            client.close()
    if phase is not None:
        phase.requests = total
        phase.offered_s = total / rps
        phase.sent_s = sent - t0
        phase.done_s = done - t0
        phase.window = (wall0 + 0.05, wall0 + 0.05 + (done - t0))


def measure(
    name: str,
    url: str,
    args: argparse.Namespace,
    client: httpx.Client,
    writer: dict[str, Any] | None,
    pids: tuple[int, int | None],
) -> Phase:
    phase = Phase(name)
    if args.quiet_seconds > 0:  # no request: what the daemon spends by itself (cycles, runs' supervision)
        start = CpuSample.take(*pids)
        began = time.monotonic()
        time.sleep(args.quiet_seconds)
        phase.quiet_cpu, phase.quiet_s = CpuSample.take(*pids).minus(start), time.monotonic() - began
    asyncio.run(drive(url, args.rps, args.warmup, args.timeout, args.connections, None, args.client))
    before = (writer["commits"].value, writer["failures"].value) if writer else (0, 0)
    start = CpuSample.take(*pids)
    asyncio.run(drive(url, args.rps, args.seconds, args.timeout, args.connections, phase, args.client))
    phase.cpu = CpuSample.take(*pids).minus(start)
    if writer:
        phase.commits = writer["commits"].value - before[0]
        phase.write_failures = writer["failures"].value - before[1]
    phase.load_avg = os.getloadavg()[0]
    start, end = phase.window
    runs = get_json(client, "/api/v1/runs?limit=1000")
    for run in runs:
        if run["ended_at"] is not None and start <= run["ended_at"] <= end:
            phase.runs[f"{run['action']} {run['outcome']}"] += 1
        if start <= run["started_at"] <= end:
            phase.runs_started += 1
        if run["ended_at"] is None:
            phase.running_at_end += 1
    return phase


# ------------------------------------------------------------------------------------------ report


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def figures(samples: list[float]) -> tuple[float, float, float, float]:
    ms = sorted(s * 1000 for s in samples)
    return percentile(ms, 50), percentile(ms, 95), percentile(ms, 99), (ms[-1] if ms else math.nan)


def report(idle: Phase, load: Phase) -> None:
    print()
    print(
        f"{'phase':<6} {'requests':>8} {'offered rps':>11} {'sent rps':>9} {'done rps':>9} {'errors':>7} "
        f"{'runs started':>12} {'runs finished':>13} {'writer commits':>14} {'load avg':>8}"
    )
    for p in (idle, load):
        finished = sum(p.runs.values())
        commits = f"{p.commits} (+{p.write_failures} failed)" if p is load else "-"
        print(
            f"{p.name:<6} {p.requests:>8} {p.requests / p.offered_s:>11.1f} {p.requests / p.sent_s:>9.1f} "
            f"{p.requests / p.done_s:>9.1f} {sum(p.errors.values()):>7} {p.runs_started:>12} {finished:>13} "
            f"{commits:>14} {p.load_avg:>8.2f}"
        )
    for p in (idle, load):
        served = p.requests - sum(p.errors.values())
        print(f"  {p.name}: served {served} of {p.requests} requests ({served / p.done_s:.1f} rps)")
        if p.runs:
            detail = ", ".join(f"{k}: {v}" for k, v in sorted(p.runs.items()))
            print(f"  {p.name}: runs finished in the window by action and outcome: {detail}")
        if p.running_at_end:
            print(f"  {p.name}: {p.running_at_end} run(s) still running when the window ended")
        if p.errors:
            print(f"  {p.name}: errors: {dict(p.errors)} by endpoint {dict(p.error_by_endpoint)}")
    print()
    print("CPU seconds used in each window (cores busy = seconds / window) by the daemon's process, its runs")
    print("(child processes, nice 10), the writer, this load generator, and the whole machine (nice > 0 part):")
    print(
        f"{'window':<12} {'s':>5} {'daemon':>7} {'ms/req':>7} {'runs':>6} {'writer':>7} {'client':>7} "
        f"{'machine':>8} {'nice':>6} {'others':>7}"
    )
    for p in (idle, load):
        for label, cpu, seconds, requests in (
            (f"{p.name} quiet", p.quiet_cpu, p.quiet_s, 0),
            (f"{p.name} measured", p.cpu, p.done_s, p.requests),
        ):
            if cpu is None or not seconds:
                continue
            per_request = f"{cpu.daemon / requests * 1000:>7.2f}" if requests else f"{'-':>7}"
            others = cpu.machine - cpu.daemon - cpu.runs - cpu.writer - cpu.client
            print(
                f"{label:<12} {seconds:>5.1f} {cpu.daemon:>7.2f} {per_request} {cpu.runs:>6.2f} {cpu.writer:>7.2f} "
                f"{cpu.client:>7.2f} {cpu.machine:>8.2f} {cpu.machine_nice:>6.2f} {others:>7.2f}"
            )
    print()
    cols = "p50 p95 p99 max".split()
    print(
        f"{'latency ms (from the scheduled start)':<38} "
        + " ".join(f"{'idle ' + c:>9}" for c in cols)
        + " |"
        + " ".join(f"{'load ' + c:>9}" for c in cols)
        + " | load/idle p50  p99"
    )
    for path in [*ENDPOINTS, "overall"]:
        if path == "overall":
            a = [s for v in idle.samples.values() for s in v]
            b = [s for v in load.samples.values() for s in v]
        else:
            a, b = idle.samples[path], load.samples[path]
        fa, fb = figures(a), figures(b)
        print(
            f"{path:<38} "
            + " ".join(f"{v:>9.1f}" for v in fa)
            + " |"
            + " ".join(f"{v:>9.1f}" for v in fb)
            + f" | {fb[0] / fa[0]:>13.1f}x {fb[2] / fa[2]:>4.1f}x"
        )


# -------------------------------------------------------------------------------------------- main


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run(args: argparse.Namespace, base: Path, hosts: str) -> int:
    t0 = time.perf_counter()
    paths = create_tables(base / "tables", args.tables, args.keys, args.seed)
    print(f"{args.tables} MERGE_ON_READ tables of {args.keys} keys created in {time.perf_counter() - t0:.1f}s")
    port = free_port()
    config = base / "lakeward-bench.yaml"
    settings = daemon_config(paths, hosts, port, args.engine, args.drain, args.isolation)
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    lock_options = table_lock_options(load_settings(config, env={}))
    log = base / "daemon.log"
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKEWARD_")}
    with open(log, "ab") as out:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "lakeward.services.cli", "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=base,  # not a checkout: `lakeward` must resolve to the installed package
            env=env,
        )
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    writer = {"commits": ctx.Value("q", 0), "failures": ctx.Value("q", 0), "last_error": ctx.Array("c", 512)}
    process = None
    code = 0
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            ready = wait_ready(client, daemon, log, args.start_timeout)
            if args.daemon_nice is not None:
                renice_threads(daemon.pid, args.daemon_nice)
            if args.client_nice is not None:  # after the daemon started: it does not inherit it
                renice_threads(os.getpid(), args.client_nice)
            mode = (
                f"engine {args.engine}, isolation {args.isolation}, "
                f"nice {args.daemon_nice or 0} (load generator {args.client_nice or 0})"
            )
            print(f"daemon ({mode}) ready in {ready:.1f}s at {url}; log {log}")
            quiet = wait_quiet(client)
            print(f"daemon quiet (no run, no pending plan) after {quiet:.1f}s more; idle phase")
            idle = measure("idle", url, args, client, None, (daemon.pid, None))

            process = ctx.Process(
                target=writer_main,
                args=(
                    paths,
                    lock_options,
                    args.keys,
                    args.rows,
                    args.write_interval,
                    args.seed + 1,
                    stop,
                    writer["commits"],
                    writer["failures"],
                    writer["last_error"],
                ),
                name="writer",
            )
            since = time.time()
            process.start()
            if args.client_nice is not None and process.pid is not None:
                renice_threads(process.pid, 0)  # the writer keeps the default priority
            first = wait_runs(client, since, args.start_timeout)
            print(f"writer started; first run succeeded after {first:.1f}s; load phase")
            load = measure("load", url, args, client, writer, (daemon.pid, process.pid))
            print(f"writer: {writer['commits'].value} commits, {writer['failures'].value} failed in all")
            if writer["failures"].value:
                print(f"  last writer error: {writer['last_error'].value.decode('utf-8', 'replace')}")
            report(idle, load)
            code = 1 if idle.errors or load.errors else 0
    finally:
        stop.set()
        if process is not None:
            process.join(timeout=60)
            if process.is_alive():
                process.terminate()
                process.join(timeout=10)
        if daemon.poll() is None:
            began = time.monotonic()
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=args.drain + 90)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=30)
                print("daemon did not exit after SIGTERM: killed")
            print(f"\ndaemon exited with {daemon.returncode} {time.monotonic() - began:.1f}s after SIGTERM")
        if daemon.returncode != 0:
            print(f"daemon log (tail):\n{log_tail(log)}")
            code = 1
    return code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tables", type=int, default=20, help="MERGE_ON_READ tables the daemon looks after")
    parser.add_argument("--keys", type=int, default=2000, help="keys per table (seeded with bulk_insert)")
    parser.add_argument("--rows", type=int, default=100, help="updated keys per writer upsert")
    parser.add_argument("--write-interval", type=float, default=0.2, help="seconds between the writer's upserts")
    parser.add_argument("--rps", type=float, default=200.0, help="requests per second (open loop)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="unmeasured seconds of load before each phase")
    parser.add_argument(
        "--quiet-seconds",
        type=float,
        default=5.0,
        help="seconds without requests before each phase, to measure the daemon's own CPU use (0: skip)",
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a request counts as an error")
    parser.add_argument("--connections", type=int, default=100, help="client connection pool size")
    parser.add_argument(
        "--client",
        choices=("raw", "httpx"),
        default="raw",
        help="the load generator's HTTP client: raw asyncio streams (default, cheap) or httpx (as before)",
    )
    parser.add_argument("--engine", choices=("spark", "local"), default="spark", help="the daemon's engine")
    parser.add_argument(
        "--isolation",
        choices=("process", "thread"),
        default="process",
        help=(
            "process (default): local-engine plans in child processes, Spark plans in the Spark driver "
            "process; thread: plans in threads of the daemon (the old mode)"
        ),
    )
    parser.add_argument(
        "--daemon-nice",
        type=int,
        help="renice the daemon's threads once it is ready (e.g. -10, as root: the daemon gets the CPU it "
        "asks for on a machine shared with other work, as on a node with a core of its own)",
    )
    parser.add_argument(
        "--client-nice",
        type=int,
        help="renice this load generator once the daemon is ready (e.g. -10, as root), the writer staying "
        "at 0: whether the latencies wait in the client on a busy machine",
    )
    parser.add_argument("--drain", type=float, default=30.0, help="the daemon's drain_time_s")
    parser.add_argument("--start-timeout", type=float, default=180.0, help="seconds to wait for ready / first run")
    parser.add_argument("--hosts", help="an existing ZooKeeper (default: start a local one)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--path", help="folder for tables, config and daemon log (default: temporary, removed)")
    args = parser.parse_args()
    print(
        f"lakeward {lakeward.__version__} from {Path(lakeward.__file__).parent}; python {sys.version.split()[0]}; "
        f"{os.cpu_count()} cores; {args.rps:g} rps for {args.seconds:g}s per phase"
    )
    base = Path(args.path) if args.path else Path(tempfile.mkdtemp(prefix="lakeward-api-latency-"))
    base.mkdir(parents=True, exist_ok=True)
    server = None
    try:
        hosts = args.hosts
        if hosts is None:
            sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.support (appended: lakeward stays)
            from tests.support.zookeeper import ZooKeeperServer
            from tests.support.zookeeper import free_port as zk_port

            server = ZooKeeperServer(base / "zookeeper", zk_port())
            server.start()
            hosts = server.hosts
            print(f"local ZooKeeper at {hosts} started in {server.startup_seconds:.1f}s")
        code = run(args, base, hosts)
    finally:
        if server is not None:
            server.stop()
        if not args.path:
            shutil.rmtree(base, ignore_errors=True)
    if code:
        print(json.dumps({"exit": code}))
    sys.exit(code)


if __name__ == "__main__":
    main()
