"""Discovery benchmark: one discovery cycle over 100, 300, 1,000 and 3,000 tables.

One real merge-on-read table is written with lakeward (`--commits` delta commits, a
pending compaction on top: a few dozen instants, ~3 timeline files each), then copied
with `shutil.copytree` into `db00/ .. db29/`, 100 tables per folder. Each copy gets a
small variation of its timeline (the last 0-3 delta commits lose their completed file,
so they look like writes in flight), so copies are not identical.

For N tables the discovery roots are the first N/100 `dbXX` folders (the scan lists each
root and each table folder, then each table's `.hoodie/`). Per size it prints the first
cycle (empty cache: every timeline parsed, every `hoodie.properties` read) and a cached
cycle (nothing changed: one `.hoodie/` listing per table). Target: 1,000 tables < 2 s.
The page cache is warm (the tables were just written), as on a daemon's second cycle.

Usage: python benchmarks/discovery.py [--sizes 100,300,1000,3000] [--commits 25] [--workers 8] [--path DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lakeward.core.table import Table
from lakeward.services.discovery import DiscoveryCache, discover
from lakeward.services.planning import Policy, plan_work

PER_FOLDER = 100


def build_template(path: Path, commits: int) -> Table:
    table = Table.create(
        str(path),
        record_key="id",
        table_type="MERGE_ON_READ",
        options={"hoodie.compact.inline.max.delta.commits": commits + 1},
    )
    for i in range(commits):
        table.upsert(pa.table({"id": [i % 5], "v": [i]}))
    table.schedule_compaction(force=True)
    return table


def vary(table_dir: Path, k: int) -> None:
    """Drop the completed files of the last k delta commits (they become pending writes)."""
    done = sorted((table_dir / ".hoodie").glob("*.deltacommit"))
    for f in done[len(done) - k :] if k else []:
        f.unlink()


def build(base: Path, count: int, commits: int) -> None:
    template = base / "template"
    t0 = time.perf_counter()
    build_template(template, commits)
    instants = len(Table.open(str(template)).timeline())
    t1 = time.perf_counter()
    for i in range(count):
        dest = base / f"db{i // PER_FOLDER:02d}" / f"t{i:04d}"
        shutil.copytree(template, dest)
        vary(dest, i % 4)
    t2 = time.perf_counter()
    print(f"template: {instants} instants, written in {t1 - t0:.2f}s; {count} copies in {t2 - t1:.2f}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,300,1000,3000")
    parser.add_argument("--commits", type=int, default=25)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--path", help="folder for the tables (default: a temporary folder, removed after)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    base = Path(args.path) if args.path else Path(tempfile.mkdtemp(prefix="lakeward-discovery-"))
    try:
        build(base, max(sizes), args.commits)
        header = ("tables", 7), ("first cycle s", 14), ("cached cycle s", 15), ("plan_work s", 12), ("plans", 6)
        print(" ".join(f"{h:>{w}}" for h, w in header), f"{'problems':>8}")
        for n in sizes:
            roots = [str(base / f"db{j:02d}") for j in range((n + PER_FOLDER - 1) // PER_FOLDER)]
            cache = DiscoveryCache()
            first = discover([], roots, cache, workers=args.workers)
            cached = discover([], roots, cache, workers=args.workers)
            assert len(first.states) == len(cached.states) == n, (len(first.states), n)
            t0 = time.perf_counter()
            items = plan_work(cached.states, Policy(), None, ())
            planning = time.perf_counter() - t0
            print(
                f"{n:>7} {first.seconds:>14.3f} {cached.seconds:>15.3f} {planning:>12.3f} {len(items):>6} "
                f"{len(first.problems):>8}"
            )
    finally:
        if not args.path:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
