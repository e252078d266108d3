"""The LSM history of a table archived for a long time (versions 8+): merged and cleaned after each
archival, as Hudi's `LSMTimelineWriter.compactAndClean` does, so a timeline load reads a few files,
not one per archival run, and nothing archived is lost.

Each test archives after every write of a small table, with `hoodie.timeline.compaction.batch.size`
3, so that layers 0, 1 and 2 fill within a few dozen writes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.write import parse_write_config
from lakeward.core.exceptions import ConfigError, CorruptTableError
from tests.support import crash

HISTORY = Path(".hoodie/timeline/history")
BATCH = 3
OPTIONS = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.timeline.compaction.batch.size": str(BATCH),
    "hoodie.metadata.compact.max.delta.commits": "1",
}
_DATA_FILE = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")


def _manifest(history: Path, version: int) -> list[str]:
    return [e["fileName"] for e in json.loads((history / f"manifest_{version}").read_text())["files"]]


def _latest(history: Path) -> int:
    return int((history / "_version_").read_text())


def _archive_after_every_write(path: Path, writes: int, version: int = 9) -> tuple[Table, dict[str, dict[int, int]]]:
    """A table written `writes` times, archived after each; the rows as of each write (model)."""
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_version=version, options=OPTIONS)
    snapshots: dict[str, dict[int, int]] = {}
    for i in range(writes):
        _write(table, i, snapshots)
        table.archive()
    return table, snapshots


def _write(table: Table, i: int, snapshots: dict[str, dict[int, int]]) -> None:
    """Write number `i`: one key updated again and again, one new key; `snapshots` gets the rows after it."""
    batch = {i % 4: i, 100 + i: i}
    rows = dict(snapshots[next(reversed(snapshots))]) if snapshots else {}
    rows.update(batch)
    instant = table.upsert(pa.table({"id": list(batch), "ts": [i] * len(batch), "v": list(batch.values())}))
    snapshots[instant.instant_time] = rows


def _rows_as_of(table: Table, instant_time: str) -> dict[int, int]:
    data = table.read(as_of=instant_time, columns=["id", "v"])
    return dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _layers(history: Path) -> list[int]:
    return [int(_DATA_FILE.match(name).group(3)) for name in _manifest(history, _latest(history))]  # type: ignore[union-attr]


def _check_layout(history: Path) -> None:
    """No layer holds a merge's worth of files; on storage, only the kept snapshots and what they list."""
    layers = _layers(history)
    assert all(layers.count(layer) < BATCH for layer in set(layers)), layers
    manifests = sorted(int(p.name.split("_")[1]) for p in history.glob("manifest_*"))
    assert len(manifests) <= 3 + max(layers), manifests
    kept = {name for v in manifests for name in _manifest(history, v)}
    assert {p.name for p in history.glob("*.parquet")} == kept


