"""CLI start-up benchmark: wall and CPU time of `lakeward` commands that should answer at once (issue 23).

Creates a small copy-on-write table in a temporary folder, then runs each command `--repeat` times
as a fresh process (the `lakeward` console script next to this interpreter, else
`python -m lakeward.services.cli`) and prints min / median / max wall seconds per command and the
min / median CPU seconds (user + system) of the process, plus the heaviest top-level packages the
`--help` and `show PATH` processes imported (`-X importtime`). On a shared machine the CPU time is
the steadier figure: waiting for a core counts in wall time only.

    python benchmarks/cli_startup.py [--repeat 7]

The commands run as after an install: with Python's bytecode caches (a `PYTHONDONTWRITEBYTECODE`
of the calling environment is dropped, and one untimed run of each command writes the caches).

The target of the issue is under 0.5 s for `--help` and table commands on an idle machine; the
figures include the machine's current load (other processes share its cores; the report prints the
load average), so run it when quiet and compare runs made back to back.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pyarrow as pa

from lakeward import Table


def _command() -> list[str]:
    script = Path(sys.executable).parent / "lakeward"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lakeward.services.cli"]


#: Under this many seconds (median) on an idle machine: the target of issue 23.
TARGET_S = 0.5


def _env() -> dict[str, str]:
    """This environment, with bytecode caches allowed (as an installed lakeward runs)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _time(args: list[str], repeat: int) -> tuple[list[float], list[float]] | None:
    """Wall and CPU (user + system) seconds of each run, after one untimed run; None when the command
    fails (e.g. one this version lacks)."""
    walls, cpus = [], []
    for _ in range(repeat + 1):
        started, cpu_before = time.perf_counter(), _cpu_of_children()
        done = subprocess.run([*_command(), *args], capture_output=True, text=True, timeout=120, env=_env())
        walls.append(time.perf_counter() - started)
        cpus.append(_cpu_of_children() - cpu_before)
        if done.returncode != 0:
            return None
    return walls[1:], cpus[1:]


def _heaviest_imports(args: list[str], top: int) -> list[tuple[str, float]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lakeward.services.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    totals: dict[str, float] = defaultdict(float)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        totals[name.strip().split(".")[0]] += int(self_us) / 1e6
    return sorted(totals.items(), key=lambda kv: kv[1], reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="lakeward-cli-bench-") as folder:
        path = str(Path(folder) / "t")
        table = Table.create(path, record_key="id")
        table.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        commands = {
            "--help": ["--help"],
            "--version": ["--version"],
            "timeline PATH": ["timeline", path],
            "show PATH": ["show", path],
            "plans PATH": ["plans", path],
            "savepoints PATH": ["savepoints", path],
        }
        load = os.getloadavg()[0]
        print(f"lakeward CLI start-up, {args.repeat} runs each ({' '.join(_command())}), load average {load:.1f}")
        print(f"{'command':<18}{'min s':>8}{'median s':>10}{'max s':>8}{'min CPU s':>11}{'median CPU s':>14}")
        for label, argv in commands.items():
            timed = _time(argv, args.repeat)
            if timed is None:
                print(f"{label:<18}   fails")
                continue
            times, cpus = timed
            median = statistics.median(times)
            over = f"  over the {TARGET_S} s target" if median >= TARGET_S else ""
            print(
                f"{label:<18}{min(times):>8.2f}{median:>10.2f}{max(times):>8.2f}"
                f"{min(cpus):>11.2f}{statistics.median(cpus):>14.2f}{over}"
            )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        for label in ("--help", "show PATH"):
            print(f"\nheaviest imports of `{label}` (self time, s, by top-level package):")
            for package, seconds in _heaviest_imports(commands[label], 8):
                print(f"  {package:<20}{seconds:.3f}")


if __name__ == "__main__":
    main()
