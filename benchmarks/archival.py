"""Archival benchmark: a table with 500 commits archived down to `hoodie.keep.min.commits`.

Built with real lakeward writes: 500 upserts of one record each (tiny commits; the BUCKET
index keeps them fast). Archival then moves every instant beyond the newest 20 commits
(`hoodie.keep.min.commits`=20, `hoodie.keep.max.commits`=30: Hudi's defaults) into
`.hoodie/archived/`: each instant's requested, inflight and completed files become
HoodieArchivedMetaEntry records of one archive log file, then the timeline files are
deleted. Prints the build time, the archival time and instants archived per second, and
checks that the table still reads all rows.

Usage: python benchmarks/archival.py [--commits 500] [--path DIR]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from lakeward.core.table import Table
from lakeward.core.timeline.archived import read_archived_entries


def build(path: Path, commits: int) -> Table:
    table = Table.create(
        str(path),
        record_key="id",
        ordering_field="ts",
        options={"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": 1},
    )
    for i in range(commits):
        table.upsert(pa.table({"id": [i], "ts": [i], "v": [f"v{i}"]}))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--path", type=Path, default=None, help="where to build the table (default: a temp dir)")
    args = parser.parse_args()
    root = args.path or Path(tempfile.mkdtemp(prefix="lakeward-archival-"))
    path = root / "t"
    try:
        started = time.perf_counter()
        table = build(path, args.commits)
        built = time.perf_counter() - started
        timeline_files = len(list((path / ".hoodie").glob("2*")))

        started = time.perf_counter()
        result = Table.open(str(path)).archive()
        elapsed = time.perf_counter() - started

        entries = len(read_archived_entries(table.storage))
        rows = table.read(columns=["id"]).num_rows
        assert rows == args.commits, f"read {rows} rows after archival, expected {args.commits}"
        print(f"commits written:          {args.commits} in {built:.1f}s ({timeline_files} timeline files)")
        print(f"instants archived:        {len(result.archived)} ({entries} entries, {result.archive_file})")
        print(f"archival time:            {elapsed:.3f}s")
        print(f"instants archived per s:  {len(result.archived) / elapsed:,.0f}")
        print(f"timeline files left:      {len(list((path / '.hoodie').glob('2*')))}; rows read after: {rows}")
    finally:
        if args.path is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
