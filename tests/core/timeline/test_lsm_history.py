"""The LSM archived timeline (`.hoodie/timeline/history/`) of table versions 8+.

No fixture has archived instants, so each test archives the oldest completed instants of
a real Hudi 1.x fixture into an LSM history laid out as Hudi's archiver does
(`tests/support/lsm_history.py` says where each layout fact comes from), then reads the
archived copy with lakeward and an untouched copy of the same fixture with hudi-rs: time
travel to archived instants and incremental ranges reaching into them must give the same
rows. hudi-rs does not read the LSM history; on the untouched copy every instant is still
active, so it is the oracle.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lakeward import Table
from lakeward.core.exceptions import CorruptTableError, InstantNotFoundError
from lakeward.core.storage import Storage
from lakeward.core.timeline.lsm_history import latest_snapshot_version, load_archived_instants
from tests.interop.compare import _diff, fail_on, hudi_incremental, hudi_snapshot, hudi_table
from tests.support.lsm_history import archive_instants, compact_layer, completed_times, group_by_file

HISTORY = ".hoodie/timeline/history"

#: (kind, name, how many of the oldest completed instants to archive). The MOR table's
#: archived delta commits wrote log files that stay in live slices (compacted later), so
#: slicing needs their completion times from the history; the COW one archives an insert
#: overwrite (replacecommit) too.
CASES = [
    ("mor/avro", "v9_txns_simple_meta", 9),
    ("cow", "v9_txns_simple_meta", 9),
    ("mor/avro", "v8_trips_8i1u", 1),
]


def _archived_copy(
    fixture_table: Callable[[str, str], str], kind: str, name: str, count: int
) -> tuple[str, str, list[str]]:
    """(original path, archived path, archived instant times)."""
    original = fixture_table(kind, name)
    archived = fixture_table(kind, name)
    times = completed_times(Path(archived))[:count]
    archive_instants(Path(archived), times)
    return original, archived, times


@pytest.mark.parametrize(("kind", "name", "count"), CASES)
def test_archived_instants_join_the_timeline(fixture_table, kind, name, count):
    original, archived, times = _archived_copy(fixture_table, kind, name, count)
    assert not [p for p in (Path(archived) / ".hoodie/timeline").iterdir() if p.name.startswith(tuple(times))]
    before = [(i.time, i.action, i.completion_time) for i in Table.open(original).timeline().completed()]
    timeline = Table.open(archived).timeline()
    after = [(i.time, i.action, i.completion_time) for i in timeline.completed()]
    assert after == before
    assert [i.time for i in timeline.completed() if i.is_archived] == times
    assert all(not i.is_archived for i in timeline.active())


@pytest.mark.parametrize(("kind", "name", "count"), CASES)
def test_time_travel_and_incremental_reach_into_the_history(fixture_table, kind, name, count):
    original, archived, times = _archived_copy(fixture_table, kind, name, count)
    ours, theirs = Table.open(archived), hudi_table(original)
    writes = [i.time for i in ours.timeline().completed_writes()]
    problems = []
    for as_of in [None, *writes]:
        label = f"as of {as_of or 'latest'}"
        problem = _diff(label, ours.read(as_of=as_of), hudi_snapshot(theirs, as_of))
        if problem:
            problems.append(problem)
    # ranges that begin before, inside and at the end of the archived part
    ranges = [("19700101000000000", writes[0]), *zip(writes, writes[1:]), (writes[0], None)]
    for begin, end in ranges:
        problem = _diff(
            f"incremental ({begin}, {end}]", ours.read_incremental(begin, end), hudi_incremental(theirs, begin, end)
        )
        if problem:
            problems.append(problem)
    fail_on(problems)


def test_snapshot_of_an_archived_table_matches_hudi_rs_on_the_same_files(fixture_table):
    """hudi-rs ignores the history but keeps files older than the active timeline: same rows.

    Seven instants: up to the delta commits before the insert overwrite. Hudi does not
    archive a replacecommit before the cleaner removed the groups it replaced (hudi-rs,
    not reading the history, would show them again; lakeward reads the replacecommit from
    the history and does not).
    """
    _, archived, _ = _archived_copy(fixture_table, "mor/avro", "v9_txns_simple_meta", 7)
    fail_on([p for p in [_diff("snapshot", Table.open(archived).read(), hudi_snapshot(hudi_table(archived)))] if p])


def test_without_the_history_archived_instants_are_gone(fixture_table):
    """The time travel above works because of the history: remove it and the instant is unknown."""
    _, archived, times = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 9)
    table = Table.open(archived)
    assert table.read(as_of=times[0]).num_rows > 0
    shutil.rmtree(Path(archived) / HISTORY)
    with pytest.raises(InstantNotFoundError, match="no completed instant"):
        Table.open(archived).read(as_of=times[0])


def test_only_the_latest_manifest_counts(fixture_table):
    """After an LSM compaction the merged layer-0 files stay on disk until cleaned: not read twice,
    and a file no manifest lists any more is ignored."""
    _, archived, times = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 9)
    base = Path(archived)
    files = list(group_by_file(base))
    assert len(files) == 3
    merged = compact_layer(base, files[:2])
    assert merged.endswith("_1.parquet")
    assert set(group_by_file(base)) == {merged, files[2]}
    storage = Storage.for_uri(archived)
    assert latest_snapshot_version(storage, HISTORY) == 4
    instants = load_archived_instants(storage, HISTORY)
    assert [i.time for i in instants] == times
    assert {i.archive_file for i in instants} == {f"{HISTORY}/{merged}", f"{HISTORY}/{files[2]}"}
    # the content comes from the compacted file
    assert Table.open(archived).read(as_of=times[1]).num_rows > 0
    assert load_archived_instants(storage, HISTORY, begin=times[7], end=times[7])[0].time == times[7]


def test_version_file_missing_falls_back_to_the_newest_manifest(fixture_table):
    _, archived, times = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 9)
    history = Path(archived) / HISTORY
    (history / "_version_").unlink()
    storage = Storage.for_uri(archived)
    assert latest_snapshot_version(storage, HISTORY) == 3
    assert [i.time for i in load_archived_instants(storage, HISTORY)] == times


def test_a_manifest_naming_a_missing_file_is_a_clear_error(fixture_table):
    _, archived, _ = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 6)
    history = Path(archived) / HISTORY
    (history / sorted(p.name for p in history.glob("*.parquet"))[0]).unlink()
    with pytest.raises(CorruptTableError, match="does not exist"):
        Table.open(archived).timeline()


def test_a_corrupt_manifest_is_a_clear_error(fixture_table):
    _, archived, _ = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 3)
    (Path(archived) / HISTORY / "manifest_1").write_text("{not json")
    with pytest.raises(CorruptTableError, match="manifest_1"):
        Table.open(archived).timeline()
