"""Archival: which instants move to `.hoodie/archived/`, what the archive holds, and that reads still work."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.file_group.log_file import BlockType, RawBlock, scan_blocks
from lakeward.core.table import Table
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.archived import (
    decode_archive_block,
    parse_archive_version,
    read_archived_entries,
)
from tests.support import crash

# archival stays behind the metadata table's last compaction (Hudi's rule): compact it with every commit; on
# merge-on-read tables it keeps the delta commits a compaction counts (Hudi's rule): 3 of them
OPTIONS = {
    "hoodie.keep.min.commits": 3,
    "hoodie.keep.max.commits": 5,
    "hoodie.metadata.compact.max.delta.commits": 1,
    "hoodie.compact.inline.max.delta.commits": 3,
}


def _table(path: Path, n: int, table_type: str | None = None, options: dict[str, Any] | None = None) -> Table:
    table = Table.create(
        str(path), record_key="id", ordering_field="ts", table_type=table_type, options=options or OPTIONS
    )
    for i in range(n):  # one new key per commit: a commit's rows survive only if its files are read
        table.upsert(pa.table({"id": [i], "ts": [i], "v": [f"v{i}"]}))
    return table


def _commit_times(table: Table) -> list[str]:
    return [i.time for i in Timeline.load(table.storage).completed_writes()]


def _rows(table: Table) -> dict[int, str]:
    data = table.read(columns=["id", "v"])
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _hudi_rows(path: Path) -> dict[int, str]:
    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    data = pa.Table.from_batches(batches)
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _raw_entries(path: Path) -> list[dict[str, Any]]:
    """Every record of every archive file, duplicates included."""
    folder = path / ".hoodie" / "archived"
    out = []
    for name in sorted(os.listdir(folder)):
        if parse_archive_version(name) is None:
            continue
        for block in scan_blocks((folder / name).read_bytes()):
            assert isinstance(block, RawBlock)
            assert block.block_type is BlockType.AVRO_DATA
            out.extend(decode_archive_block(block))
    return out


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_archives_beyond_max_down_to_min_and_both_readers_still_read(tmp_path, table_type):
    path = tmp_path / "t"
    table = _table(path, 8, table_type)
    times = _commit_times(table)
    before = _rows(table)

    result = table.archive()

    action = "commit" if table_type == "COPY_ON_WRITE" else "deltacommit"
    assert result.archived == tuple(f"{t}.{action}" for t in times[:5])
    assert _commit_times(table) == times[5:]
    names = os.listdir(path / ".hoodie" / "archived")
    assert names == [".commits_.archive.1_1-0-1"]
    assert not [n for n in os.listdir(path / ".hoodie") if n.split(".")[0] in times[:5]]
    entries = read_archived_entries(table.storage)
    assert [(e["commitTime"], e["actionType"], e["actionState"]) for e in entries] == [
        (t, action, state) for t in times[:5] for state in ("REQUESTED", "INFLIGHT", "COMPLETED")
    ]
    completed = [e for e in entries if e["actionState"] == "COMPLETED"]
    meta = completed[0]["hoodieCommitMetadata"]
    assert meta["operationType"] == "UPSERT"
    assert "schema" in meta["extraMetadata"]
    stats = [s for ss in meta["partitionToWriteStats"].values() for s in ss]
    assert stats and stats[0]["numInserts"] == 1 and stats[0]["fileId"]
    assert result.num_entries == 15

    assert _rows(table) == before == {i: f"v{i}" for i in range(8)}
    assert _hudi_rows(path) == before
    assert table.schema() is not None

    # Nothing more to do: the active timeline holds min (3) < max commits.
    again = table.archive()
    assert again.archived == () and again.archive_file is None
    # The table keeps being written and archived into the next version.
    for i in range(8, 11):
        table.upsert(pa.table({"id": [i], "ts": [i], "v": [f"v{i}"]}))
    assert len(table.archive().archived) == 3
    assert sorted(os.listdir(path / ".hoodie" / "archived")) == [
        ".commits_.archive.1_1-0-1",
        ".commits_.archive.2_1-0-1",
    ]
    assert _rows(table) == _hudi_rows(path) == {i: f"v{i}" for i in range(11)}


@pytest.mark.parametrize("version", [6, 9])
def test_merge_on_read_archival_keeps_the_delta_commits_a_compaction_counts(tmp_path, version):
    """With a compaction due after 10 delta commits and archival keeping 3 to 4 commits, archival took the
    delta commits of a table that had not compacted yet: the count since the last compaction never reached
    10 again, so no compaction was ever due and log files piled up (Hudi keeps them: its archiver's
    `getEarliestInstantToRetainForCompaction`)."""
    options = {**OPTIONS, "hoodie.keep.max.commits": 4, "hoodie.compact.inline.max.delta.commits": 10}
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        ordering_field="ts",
        table_type="MERGE_ON_READ",
        table_version=version,
        options=options,
    )
    for i in range(8):
        table.upsert(pa.table({"id": [i % 2], "ts": [i], "v": [f"v{i}"]}))
    times = _commit_times(table)
    assert table.archive().archived == ()  # 8 < 10 delta commits since no compaction: all kept
    for i in range(8, 12):
        table.upsert(pa.table({"id": [i % 2], "ts": [i], "v": [f"v{i}"]}))
    times = _commit_times(table)
    assert len(times) == 12
    assert table.schedule_compaction() is not None  # due: 12 >= 10 delta commits are still counted
    archived = [a.split(".")[0] for a in table.archive().archived]
    assert archived == times[:2]  # the 10 newest delta commits stay for the compaction trigger
    assert _rows(table) == {0: "v10", 1: "v11"}


def test_at_most_max_commits_archives_nothing(tmp_path):
    table = _table(tmp_path / "t", 5)
    assert table.archive().archived == ()
    assert len(_commit_times(table)) == 5


def test_blocks_hold_at_most_the_archival_batch(tmp_path):
    path = tmp_path / "t"
    table = _table(path, 8, options={**OPTIONS, "hoodie.commits.archival.batch": 4})
    table.archive()
    blocks = list(scan_blocks((path / ".hoodie" / "archived" / ".commits_.archive.1_1-0-1").read_bytes()))
    assert [len(decode_archive_block(b)) for b in blocks if isinstance(b, RawBlock)] == [4, 4, 4, 3]


def test_a_pending_instant_is_a_barrier(tmp_path):
    path = tmp_path / "t"
    table = _table(path, 8)
    times = _commit_times(table)
    os.remove(path / ".hoodie" / f"{times[2]}.commit")  # the third commit is in flight again
    result = table.archive()
    assert [a.split(".")[0] for a in result.archived] == times[:2]


def test_a_savepoint_is_a_barrier(tmp_path):
    path = tmp_path / "t"
    table = _table(path, 8)
    times = _commit_times(table)
    table.savepoint(times[3])
    result = table.archive()
    assert [a.split(".")[0] for a in result.archived] == times[:3]
    assert (path / ".hoodie" / f"{times[3]}.savepoint").exists()
    assert table.savepoints() == [times[3]]


def test_the_latest_clean_earliest_commit_to_retain_is_a_barrier(tmp_path):
    path = tmp_path / "t"
    options = {**OPTIONS, "hoodie.cleaner.commits.retained": 6}
    table = Table.create(str(path), record_key="id", ordering_field="ts", options=options)
    for i in range(9):  # the same key: every commit rewrites the one file group
        table.upsert(pa.table({"id": [0], "ts": [i], "v": [f"v{i}"]}))
    clean = table.clean()
    assert clean is not None
    times = _commit_times(table)
    retain = clean.earliest_commit_to_retain
    assert retain in times and times.index(retain) < len(times) - 3
    result = table.archive()
    assert [a.split(".")[0] for a in result.archived] == [t for t in times if t < retain]
    assert _rows(table) == _hudi_rows(path) == {0: "v8"}


def test_a_replacecommit_whose_replaced_files_remain_is_a_barrier(tmp_path):
    path = tmp_path / "t"
    table = _table(path, 2)
    table.insert_overwrite_table(pa.table({"id": [100], "ts": [0], "v": ["o"]}))  # replaces; old files not cleaned
    for i in range(5):
        table.upsert(pa.table({"id": [200 + i], "ts": [0], "v": ["n"]}))
    times = _commit_times(table)
    result = table.archive()
    assert [a.split(".")[0] for a in result.archived] == times[:2]
    expected = {100: "o", **{200 + i: "n" for i in range(5)}}
    assert _rows(table) == _hudi_rows(path) == expected


def test_cleans_and_rollbacks_older_than_the_first_kept_commit_go_too(tmp_path):
    path = tmp_path / "t"
    table = _table(path, 2)
    # A failed write between the 2nd and 3rd commit: the next write rolls it back (a rollback instant).
    failed = str(int(_commit_times(table)[-1]) + 1)
    (path / ".hoodie" / f"{failed}.commit.requested").write_bytes(b"")
    for i in range(2, 8):
        table.upsert(pa.table({"id": [i], "ts": [i], "v": [f"v{i}"]}))
    timeline = Timeline.load(table.storage)
    rollbacks = [i.time for i in timeline.completed() if i.action.value == "rollback"]
    assert len(rollbacks) == 1
    result = table.archive()
    assert f"{rollbacks[0]}.rollback" in result.archived
    entries = read_archived_entries(table.storage)
    entry = next(e for e in entries if e["actionType"] == "rollback" and e["actionState"] == "COMPLETED")
    assert entry["hoodieRollbackMetadata"]["commitsRollback"] == [failed]
    after = Timeline.load(table.storage)
    assert after.instants[0].time == _commit_times(table)[0]  # the active timeline is a suffix
    assert _rows(table) == _hudi_rows(path) == {i: f"v{i}" for i in range(8)}


def test_time_travel_to_an_archived_instant_is_a_clear_error(tmp_path):
    table = _table(tmp_path / "t", 8)
    times = _commit_times(table)
    assert _rows(table.__class__.open(table.path)) == {i: f"v{i}" for i in range(8)}
    table.archive()
    with pytest.raises(InstantNotFoundError, match=f"earliest readable instant is {times[5]}"):
        table.read(as_of=times[1])
    assert table.read(as_of=times[5]).num_rows == 6


def test_min_must_be_less_than_max(tmp_path):
    with pytest.raises(ConfigError, match=r"hoodie\.keep\.min\.commits \(30\) must be less than hoodie\.keep\.max"):
        Table.create(str(tmp_path / "t"), record_key="id", options={"hoodie.keep.min.commits": "30"}).upsert(
            pa.table({"id": [1]})
        )


def _run_and_kill(path: Path, point: str) -> None:
    crash.run_and_kill("crash_archiver.py", path, point, json.dumps(OPTIONS))


@pytest.mark.parametrize("point", ["after_archive_file", "after_some_deletes"])
def test_killed_archival_rerun_neither_duplicates_nor_loses(tmp_path, point):
    path = tmp_path / "t"
    table = _table(path, 8)
    times = _commit_times(table)
    _run_and_kill(path, point)
    # Readers see a consistent table in between.
    assert _rows(Table.open(str(path))) == _hudi_rows(path) == {i: f"v{i}" for i in range(8)}

    still_active = [t for t in times if t in _commit_times(Table.open(str(path)))]
    assert still_active == (times if point == "after_archive_file" else times[1:])

    result = Table.open(str(path), options=OPTIONS).archive()

    assert [a.split(".")[0] for a in result.archived] == still_active[: len(still_active) - 3]
    assert result.num_entries == 0  # all were in the archive file already
    raw = _raw_entries(path)
    keys = [(e["commitTime"], e["actionType"], e["actionState"]) for e in raw]
    assert len(keys) == len(set(keys)) == 15
    assert {k[0] for k in keys} == set(times[:5])
    assert _commit_times(Table.open(str(path))) == times[5:]
    assert _rows(Table.open(str(path))) == _hudi_rows(path) == {i: f"v{i}" for i in range(8)}


def test_an_archive_block_of_replacecommits_alone_is_written_and_read_back(tmp_path):
    """A block whose entries hold replacecommit metadata and no commit's defines `HoodieWriteStat` itself
    (the replace commit schema referred to the definition the commit schema carries, and archival failed
    on every run with fastavro's UnknownType once such a block came)."""
    options = {
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.cleaner.commits.retained": "1",
        "hoodie.metadata.enable": "false",
        "hoodie.commits.archival.batch": "2",
    }
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", partition_by="part", ordering_field="ts", options=options)
    table.upsert(pa.table({"id": ["a"], "part": ["p0"], "val": [0], "ts": [0]}))
    for i in range(1, 9):
        table.insert_overwrite(pa.table({"id": ["a"], "part": ["p0"], "val": [i], "ts": [i]}))
        table.clean()
    result = table.archive()
    assert result.archived
    entries = _raw_entries(path)
    replaces = [e for e in entries if e["actionType"] == "replacecommit" and e.get("hoodieReplaceCommitMetadata")]
    assert replaces
    stats = replaces[0]["hoodieReplaceCommitMetadata"]["partitionToWriteStats"]
    assert stats and all(s["fileId"] for ss in stats.values() for s in ss)
    assert table.read(columns=["id", "val"]).to_pydict() == {"id": ["a"], "val": [8]}


@pytest.mark.parametrize("version", [6, 9])
def test_archival_removes_markers_a_completed_write_left(tmp_path, version):
    """A write whose marker removal failed after it completed (S3 stalling) is told it succeeded and
    leaves `.hoodie/.temp/<instant>/`: nothing removed those folders, one per such write, for good."""
    path = tmp_path / "t"
    table = _table(path, 2, options={**OPTIONS, "hoodie.write.table.version": version})
    first = _commit_times(table)[0]
    left = path / ".hoodie" / ".temp" / first
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "x.parquet.marker.CREATE").write_bytes(b"")
    for i in range(2, 8):
        table.upsert(pa.table({"id": [i], "ts": [i], "v": [f"v{i}"]}))
    pending = table.storage.uri_of(".hoodie/.temp/29990101000000000")  # not archived: a pending write's markers
    os.makedirs(pending)
    archived = table.archive().archived
    assert any(name.startswith(first) for name in archived)
    assert not left.exists()
    assert os.path.isdir(pending)
