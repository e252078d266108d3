"""Version 8+ log slicing when a log's delta commit was archived and the timeline at hand has no history.

Table services load the active timeline only. A log file written by a delta commit that
archival moved into the LSM history is then unknown to that timeline; it completed (it is
before the timeline's first instant), so it stays in the slice its instant time places it
in. Taking it for a pending write's log put it in the newest slice: a compaction of that
slice merged the old log over newer data (found by the differential model test on v8/v9:
a savepoint kept the old slice and its logs through clean and archival).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lakeward import Table
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.timeline import Timeline
from tests.interop.compare import both_readers

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])
OPTIONS = {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2", "hoodie.cleaner.commits.retained": "1"}


def test_a_compaction_leaves_logs_of_archived_delta_commits_in_their_old_slice(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9, options=OPTIONS
    )

    def upsert(ts: int, v: int) -> str:
        return table.upsert(pa.Table.from_pylist([{"id": "k", "ts": ts, "v": v}], schema=SCHEMA)).instant_time

    upsert(1, 1)  # base file
    old_log = upsert(2, 2)  # a log on the first slice
    kept = upsert(3, 3)
    table.savepoint(kept)  # keeps the first slice (base and logs) through cleans
    first = table.schedule_compaction(force=True)
    assert first is not None
    table.run_compaction(first)
    upsert(4, 4)  # a log on the compacted slice
    upsert(5, 5)
    table.clean()
    archived = [a.split(".")[0] for a in table.archive().archived]
    assert old_log in archived, archived
    active = Timeline.load(table.storage, table.version.timeline_layout)
    (group,) = FileSystemView.load(table.storage, active).file_groups()
    newest = group.slices[-1]
    assert newest.base_instant_time == first
    assert all(log.base_instant_time > first for log in newest.log_files), "the archived delta commit's log"
    second = table.schedule_compaction(force=True)
    assert second is not None
    table.run_compaction(second)
    assert table.read(columns=["id", "v"]).to_pylist() == [{"id": "k", "v": 5}]
    mine, theirs = both_readers(path)
    assert mine == theirs
