"""Merge-on-read of one file slice: which log blocks count, and how versions of a key combine.

Real base files and log files on disk (written by lakeward's base-file and log writers);
the expected rows are worked out by hand in each test.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import random
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lakeward.core.exceptions import CorruptTableError, LakewardError
from lakeward.core.file_group.base_file import BloomSettings, write_base_file
from lakeward.core.file_group.file_group import BaseFile, FileSlice, LogFile
from lakeward.core.file_group.log_file import (
    CommandBlock,
    DataBlockFormat,
    DeleteBlock,
    LogBlock,
    LogFileWriter,
    data_block,
    scan_blocks,
)
from lakeward.core.file_group.naming import base_file_name
from lakeward.core.file_group.reader import (
    MergeSettings,
    VisibleInstants,
    dictionary_meta,
    merge_slice,
    read_file_slices,
    read_merged_file_slice,
    read_slice_contents,
    visible_log_blocks,
)
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.schema import avro_schema_json, with_meta
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline

PARTITION = "p=1"
FILE_ID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d-0"
T0, T1, T2, T3, T4, T5, T6 = (f"2025112109000{i}000" for i in range(7))
DATA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("value", pa.string()), ("extra", pa.int32())])
FULL = with_meta(DATA)
SCHEMA_JSON = avro_schema_json(DATA, "t", with_meta=True)
COMMIT_TIME = MergeSettings("ts", event_time_ordering=False)
EVENT_TIME = MergeSettings("ts", event_time_ordering=True)

Row = tuple[str, int, str]  # (key, ts, value)


def _rows(instant: str, rows: list[Row], schema: pa.Schema = FULL, **extra_columns: list[object]) -> pa.Table:
    n = len(rows)
    columns: dict[str, list[object]] = {
        "_hoodie_commit_time": [instant] * n,
        "_hoodie_commit_seqno": [f"{instant}_0_{i}" for i in range(n)],
        "_hoodie_record_key": [k for k, _, _ in rows],
        "_hoodie_partition_path": [PARTITION] * n,
        "_hoodie_file_name": [FILE_ID] * n,
        "id": [k for k, _, _ in rows],
        "ts": [t for _, t, _ in rows],
        "value": [v for _, _, v in rows],
    }
    columns.update(extra_columns)
    return pa.table({f.name: columns.get(f.name, [None] * n) for f in schema}, schema=schema)


def _base(storage: Storage, rows: list[Row], schema: pa.Schema = FULL) -> BaseFile:
    name = base_file_name(FILE_ID, "0-0-0", T0)
    path = posixpath.join(PARTITION, name)
    size = write_base_file(storage, path, _rows(T0, rows, schema), SCHEMA_JSON, BloomSettings())
    return BaseFile(path, FILE_ID, T0, size)


def _log(storage: Storage, *block_sets: list[LogBlock]) -> tuple[LogFile, ...]:
    writer = LogFileWriter(storage, PARTITION, FILE_ID, T0, "0-1-0")
    return tuple(w.log_file for blocks in block_sets for w in writer.append(blocks))


def _upsert(
    instant: str, rows: list[Row], fmt: DataBlockFormat = DataBlockFormat.AVRO, **extra: list[object]
) -> LogBlock:
    return data_block(_rows(instant, rows, **extra), instant, SCHEMA_JSON, fmt)


def _delete(
    instant: str, keys: list[str], orderings: list[int | None] | None = None, kind: pa.DataType = pa.int64()
) -> LogBlock:
    values = pa.array(orderings, kind) if orderings is not None else None
    return DeleteBlock.create(instant, SCHEMA_JSON, keys, PARTITION, values)


def _state(table: pa.Table) -> dict[str, tuple[int, str, str]]:
    """key -> (ts, value, _hoodie_commit_time); fails on duplicate keys."""
    out = {}
    for r in table.to_pylist():
        assert r["_hoodie_record_key"] not in out, f"duplicate key {r['_hoodie_record_key']}"
        out[r["_hoodie_record_key"]] = (r["ts"], r["value"], r["_hoodie_commit_time"])
    return out


def _read(
    storage: Storage,
    file_slice: FileSlice,
    completed: set[str],
    settings: MergeSettings,
    as_of: str | None = None,
) -> dict[str, tuple[int, str, str]]:
    instants = VisibleInstants(frozenset(completed), None, as_of)
    return _state(read_merged_file_slice(storage, file_slice, FULL, instants, settings))


@pytest.fixture
def storage(tmp_path: Path) -> Storage:
    return Storage.for_uri(str(tmp_path / "table"))


@pytest.mark.parametrize("fmt", list(DataBlockFormat))
def test_commit_time_latest_write_wins_uncommitted_and_rolled_back_blocks_are_hidden(storage: Storage, fmt):
    base = _base(storage, [("k1", 5, "a"), ("k2", 5, "b"), ("k3", 5, "c")])
    logs = _log(
        storage,
        [_upsert(T1, [("k1", 1, "a1"), ("k4", 1, "d")], fmt)],
        [_delete(T2, ["k2"])],
        [_upsert(T3, [("k3", 9, "c3")], fmt)],  # T3 never completes: a failed write
        [_upsert(T4, [("k1", 9, "a4")], fmt)],
        [CommandBlock.rollback(T5, T4)],  # T4 completed, then rolled back
    )
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, logs)
    completed = {T0, T1, T2, T4, T5}

    assert _read(storage, file_slice, completed, COMMIT_TIME) == {
        "k1": (1, "a1", T1),  # lower ordering value, but the later write wins
        "k3": (5, "c", T0),
        "k4": (1, "d", T1),
    }
    # Time travel: as of T1 the delete (T2) has not happened yet.
    assert _read(storage, file_slice, completed, COMMIT_TIME, as_of=T1) == {
        "k1": (1, "a1", T1),
        "k2": (5, "b", T0),
        "k3": (5, "c", T0),
        "k4": (1, "d", T1),
    }
    assert _read(storage, file_slice, completed, COMMIT_TIME, as_of=T0) == {
        "k1": (5, "a", T0),
        "k2": (5, "b", T0),
        "k3": (5, "c", T0),
    }
    # As of T4 the rollback (T5) is in the future: T4's block counts.
    assert _read(storage, file_slice, completed, COMMIT_TIME, as_of=T4)["k1"] == (9, "a4", T4)
    # Once T3 completes, its block counts.
    assert _read(storage, file_slice, completed | {T3}, COMMIT_TIME)["k3"] == (9, "c3", T3)


def test_visible_log_blocks_never_decode_what_does_not_count(storage: Storage):
    logs = _log(storage, [_upsert(T1, [("k1", 1, "x")])], [_upsert(T2, [("k2", 1, "y")])])
    # Damage T2's content while keeping the framing sound: only decoding it fails.
    data = bytearray(storage.read_bytes(logs[1].path))
    [raw] = list(scan_blocks(bytes(data)))
    content_at = len(data) - 8 - 4 - len(raw.content)
    data[content_at + 4 : content_at + 8] = struct.pack(">i", 99)  # record count
    storage.write_bytes(logs[1].path, bytes(data))

    blocks = visible_log_blocks(storage, logs, VisibleInstants(frozenset({T1})))
    assert [b.instant_time for b in blocks] == [T1]
    blocks = visible_log_blocks(storage, logs, VisibleInstants(frozenset({T1, T2}), as_of=T1))
    assert [b.instant_time for b in blocks] == [T1]
    with pytest.raises(CorruptTableError):
        visible_log_blocks(storage, logs, VisibleInstants(frozenset({T1, T2})))


def test_event_time_largest_ordering_value_wins_and_deletes_obey_ordering(storage: Storage):
    base = _base(storage, [("k1", 5, "a"), ("k2", 5, "b"), ("k3", 5, "c"), ("k4", 5, "d"), ("k5", 5, "e")])
    logs = _log(
        storage,
        [_upsert(T1, [("k1", 3, "lower"), ("k2", 5, "tie"), ("k3", 9, "higher")])],
        [_delete(T2, ["k4", "k5"], [4, 6])],  # k4: stored 5 > 4, the delete loses; k5: 6 >= 5, gone
        [_delete(T3, ["k1"])],  # no ordering value: natural order, removes everything before
        [_upsert(T4, [("k1", 1, "after")])],  # after the natural delete: wins with any ordering
        [_delete(T5, ["k3"], [0], pa.int32())],  # Spark SQL's default Integer 0: natural order too
    )
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, logs)
    completed = {T0, T1, T2, T3, T4, T5}

    assert _read(storage, file_slice, completed, EVENT_TIME) == {
        "k1": (1, "after", T4),
        "k2": (5, "tie", T1),  # equal ordering values: the later write
        "k4": (5, "d", T0),
    }
    assert _read(storage, file_slice, completed, EVENT_TIME, as_of=T2) == {
        "k1": (5, "a", T0),
        "k2": (5, "tie", T1),
        "k3": (9, "higher", T1),
        "k4": (5, "d", T0),
    }
    # The same log under commit-time ordering: every later write wins, every delete deletes.
    assert _read(storage, file_slice, completed, COMMIT_TIME) == {
        "k1": (1, "after", T4),
        "k2": (5, "tie", T1),
    }


def test_event_time_log_records_of_one_key_combine_by_ordering_value(storage: Storage):
    base = _base(storage, [("k1", 5, "a")])
    logs = _log(
        storage,
        [_upsert(T1, [("k1", 8, "eight"), ("k2", 2, "two")])],
        [_upsert(T2, [("k1", 7, "seven"), ("k2", 3, "three"), ("k2", 1, "one-in-same-block")])],
    )
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, logs)
    assert _read(storage, file_slice, {T0, T1, T2}, EVENT_TIME) == {
        "k1": (8, "eight", T1),
        "k2": (3, "three", T2),
    }
    assert _read(storage, file_slice, {T0, T1, T2}, COMMIT_TIME) == {
        "k1": (7, "seven", T2),
        "k2": (1, "one-in-same-block", T2),
    }


def test_null_ordering_values_lose_under_event_time(storage: Storage):
    base = _base(storage, [("k1", 5, "a")])
    block = data_block(
        pa.table(
            {
                **{c: _rows(T1, [("k1", 0, "null-ts")]).column(c) for c in FULL.names if c != "ts"},
                "ts": pa.array([None], pa.int64()),
            }
        ).select(FULL.names),
        T1,
        SCHEMA_JSON,
    )
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, _log(storage, [block]))
    assert _read(storage, file_slice, {T0, T1}, EVENT_TIME) == {"k1": (5, "a", T0)}
    assert _read(storage, file_slice, {T0, T1}, COMMIT_TIME) == {"k1": (None, "null-ts", T1)}


def test_is_deleted_records_delete_and_a_later_record_brings_the_key_back(storage: Storage):
    schema = with_meta(DATA.append(pa.field("_hoodie_is_deleted", pa.bool_())))
    schema_json = avro_schema_json(DATA.append(pa.field("_hoodie_is_deleted", pa.bool_())), "t", with_meta=True)
    base = _base(storage, [("k1", 5, "a"), ("k2", 5, "b")], schema)
    marker = data_block(
        _rows(T1, [("k1", 6, "gone"), ("k2", 6, "kept")], schema, _hoodie_is_deleted=[True, False]),
        T1,
        schema_json,
    )
    back = data_block(_rows(T2, [("k1", 7, "back")], schema, _hoodie_is_deleted=[None]), T2, schema_json)
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, _log(storage, [marker], [back]))
    instants = VisibleInstants(frozenset({T0, T1, T2}))

    merged = read_merged_file_slice(storage, file_slice, schema, instants, EVENT_TIME)
    assert _state(merged) == {"k1": (7, "back", T2), "k2": (6, "kept", T1)}
    merged = read_merged_file_slice(storage, file_slice, schema, VisibleInstants(frozenset({T0, T1})), COMMIT_TIME)
    assert _state(merged) == {"k2": (6, "kept", T1)}


def test_log_only_file_group_and_schema_evolution_across_blocks(storage: Storage):
    old = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("value", pa.string())])
    old_json = avro_schema_json(old, "t", with_meta=True)
    first = data_block(_rows(T1, [("k1", 1, "a"), ("k2", 1, "b")], with_meta(old)), T1, old_json)
    second = _upsert(T2, [("k2", 2, "b2")], DataBlockFormat.PARQUET, extra=[42])
    file_slice = FileSlice(PARTITION, FILE_ID, T0, None, _log(storage, [first], [second]))
    merged = read_merged_file_slice(storage, file_slice, FULL, VisibleInstants(frozenset({T1, T2})), COMMIT_TIME)
    assert merged.schema == FULL
    assert sorted(merged.select(["id", "value", "extra"]).to_pylist(), key=lambda r: r["id"]) == [
        {"id": "k1", "value": "a", "extra": None},
        {"id": "k2", "value": "b2", "extra": 42},
    ]


def test_untouched_base_rows_pass_through_unchanged_including_duplicates(storage: Storage):
    base = _base(storage, [("k1", 1, "a"), ("k1", 2, "a-dup"), ("k2", 1, "b")])
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, _log(storage, [_upsert(T1, [("k2", 2, "b2")])]))
    merged = read_merged_file_slice(storage, file_slice, FULL, VisibleInstants(frozenset({T0, T1})), COMMIT_TIME)
    assert sorted((r["id"], r["value"]) for r in merged.to_pylist()) == [("k1", "a"), ("k1", "a-dup"), ("k2", "b2")]


def test_merge_slice_names_the_winning_log_keys_no_base_record_had(storage: Storage):
    schema = with_meta(DATA.append(pa.field("_hoodie_is_deleted", pa.bool_())))
    schema_json = avro_schema_json(DATA.append(pa.field("_hoodie_is_deleted", pa.bool_())), "t", with_meta=True)
    base = _base(storage, [("k1", 1, "a"), ("k2", 1, "b")], schema)
    first = data_block(
        _rows(
            T1,
            [("k2", 2, "b2"), ("k3", 2, "c"), ("k4", 2, "d"), ("k5", 2, "e")],
            schema,
            _hoodie_is_deleted=[None, None, None, True],
        ),
        T1,
        schema_json,
    )
    deletes = DeleteBlock.create(T2, schema_json, ["k1", "k4"], PARTITION)
    again = data_block(_rows(T3, [("k1", 3, "a3"), ("k3", 3, "c3")], schema), T3, schema_json)
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, _log(storage, [first], [deletes], [again]))
    contents = read_slice_contents(storage, file_slice, VisibleInstants(frozenset({T0, T1, T2, T3})))
    merged = merge_slice(contents.base, contents.blocks, schema, COMMIT_TIME)
    assert _state(merged.rows) == {"k1": (3, "a3", T3), "k2": (2, "b2", T1), "k3": (3, "c3", T3)}
    # k1 and k2 were base records; k4 was deleted again and k5 written as deleted: only k3 is new
    assert merged.new_keys.to_pylist() == ["k3"]
    assert sorted(merge_slice(None, contents.blocks, schema, COMMIT_TIME).new_keys.to_pylist()) == ["k1", "k2", "k3"]


def test_commit_time_winners_of_many_versions_match_the_latest_write_model(storage: Storage):
    rng = random.Random(7)
    base = _base(storage, [(f"k{i}", 0, f"base{i}") for i in range(40)])
    model = {f"k{i}": (0, f"base{i}", T0) for i in range(40)}
    block_sets: list[list[LogBlock]] = []
    instants = [T1, T2, T3, T4, T5]
    for n, instant in enumerate(instants):
        keys = rng.sample([f"k{i}" for i in range(60)], 15)
        blocks: list[LogBlock] = []
        if n % 2:  # a delete block, then a data block of the same instant
            blocks.append(_delete(instant, keys[:5]))
            for k in keys[:5]:
                model.pop(k, None)
            keys = keys[5:]
        blocks.append(_upsert(instant, [(k, n + 1, f"{k}@{instant}") for k in keys]))
        model.update({k: (n + 1, f"{k}@{instant}", instant) for k in keys})
        block_sets.append(blocks)
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, _log(storage, *block_sets))
    visible = VisibleInstants(frozenset({T0, *instants}))
    assert _state(read_merged_file_slice(storage, file_slice, FULL, visible, COMMIT_TIME)) == model


def test_visible_instants_from_a_timeline_on_disk(storage: Storage):
    for name in (
        f"{T1}.deltacommit.requested",
        f"{T1}.deltacommit.inflight",
        f"{T1}.deltacommit",
        f"{T2}.deltacommit.requested",
        f"{T2}.deltacommit.inflight",
        f"{T3}.rollback",
        f"{T4}.deltacommit",
    ):
        storage.write_bytes(posixpath.join(".hoodie", name), b"")
    instants = VisibleInstants.from_timeline(Timeline.load(storage))
    assert [t for t in (T0, T1, T2, T3, T4) if instants.is_visible(t)] == [T0, T1, T4]  # T0: archived
    travel = VisibleInstants.from_timeline(Timeline.load(storage), as_of=T3)
    assert [t for t in (T0, T1, T2, T3, T4) if travel.is_visible(t)] == [T0, T1]


# -- read_file_slices: the snapshot entry point ----------------------------------------------
def _two_slices(storage: Storage) -> list[FileSlice]:
    merged = FileSlice(
        PARTITION,
        FILE_ID,
        T0,
        _base(storage, [("k1", 5, "a"), ("k2", 5, "b")]),
        _log(storage, [_upsert(T1, [("k1", 6, "a1"), ("k3", 6, "c")])], [_delete(T2, ["k2"])]),
    )
    other_id = "ffffffff-4e5f-4a6b-8c7d-9e0f1a2b3c4d-0"
    path = posixpath.join("p=2", base_file_name(other_id, "0-0-0", T0))
    rows = _rows(T0, [("z1", 1, "z")]).set_column(3, "_hoodie_partition_path", pa.array(["p=2"]))
    size = write_base_file(storage, path, rows, SCHEMA_JSON, BloomSettings())
    plain = FileSlice("p=2", other_id, T0, BaseFile(path, other_id, T0, size))
    return [merged, plain]


def test_read_file_slices_merges_log_slices_and_keeps_the_fast_path_types(storage: Storage):
    slices = _two_slices(storage)
    instants = VisibleInstants(frozenset({T0, T1, T2}))
    table = read_file_slices(storage, slices, DATA, instants=instants, merge=COMMIT_TIME)
    assert _state(table) == {"k1": (6, "a1", T1), "k3": (6, "c", T1), "z1": (1, "z", T0)}
    cow_only = read_file_slices(storage, slices[1:], DATA)
    assert table.schema == cow_only.schema  # dictionary meta columns, same column types
    assert pa.types.is_dictionary(table.schema.field("_hoodie_commit_time").type)


def test_merged_slice_keeps_the_few_valued_meta_columns_as_dictionaries(storage: Storage):
    base = _base(storage, [("k1", 1, "a"), ("k2", 1, "b")])
    file_slice = FileSlice(
        PARTITION, FILE_ID, T0, base, _log(storage, [_upsert(T1, [("k2", 2, "b2"), ("k3", 2, "c")])])
    )
    instants = VisibleInstants(frozenset({T0, T1}))
    plain = read_merged_file_slice(storage, file_slice, FULL, instants, COMMIT_TIME)
    encoded = read_merged_file_slice(storage, file_slice, dictionary_meta(FULL), instants, COMMIT_TIME)
    # the base file's values are read as a dictionary and merged as one; data columns stay plain
    assert encoded.schema == dictionary_meta(FULL)
    assert plain.schema == FULL
    assert encoded.cast(FULL).sort_by("id").equals(plain.sort_by("id"))
    assert _state(encoded) == {"k1": (1, "a", T0), "k2": (2, "b2", T1), "k3": (2, "c", T1)}


def test_read_file_slices_filters_and_projects_after_merging(storage: Storage):
    slices = _two_slices(storage)
    instants = VisibleInstants(frozenset({T0, T1, T2}))
    # The base row of k1 holds "a"; the merged row holds "a1": the filter sees merged rows.
    assert read_file_slices(storage, slices, DATA, ["id"], pc.field("value") == "a", instants=instants).num_rows == 0
    got = read_file_slices(storage, slices, DATA, ["id", "value"], pc.field("value") == "a1", instants=instants)
    assert got.to_pylist() == [{"id": "k1", "value": "a1"}]
    # k2 matches in the base file but was deleted in the log.
    assert read_file_slices(storage, slices, DATA, ["id"], pc.field("id") == "k2", instants=instants).num_rows == 0


def test_read_file_slices_read_optimized_reads_base_files_only(storage: Storage):
    slices = _two_slices(storage)
    table = read_file_slices(storage, slices, DATA, read_optimized=True)
    assert _state(table) == {"k1": (5, "a", T0), "k2": (5, "b", T0), "z1": (1, "z", T0)}


def test_read_file_slices_refuses_to_guess_the_visible_instants(storage: Storage):
    with pytest.raises(LakewardError, match="instants="):
        read_file_slices(storage, _two_slices(storage), DATA)


def test_file_system_view_groups_written_log_files_into_the_base_slice(storage: Storage):
    slices = _two_slices(storage)
    storage.write_bytes(f".hoodie/{T0}.deltacommit", b"")
    view = FileSystemView.load(storage, Timeline.load(storage))
    [found] = [s for s in view.latest_file_slices() if s.file_id == FILE_ID]
    assert found.base_file == slices[0].base_file
    assert [f.version for f in found.log_files] == [1, 2]
    assert [f.path for f in found.log_files] == [f.path for f in slices[0].log_files]


@pytest.mark.parametrize(
    ("ordering_type", "low", "mid", "high"),
    [
        (pa.decimal128(10, 2), Decimal("4.00"), Decimal("5.00"), Decimal("6.50")),
        (
            pa.timestamp("us", "UTC"),
            dt.datetime(2025, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2025, 1, 2, tzinfo=dt.UTC),
            dt.datetime(2025, 1, 3, tzinfo=dt.UTC),
        ),
        (pa.string(), "b", "c", "d"),
        (pa.int32(), 4, 5, 6),
    ],
)
def test_event_time_deletes_compare_ordering_values_of_any_type(
    storage: Storage, ordering_type: pa.DataType, low: object, mid: object, high: object
):
    data = pa.schema([("id", pa.string()), ("ts", ordering_type)])
    full = with_meta(data)
    schema_json = avro_schema_json(data, "t", with_meta=True)
    keys = ["k1", "k2", "k3"]
    base_rows = pa.table(
        {
            "_hoodie_commit_time": [T0] * 3,
            "_hoodie_commit_seqno": [f"{T0}_0_{i}" for i in range(3)],
            "_hoodie_record_key": keys,
            "_hoodie_partition_path": [PARTITION] * 3,
            "_hoodie_file_name": [FILE_ID] * 3,
            "id": keys,
            "ts": pa.array([mid] * 3, ordering_type),
        },
        schema=full,
    )
    path = posixpath.join(PARTITION, base_file_name(FILE_ID, "0-0-0", T0))
    base = BaseFile(path, FILE_ID, T0, write_base_file(storage, path, base_rows, schema_json, BloomSettings()))
    logs = _log(
        storage,
        # Spark SQL's DELETE: Java's default ordering value, Integer 0, whatever the field's type.
        [DeleteBlock.create(T1, schema_json, ["k1"], PARTITION, pa.array([0], pa.int32()))],
        [DeleteBlock.create(T2, schema_json, ["k2", "k3"], PARTITION, pa.array([low, high], ordering_type))],
    )
    file_slice = FileSlice(PARTITION, FILE_ID, T0, base, logs)
    instants = VisibleInstants(frozenset({T0, T1, T2}))
    merged = read_merged_file_slice(storage, file_slice, full, instants, EVENT_TIME)
    assert merged.column("id").to_pylist() == ["k2"]  # k1: natural-order delete; k3: newer delete
    merged = read_merged_file_slice(storage, file_slice, full, instants, COMMIT_TIME)
    assert merged.num_rows == 0
