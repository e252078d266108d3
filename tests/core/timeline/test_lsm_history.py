"""The LSM archived timeline (`.hoodie/timeline/history/`) of table versions 8+.

No fixture has archived instants, so each test archives the oldest completed instants of
a real Hudi 1.x fixture into an LSM history laid out as Hudi's archiver does
(`tests/support/lsm_history.py` says where each layout fact comes from), then reads the
archived copy with lakeward and an untouched copy of the same fixture with hudi-rs: time
travel to archived instants and incremental ranges reaching into them must give the same
rows. hudi-rs does not read the LSM history; on the untouched copy every instant is still
active, so it is the oracle.

The last tests pin that layout, and the reader, to Apache Hudi's rather than to our own test
writer: file and manifest names by `LSMTimeline`'s patterns, the parquet columns parquet-avro
makes of `HoodieLSMTimelineInstant.avsc`, the manifest bytes Jackson's pretty printer writes,
and the fallbacks Java's own tests exercise (an invalid `_version_`, a leftover temporary
manifest, an empty manifest).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.exceptions import CorruptTableError, InstantNotFoundError
from lakeward.core.storage import Storage
from lakeward.core.timeline.lsm_history import latest_snapshot_version, load_archived_instants
from tests.interop.compare import _diff, fail_on, hudi_incremental, hudi_snapshot, hudi_table
from tests.support.lsm_history import archive_instants, compact_layer, completed_times, group_by_file

HISTORY = ".hoodie/timeline/history"
TIMELINE = Path(".hoodie/timeline")

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


# -- the layout, checked against Apache Hudi's (format reference §2.6; LSMTimeline.java,
# LSMTimelineWriter.java, HoodieLSMTimelineManifest.java, HoodieLSMTimelineInstant.avsc,
# JsonUtils.java in apache/hudi). No Hudi 1.x fixture has archived anything (every
# `.hoodie/timeline/history/` in fixtures/hudi-tables-v8-v9 is empty), so these pin the
# histories the tests above build, and the reader, to the facts of Java's writer rather than
# to our own test writer alone.

#: `LSMTimeline.ARCHIVE_FILE_PATTERN` and `MANIFEST_FILE_PATTERN` (Java `matches()`: whole name).
JAVA_ARCHIVE_FILE = re.compile(r"^(\d+)_(\d+)_(\d)\.parquet$")
JAVA_MANIFEST_FILE = re.compile(r"^manifest_(\d+)$")
#: `HoodieLSMTimelineInstant.avsc` as in apache/hudi (hudi-common/src/main/avro).
JAVA_INSTANT_FIELDS = [
    ("instantTime", ["null", "string"]),
    ("completionTime", ["null", "string"]),
    ("action", ["null", "string"]),
    ("metadata", ["null", "bytes"]),
    ("plan", ["null", "bytes"]),
    ("version", "int"),
]
#: How parquet-avro stores each of those fields: (physical type, logical type, optional).
PARQUET_AVRO_COLUMNS = {
    "instantTime": ("BYTE_ARRAY", "String", True),
    "completionTime": ("BYTE_ARRAY", "String", True),
    "action": ("BYTE_ARRAY", "String", True),
    "metadata": ("BYTE_ARRAY", "None", True),
    "plan": ("BYTE_ARRAY", "None", True),
    "version": ("INT32", "None", False),
}


def _jackson_pretty(entries: list[tuple[str, int]]) -> str:
    """`HoodieLSMTimelineManifest.toJsonString()`: Jackson's default pretty printer over the
    `files` field only (JsonUtils: fields visible, getters such as getFileNames() not)."""
    if not entries:
        return '{\n  "files" : [ ]\n}'
    items = ", ".join(f'{{\n    "fileName" : "{name}",\n    "fileLen" : {size}\n  }}' for name, size in entries)
    return '{\n  "files" : [ ' + items + " ]\n}"


def test_the_histories_built_here_follow_hudis_layout(fixture_table):
    # the 12 oldest instants: delta commits, an insert overwrite, a compaction and a clustering
    original, archived, times = _archived_copy(fixture_table, "mor/avro", "v9_txns_simple_meta", 12)
    history = Path(archived) / HISTORY
    version = int((history / "_version_").read_bytes().decode("utf-8"))  # String.valueOf(N), no newline
    assert (history / "_version_").read_bytes() == str(version).encode()
    assert sorted(int(m.group(1)) for p in history.iterdir() if (m := JAVA_MANIFEST_FILE.match(p.name))) == list(
        range(1, version + 1)
    )
    manifest = json.loads((history / f"manifest_{version}").read_text())
    assert list(manifest) == ["files"] and all(list(e) == ["fileName", "fileLen"] for e in manifest["files"])
    seen = []
    for entry in manifest["files"]:
        path = history / entry["fileName"]
        m = JAVA_ARCHIVE_FILE.match(entry["fileName"])
        assert m is not None and m.group(3) == "0", entry  # freshly archived: layer 0
        assert entry["fileLen"] == path.stat().st_size
        parquet = pq.ParquetFile(path)
        columns = {c.name: (c.physical_type, str(c.logical_type), c.max_definition_level == 1) for c in parquet.schema}
        assert columns == PARQUET_AVRO_COLUMNS
        avro = json.loads(parquet.schema_arrow.metadata[b"parquet.avro.schema"])
        assert avro["name"] == "HoodieLSMTimelineInstant" and avro["namespace"] == "org.apache.hudi.avro.model"
        assert [(f["name"], f["type"]) for f in avro["fields"]] == JAVA_INSTANT_FIELDS
        rows = parquet.read().to_pylist()
        # rows keyed by instant time: the name's min and max are the first and last instant
        assert (m.group(1), m.group(2)) == (rows[0]["instantTime"], rows[-1]["instantTime"])
        assert all(r["version"] == 1 for r in rows)  # LSM_TIMELINE_INSTANT_VERSION_1
        seen += [r["instantTime"] for r in rows]
    assert seen == times
    # a compaction archives as its completed action, `commit`, a clustering as `replacecommit`;
    # both keep their requested plan (MetadataConversionUtils.createLSMTimelineInstant)
    archived_rows = {
        r["instantTime"]: r for f in manifest["files"] for r in pq.read_table(history / f["fileName"]).to_pylist()
    }
    plans = {"compaction": "commit", "clustering": "replacecommit"}
    planned = [
        (t, plans[a]) for t in times for a in plans if (Path(original) / TIMELINE / f"{t}.{a}.requested").exists()
    ]
    assert sorted(a for _, a in planned) == ["commit", "replacecommit"], planned
    for t, completed_action in planned:
        assert archived_rows[t]["action"] == completed_action and archived_rows[t]["plan"], t


def test_a_manifest_as_java_writes_it_is_read(fixture_table):
    """Jackson's pretty-printed manifest, `_version_` without a newline, an unknown field
    (`@JsonIgnoreProperties(ignoreUnknown = true)`): the same archived instants."""
    original, archived, times = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 9)
    history = Path(archived) / HISTORY
    storage = Storage.for_uri(archived)
    version = latest_snapshot_version(storage, HISTORY)
    names = [e["fileName"] for e in json.loads((history / f"manifest_{version}").read_text())["files"]]
    text = _jackson_pretty([(n, (history / n).stat().st_size) for n in names])
    (history / f"manifest_{version}").write_text(text[:-2] + ',\n  "writerNote" : "x"\n}')
    (history / "_version_").write_bytes(str(version).encode())
    assert [i.time for i in load_archived_instants(storage, HISTORY)] == times
    before = [(i.time, i.action, i.completion_time) for i in Table.open(original).timeline().completed()]
    assert [(i.time, i.action, i.completion_time) for i in Table.open(archived).timeline().completed()] == before


def test_a_bad_version_file_falls_back_to_the_manifests_and_skips_temporary_ones(fixture_table):
    """Java's `testCompactionWithCorruptVersionFile` ("invalid_version") and its fallback test
    (a leftover `manifest_<N>.<uuid>` is not a manifest)."""
    _, archived, times = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 9)
    history = Path(archived) / HISTORY
    (history / "_version_").write_text("invalid_version")
    (history / "manifest_4.a5e022a6-e5c9-4450-b9e5-9296262329b5").write_text("{")
    storage = Storage.for_uri(archived)
    assert latest_snapshot_version(storage, HISTORY) == 3
    assert [i.time for i in load_archived_instants(storage, HISTORY)] == times


def test_an_empty_manifest_is_an_empty_snapshot(fixture_table):
    """`HoodieLSMTimelineManifest.fromJsonString("")` is the empty manifest, as is Jackson's
    `"files" : [ ]`."""
    _, archived, _ = _archived_copy(fixture_table, "cow", "v9_txns_simple_meta", 3)
    history = Path(archived) / HISTORY
    storage = Storage.for_uri(archived)
    for text in ("", _jackson_pretty([])):
        (history / "manifest_1").write_text(text)
        assert load_archived_instants(storage, HISTORY) == []
