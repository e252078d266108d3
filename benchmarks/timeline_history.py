"""Timeline loads of a long-archived table (versions 8+): the LSM history merged, or left as written.

Builds two copies of the same version 9 table: `--commits` one-row upserts, archived after every
`--archive-every` commits as a daemon keeps a busy table (`hoodie.keep.min.commits` 20,
`hoodie.keep.max.commits` 30, Hudi's defaults), one with the history merged after each archival
(`hoodie.timeline.compaction.batch.size` 10, the default: Hudi's `LSMTimelineWriter.compactAndClean`)
and one that never merges (the batch size set past any file count: lakeward before this change).
Then times `Table.timeline()` on each, in CPU time, best and median of `--repeat`: cold (the
process's cache of parsed history files dropped, as in a new process: a CLI call, a Spark task,
a daemon child) and warm (a long-lived process). Prints the history's file count and the ratios.

    python benchmarks/timeline_history.py --commits 1500 --archive-every 10
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lakeward import Table
from lakeward.core.timeline import lsm_history

NEVER = str(2**31 - 1)  # Java's Integer.MAX_VALUE, the largest the option takes


def build(path: Path, commits: int, every: int, batch: str) -> int:
    """The table at `path`; the number of data files its history's latest manifest lists."""
    options = {
        "hoodie.keep.min.commits": "20",
        "hoodie.keep.max.commits": "30",
        "hoodie.timeline.compaction.batch.size": batch,
        "hoodie.metadata.enable": "false",
    }
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_version=9, options=options)
    for i in range(commits):
        table.upsert(pa.table({"id": [i % 50], "ts": [i], "v": [i]}))
        if i % every == every - 1:
            table.archive()
    history = "/".join([".hoodie", "timeline", "history"])
    version = lsm_history.latest_snapshot_version(table.storage, history)
    return len(lsm_history.manifest_files(table.storage, history, version)) if version else 0


def cpu(fn: object, repeat: int, cold: bool) -> tuple[float, float]:
    times = []
    for _ in range(repeat):
        if cold:
            lsm_history._instants_cache.clear()
        began = time.process_time()
        fn()  # type: ignore[operator]
        times.append(time.process_time() - began)
    return min(times), statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1500)
    parser.add_argument("--archive-every", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lakeward-history-"))
    try:
        results = {}
        for name, batch in (("merged", "10"), ("never merged", NEVER)):
            path = root / name.replace(" ", "-")
            began = time.perf_counter()
            files = build(path, args.commits, args.archive_every, batch)
            table = Table.open(str(path))
            archived = sum(1 for i in table.timeline().completed() if i.is_archived)
            cold = cpu(table.timeline, args.repeat, cold=True)
            warm = cpu(table.timeline, args.repeat, cold=False)
            results[name] = (cold, warm)
            print(
                f"{name:>13}: {archived} archived instants in {files} history files (built in "
                f"{time.perf_counter() - began:.0f} s); Table.timeline() CPU cold best {cold[0] * 1e3:.1f} / median "
                f"{cold[1] * 1e3:.1f} ms, warm {warm[0] * 1e3:.2f} / {warm[1] * 1e3:.2f} ms"
            )
        (mc, mw), (nc, nw) = results["merged"], results["never merged"]
        print(
            f"merged / never merged: cold {mc[0] / nc[0]:.2f}x best, {mc[1] / nc[1]:.2f}x median; "
            f"warm {mw[0] / nw[0]:.2f}x best, {mw[1] / nw[1]:.2f}x median"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