@pytest.mark.parametrize("version", [8, 9])
def test_a_long_history_is_merged_into_few_files_and_every_archived_instant_stays_readable(tmp_path, version):
    table, snapshots = _archive_after_every_write(tmp_path / "t", 30, version)
    history = tmp_path / "t" / HISTORY
    _check_layout(history)
    assert max(_layers(history)) >= 2
    # the instants are those archived, each once, in order, and each write reads as it was
    timeline = Table.open(str(tmp_path / "t")).timeline()
    archived = [i.time for i in timeline.completed_writes() if i.is_archived]
    assert len(archived) >= 20
    assert archived == sorted(set(archived))
    assert [i.time for i in timeline.completed_writes()] == list(snapshots)
    for instant_time in archived[:: max(1, len(archived) // 6)] + archived[-1:]:
        data = table.read(as_of=instant_time, columns=["id", "v"])
        assert (
            dict(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))
            == (snapshots[instant_time])
        ), instant_time
    # an incremental read across the merged files returns the writes of the range (in completion
    # time on 8+: it begins when the first write completed)
    first, last = archived[2], archived[12]
    completed = {i.time: i.completion_time for i in timeline.completed_writes()}
    begin = completed[first] if version >= 8 else first
    changed = table.read_incremental(begin, completed[last], columns=["id"]).column("id").to_pylist()
    writes = list(snapshots)
    expected = {k for t in writes[writes.index(first) + 1 : writes.index(last) + 1] for k in _written(t, writes)}
    assert set(changed) == expected


def _written(instant_time: str, writes: list[str]) -> set[int]:
    i = writes.index(instant_time)
    return {i % 4, 100 + i}


@pytest.mark.parametrize("point", ["before_merge_manifest", "before_history_clean"])
def test_an_archival_killed_in_its_history_merge_loses_nothing_and_the_next_one_tidies_up(tmp_path, point):
    path = tmp_path / "t"
    history = path / HISTORY
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_version=9, options=OPTIONS)
    snapshots: dict[str, dict[int, int]] = {}
    i = 0
    while not (history / "_version_").exists() or _layers(history).count(0) != BATCH - 1:
        _write(table, i, snapshots)
        table.archive()
        i += 1
    for _ in range(2):  # due for archival again: its layer-0 file fills the layer, and a merge follows
        _write(table, i, snapshots)
        i += 1
    crash.run_and_kill("crash_archiver.py", path, point, json.dumps(OPTIONS))

    def archived() -> list[str]:
        return [t.time for t in Table.open(str(path)).timeline().completed_writes() if t.is_archived]

    in_between = archived()
    assert in_between == sorted(set(in_between)) and set(in_between) <= set(snapshots)
    assert all(_rows_as_of(table, t) == snapshots[t] for t in in_between[-3:])
    for _ in range(6):  # more archivals: a merge again, and a clean of what the killed run left
        _write(table, i, snapshots)
        i += 1
        Table.open(str(path), options=OPTIONS).archive()
    after = archived()
    assert after[: len(in_between)] == in_between and after == sorted(set(after))
    assert all(_rows_as_of(table, t) == snapshots[t] for t in after)
    _check_layout(history)


def test_an_archival_with_nothing_to_archive_writes_back_the_version_file_a_killed_run_deleted(tmp_path):
    """`_version_` is deleted and written again at each publish; a run killed in between left it
    missing until an archival archived something again (readers take the newest manifest meanwhile)."""
    table, snapshots = _archive_after_every_write(tmp_path / "t", 8)
    history = tmp_path / "t" / HISTORY
    newest = max(int(p.name.split("_")[1]) for p in history.glob("manifest_*"))
    (history / "_version_").unlink()
    archived = [t.time for t in Table.open(str(tmp_path / "t")).timeline().completed_writes() if t.is_archived]
    assert Table.open(str(tmp_path / "t"), options=OPTIONS).archive().archived == ()  # nothing due
    assert _latest(history) == newest
    again = [t.time for t in Table.open(str(tmp_path / "t")).timeline().completed_writes() if t.is_archived]
    assert again == archived and set(again) <= set(snapshots)


def test_the_batch_size_is_validated():
    assert parse_write_config({"hoodie.timeline.compaction.batch.size": "4"}).timeline_compaction_batch == 4
    with pytest.raises(ConfigError, match="hoodie.timeline.compaction.batch.size"):
        parse_write_config({"hoodie.timeline.compaction.batch.size": "1"})


def test_a_damaged_history_file_stops_the_merge_with_an_error_naming_it(tmp_path):
    """The merge reads whole history files; a damaged one is a CorruptTableError naming it, as a
    timeline load reports it, not pyarrow's raw error. Its length is kept, so the timeline load's
    cache of parsed files (keyed by length) serves the instants and only the merge reads it."""
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", table_version=9, options=OPTIONS)
    history = tmp_path / "t" / HISTORY
    snapshots: dict[str, dict[int, int]] = {}
    for i in range(40):
        _write(table, i, snapshots)
        table.archive()
        if (history / "_version_").exists() and _layers(history).count(0) == BATCH - 1:
            break
    damaged = history / min(n for n in _manifest(history, _latest(history)) if n.endswith("_0.parquet"))
    damaged.write_bytes(b"x" * damaged.stat().st_size)
    with pytest.raises(CorruptTableError, match=re.escape(damaged.name)):
        for i in range(40, 50):
            _write(table, i, snapshots)
            table.archive()
