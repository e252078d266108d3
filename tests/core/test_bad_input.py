"""Bad input gets a clear error naming the problem and leaves the table exactly as it was.

"Exactly as it was" is checked with `table_state`: the completed and pending instants,
every file and folder on disk (with the content of every file, `.hoodie/` included), and
the rows that lakeward and hudi-rs (the oracle reader) return.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import (
    ConfigError,
    InvalidRecordError,
    LakewardError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
)
from lakeward.core.table import Table
from lakeward.core.timeline import Timeline

SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("city", pa.string()),
        ("ts", pa.int64()),
        ("fare", pa.float64()),
        ("name", pa.string()),
    ]
)


def _rows(ids: list[str], cities: list[str], ts: int, tag: str) -> pa.Table:
    return pa.table(
        {
            "id": ids,
            "city": cities,
            "ts": [ts] * len(ids),
            "fare": [float(i) + ts / 10 for i in range(len(ids))],
            "name": [f"{tag}-{i}" for i in ids],
        },
        schema=SCHEMA,
    )


# -- the snapshot helper -------------------------------------------------------------------
@dataclass(frozen=True)
class TableState:
    """Everything a reader or writer can observe of a table (or of a path that is none)."""

    instants: tuple[str, ...]  # timeline file names of every instant, completed or pending
    completed: tuple[str, ...]
    files: dict[str, str]  # relative path -> sha256 of the content, "<dir>" for folders
    lakeward_rows: tuple[tuple[tuple[str, Any], ...], ...] | None
    hudi_rows: tuple[tuple[tuple[str, Any], ...], ...] | None


def _sorted_rows(table: pa.Table) -> tuple[tuple[tuple[str, Any], ...], ...]:
    rows = [tuple(sorted(r.items())) for r in table.to_pylist()]
    return tuple(sorted(rows, key=repr))


def _disk(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    if path.is_file():
        return {".": hashlib.sha256(path.read_bytes()).hexdigest()}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = "<dir>"
        for f in files:
            full = os.path.join(root, f)
            out[os.path.relpath(full, path)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return out


def _hudi_table(hudi_table: Any) -> pa.Table:
    """All rows hudi-rs reads (a snapshot), as one Arrow table."""
    batches = hudi_table.read()
    if not batches:
        return hudi_table.get_schema_with_meta_fields().empty_table()
    return pa.Table.from_batches(batches)


def table_state(path: str | Path) -> TableState:
    """A snapshot of the table at `path`: timeline, all files on disk, rows from both readers."""
    path = Path(path)
    if not (path / ".hoodie" / "hoodie.properties").is_file():
        return TableState((), (), _disk(path) if path.exists() else {}, None, None)
    table = Table.open(str(path))
    timeline = Timeline.load(table.storage)
    lakeward_rows = _sorted_rows(table.read())
    hudi_table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    hudi_rows = _sorted_rows(_hudi_table(hudi_table))
    return TableState(
        instants=tuple(i.file_name for i in timeline),
        completed=tuple(i.file_name for i in timeline.completed()),
        files=_disk(path),
        lakeward_rows=lakeward_rows,
        hudi_rows=hudi_rows,
    )


def _assert_unchanged(path: Path, before: TableState) -> None:
    after = table_state(path)
    assert after.completed == before.completed
    assert after.instants == before.instants
    assert sorted(after.files) == sorted(before.files), "files appeared or disappeared"
    assert after.files == before.files, "a file's content changed"
    assert after.lakeward_rows == before.lakeward_rows
    assert after.hudi_rows == before.hudi_rows


def _expect(exc_type: type[Exception], fn: Callable[[], Any], *needles: str) -> str:
    with pytest.raises(exc_type) as info:
        fn()
    assert isinstance(info.value, LakewardError), f"{type(info.value).__name__} is no LakewardError"
    message = str(info.value)
    for needle in needles:
        assert needle in message, f"the message {message!r} does not name {needle!r}"
    return message


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def table_path(tmp_path: Path) -> Path:
    """A partitioned table with two completed commits (inserts, then updates and inserts)."""
    path = tmp_path / "trips"
    table = Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    table.upsert(_rows(["a1", "a2", "a3", "b1"], ["sf", "sf", "nyc", "nyc"], 1, "v1"))
    table.upsert(_rows(["a1", "b1", "c1"], ["sf", "nyc", "la"], 2, "v2"))
    return path


@pytest.fixture
def before(table_path: Path) -> TableState:
    state = table_state(table_path)
    assert len(state.completed) == 2
    assert state.lakeward_rows is not None and len(state.lakeward_rows) == 5
    assert state.hudi_rows == state.lakeward_rows
    return state


def _good_batch() -> pa.Table:
    return _rows(["a2", "z9"], ["sf", "sf"], 3, "ok")


def _still_writable(path: Path, before: TableState) -> None:
    """After the failure, a correct write succeeds on top of the unchanged table."""
    table = Table.open(str(path))
    result = table.upsert(_good_batch())
    after = table_state(path)
    assert after.completed[: len(before.completed)] == before.completed
    assert after.completed[-1] == f"{result.instant_time}.commit"
    assert len(after.completed) == len(before.completed) + 1, "something besides the new commit completed"
    names = {r["id"]: r["name"] for r in table.read().to_pylist()}
    assert names["a2"] == "ok-a2" and names["z9"] == "ok-z9" and len(names) == 6


# -- batches -------------------------------------------------------------------------------
BATCH_CASES: dict[str, tuple[Callable[[pa.Table], pa.Table], type[Exception], tuple[str, ...]]] = {
    "missing-record-key": (lambda b: b.drop_columns(["id"]), SchemaError, ("'id'",)),
    "missing-partition-column": (lambda b: b.drop_columns(["city"]), SchemaError, ("'city'",)),
    "missing-ordering-column": (lambda b: b.drop_columns(["ts"]), SchemaError, ("'ts'",)),
    "null-record-key": (
        lambda b: b.set_column(0, "id", pa.array(["a1", None, "q"], pa.string())),
        InvalidRecordError,
        ("'id'", "null"),
    ),
    "all-null-record-keys": (
        lambda b: b.set_column(0, "id", pa.nulls(3, pa.string())),
        InvalidRecordError,
        ("'id'",),
    ),
    "empty-record-key": (
        lambda b: b.set_column(0, "id", pa.array(["a1", "", "q"], pa.string())),
        InvalidRecordError,
        ("'id'", "empty"),
    ),
    "type-change": (
        lambda b: b.set_column(3, "fare", pa.array(["1.5", "2", "3"], pa.string())),
        SchemaError,
        ("'fare'", "double"),
    ),
    "record-key-type-change": (
        lambda b: b.set_column(0, "id", pa.array([1, 2, 3], pa.int64())),
        SchemaError,
        ("'id'",),
    ),
    "narrowing-type-change": (
        lambda b: b.set_column(2, "ts", pa.array([1.5, 2.5, 3.5], pa.float64())),
        SchemaError,
        ("'ts'",),
    ),
    "dropped-column": (lambda b: b.drop_columns(["name"]), SchemaError, ("'name'",)),
    # issue 18, item 6: before the fix an ArrowTypeError after the instant existed (rollback files left)
    "is-deleted-as-strings": (
        lambda b: b.append_column("_hoodie_is_deleted", pa.array(["false", "true", "false"])),
        SchemaError,
        ("'_hoodie_is_deleted'", "bool", "string"),
    ),
    "is-deleted-as-integers": (
        lambda b: b.append_column("_hoodie_is_deleted", pa.array([0, 1, 0], pa.int64())),
        SchemaError,
        ("'_hoodie_is_deleted'", "bool"),
    ),
    # before the fix a KeyError
    "duplicate-column": (
        lambda b: pa.Table.from_arrays([*b.columns, b.column("name")], names=[*b.column_names, "name"]),
        SchemaError,
        ("'name'", "more than once"),
    ),
    "duplicate-record-key-column": (
        lambda b: pa.Table.from_arrays([*b.columns, b.column("id")], names=[*b.column_names, "id"]),
        SchemaError,
        ("'id'", "more than once"),
    ),
    # before the fix the null ordering value overwrote the stored row
    "null-ordering-value": (
        lambda b: b.set_column(2, "ts", pa.array([5, None, None], pa.int64())),
        InvalidRecordError,
        ("'ts'", "2 row(s)", "null"),
    ),
    # issue 18, item 4: before the fix `eu/west` became the sub-folder `eu/west` of `eu`
    "partition-value-with-slash": (
        lambda b: b.set_column(1, "city", pa.array(["sf", "eu/west", "eu/west"])),
        InvalidRecordError,
        ("'eu/west'", "'city'", "hoodie.datasource.write.partitionpath.urlencode"),
    ),
    "partition-value-with-backslash": (
        lambda b: b.set_column(1, "city", pa.array(["sf", "eu\\west", "sf"])),
        InvalidRecordError,
        ("'city'", "hoodie.datasource.write.partitionpath.urlencode"),
    ),
    "partition-value-dot-dot": (
        lambda b: b.set_column(1, "city", pa.array(["sf", "..", "sf"])),
        InvalidRecordError,
        ("'..'", "'city'"),
    ),
    # before the fix the write was acknowledged into the table's own `.hoodie` folder, which listings
    # skip: every later read and write failed on a "missing" file
    "partition-value-timeline-folder": (
        lambda b: b.set_column(1, "city", pa.array(["sf", ".hoodie", "sf"])),
        InvalidRecordError,
        ("'.hoodie'", "'city'", "timeline folder"),
    ),
}


@pytest.mark.parametrize("operation", ["upsert", "insert", "bulk_insert", "insert_overwrite"])
@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_bad_batch_is_rejected_and_table_unchanged(
    table_path: Path, before: TableState, case: str, operation: str
) -> None:
    mutate, exc_type, needles = BATCH_CASES[case]
    batch = mutate(_rows(["a1", "n1", "q"], ["sf", "nyc", "sf"], 5, "bad"))
    table = Table.open(str(table_path))
    _expect(exc_type, lambda: getattr(table, operation)(batch), *needles)
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize(
    "case",
    [
        "null-record-key",
        "missing-record-key",
        "type-change",
        "dropped-column",
        "is-deleted-as-strings",
        "null-ordering-value",
        "partition-value-with-slash",
    ],
)
def test_table_stays_writable_after_bad_batch(table_path: Path, before: TableState, case: str) -> None:
    mutate, exc_type, _ = BATCH_CASES[case]
    table = Table.open(str(table_path))
    with pytest.raises(exc_type):
        table.upsert(mutate(_rows(["a1", "n1", "q"], ["sf", "nyc", "sf"], 5, "bad")))
    _assert_unchanged(table_path, before)
    _still_writable(table_path, before)


def test_bad_batch_as_list_of_dicts(table_path: Path, before: TableState) -> None:
    table = Table.open(str(table_path))
    rows = [
        {"id": "a1", "city": "sf", "ts": 9, "fare": 1.0, "name": "x"},
        {"id": None, "city": "sf", "ts": 9, "fare": 1.0, "name": "y"},
    ]
    _expect(InvalidRecordError, lambda: table.upsert(rows), "'id'")
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize(
    ("rows", "exc_type", "needle"),
    [
        (pa.table({"city": ["sf"]}), SchemaError, "'id'"),
        (pa.table({"id": pa.array([None, "a1"], pa.string()), "city": ["sf", "sf"]}), InvalidRecordError, "'id'"),
        (pa.table({"id": ["a1"]}), SchemaError, "'city'"),
        (pa.table({"id": ["a1", "a1"], "id ": ["x", "y"]}).rename_columns(["id", "id"]), SchemaError, "'id'"),
    ],
    ids=["missing-record-key", "null-record-key", "missing-partition-column", "duplicate-record-key-column"],
)
def test_bad_delete_rows(
    table_path: Path, before: TableState, rows: pa.Table, exc_type: type[Exception], needle: str
) -> None:
    table = Table.open(str(table_path))
    _expect(exc_type, lambda: table.delete(rows), needle)
    _assert_unchanged(table_path, before)


def test_delete_by_keys_with_a_null_key(table_path: Path, before: TableState) -> None:
    """A null among `keys=[...]` is refused as a null key in rows is, not skipped unnoticed."""
    table = Table.open(str(table_path))
    _expect(InvalidRecordError, lambda: table.delete(keys=["a1", None]), "'id'", "position 1")
    _assert_unchanged(table_path, before)


def test_delete_rows_with_a_separator_in_the_partition_value(table_path: Path, before: TableState) -> None:
    table = Table.open(str(table_path))
    rows = pa.table({"id": ["a1"], "city": ["s/f"]})
    _expect(InvalidRecordError, lambda: table.delete(rows), "'s/f'", "'city'")
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize("value", ["eu/west", "/", "eu/", "a\\b"])
def test_separator_in_a_hive_style_partition_value(tmp_path: Path, value: str) -> None:
    """Hive style too (`region=eu/west` would be the sub-folder `west` of `region=eu`); MOR too."""
    path = tmp_path / "hive"
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="region",
        ordering_field="ts",
        hive_style_partitioning=True,
        table_type="MERGE_ON_READ",
    )
    table.upsert(pa.table({"id": ["k1"], "region": ["eu"], "ts": [1]}))
    before = table_state(path)
    bad = pa.table({"id": ["k1", "k2"], "region": ["eu", value], "ts": [2, 2]})
    for operation in ("upsert", "insert", "bulk_insert", "insert_overwrite"):
        _expect(
            InvalidRecordError,
            lambda op=operation: getattr(Table.open(str(path)), op)(bad),
            repr(value),
            "'region'",
            "hoodie.datasource.write.partitionpath.urlencode",
        )
        _assert_unchanged(path, before)


def test_separator_in_one_field_of_a_multi_field_partition(tmp_path: Path) -> None:
    path = tmp_path / "multi"
    table = Table.create(str(path), record_key="id", partition_by=["country", "city"], ordering_field="ts")
    table.upsert(pa.table({"id": ["k1"], "country": ["fr"], "city": ["paris"], "ts": [1]}))
    before = table_state(path)
    bad = pa.table({"id": ["k2"], "country": ["fr"], "city": ["paris/nord"], "ts": [1]})
    _expect(InvalidRecordError, lambda: Table.open(str(path)).upsert(bad), "'paris/nord'", "'city'")
    _assert_unchanged(path, before)


def test_composite_key_all_fields_null(tmp_path: Path) -> None:
    path = tmp_path / "composite"
    table = Table.create(str(path), record_key=["k1", "k2"], partition_by="p")
    table.upsert(pa.table({"k1": ["x", "y"], "k2": [1, 2], "p": ["a", "b"], "v": [1.0, 2.0]}))
    before = table_state(path)
    bad = pa.table(
        {
            "k1": pa.array(["x", None], pa.string()),
            "k2": pa.array([1, None], pa.int64()),
            "p": ["a", "a"],
            "v": [3.0, 4.0],
        }
    )
    _expect(InvalidRecordError, lambda: Table.open(str(path)).upsert(bad), "k1", "k2")
    _assert_unchanged(path, before)


# -- options -------------------------------------------------------------------------------
OPTION_CASES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-key": ({"hoodie.no.such.option": "1"}, "hoodie.no.such.option"),
    "misspelt-key": ({"hoodie.index.typ": "BLOOM"}, "hoodie.index.typ"),
    "misspelt-lakeward-key": (
        {"lakeward.metadata.compact.deflate.levl": "1"},
        "lakeward.metadata.compact.deflate.levl",
    ),
    "unknown-lakeward-key": ({"lakeward.orphan_clean.older_than": "60"}, "lakeward.orphan_clean.older_than"),
    # passed the open, then failed the daemon's orphan_clean run with a raw ValueError
    "not-seconds": ({"lakeward.orphan_clean.older_than_s": "abc"}, "lakeward.orphan_clean.older_than_s"),
    "negative-seconds": ({"lakeward.orphan_clean.older_than_s": "-3600"}, "lakeward.orphan_clean.older_than_s"),
    "unknown-lock-key": ({"hoodie.write.lock.filesystem.path": "/tmp/x"}, "hoodie.write.lock.filesystem.path"),
    "bad-enum": ({"hoodie.index.type": "NOT_AN_INDEX"}, "hoodie.index.type"),
    "negative-size": ({"hoodie.parquet.max.file.size": "-5"}, "hoodie.parquet.max.file.size"),
    "not-a-number": ({"hoodie.upsert.shuffle.parallelism": "lots"}, "hoodie.upsert.shuffle.parallelism"),
    "not-a-bool": ({"hoodie.bloom.index.prune.by.ranges": "maybe"}, "hoodie.bloom.index.prune.by.ranges"),
    "bad-codec": ({"hoodie.parquet.compression.codec": "rar"}, "hoodie.parquet.compression.codec"),
    "bad-lock-provider": ({"hoodie.write.lock.provider": "no.such.Provider"}, "hoodie.write.lock.provider"),
    "bad-lock-wait": ({"hoodie.write.lock.wait_time_ms": "-1"}, "hoodie.write.lock.wait_time_ms"),
    "bad-failed-writes-policy": (
        {"hoodie.cleaner.policy.failed.writes": "NEVER"},
        "hoodie.cleaner.policy.failed.writes",
    ),
}


@pytest.mark.parametrize(
    "options",
    [
        {"hoodie.datasource.write.partitionpath.urlencode": "perhaps"},
        {"hoodie.datasource.write.partitionpath.urlencode": "true"},  # the table was created without
        {"hoodie.datasource.write.hive_style_partitioning": "true"},
    ],
    ids=["bad-value", "urlencode-differs-from-table", "hive-style-differs-from-table"],
)
def test_partition_path_option_on_write_is_checked(table_path: Path, before: TableState, options: dict) -> None:
    """Table properties given again as write options must be valid and agree with the table,
    or the writer would believe values are encoded when they are not (before the fix: ignored)."""
    key = next(iter(options))

    def open_and_write() -> None:
        Table.open(str(table_path), options=options).upsert(_good_batch())

    _expect(ConfigError, open_and_write, key)
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_bad_option_on_open(table_path: Path, before: TableState, case: str) -> None:
    options, key = OPTION_CASES[case]
    _expect(ConfigError, lambda: Table.open(str(table_path), options=options), key)
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_bad_option_fails_by_the_first_write(table_path: Path, before: TableState, case: str) -> None:
    """Wherever the option is caught (open or write), it is caught before the table changes."""
    options, key = OPTION_CASES[case]

    def open_and_write() -> None:
        Table.open(str(table_path), options=options).upsert(_good_batch())

    _expect(ConfigError, open_and_write, key)
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize("case", sorted(OPTION_CASES))
def test_bad_option_on_create_creates_nothing(tmp_path: Path, case: str) -> None:
    options, key = OPTION_CASES[case]
    path = tmp_path / "new_table"
    _expect(ConfigError, lambda: Table.create(str(path), record_key="id", partition_by="city", options=options), key)
    assert not path.exists() or _disk(path) == {}, f"a failed create left {sorted(_disk(path))}"


@pytest.mark.parametrize("case", ["unknown-key", "bad-enum"])
def test_bad_option_on_create_over_existing_table(table_path: Path, before: TableState, case: str) -> None:
    options, key = OPTION_CASES[case]
    with pytest.raises((ConfigError, TableExistsError)) as info:
        Table.create(str(table_path), record_key="id", options=options)
    assert key in str(info.value) or isinstance(info.value, TableExistsError)
    _assert_unchanged(table_path, before)


@pytest.mark.parametrize(
    "key", ["hoodie.datasource.write.hive_style_partitioning", "hoodie.datasource.write.partitionpath.urlencode"]
)
def test_bad_table_option_value_on_create(tmp_path: Path, key: str) -> None:
    path = tmp_path / "new_table"
    _expect(ConfigError, lambda: Table.create(str(path), record_key="id", options={key: "perhaps"}), key)
    assert not (path / ".hoodie" / "hoodie.properties").exists()


# -- paths that are not tables -------------------------------------------------------------
def _make_missing(tmp: Path) -> Path:
    return tmp / "does" / "not" / "exist"


def _make_empty_dir(tmp: Path) -> Path:
    (tmp / "empty").mkdir()
    return tmp / "empty"


def _make_plain_parquet_dir(tmp: Path) -> Path:
    folder = tmp / "plain"
    (folder / "part=1").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["x"]}), folder / "part=1" / "data.parquet")
    return folder


def _make_hoodie_without_properties(tmp: Path) -> Path:
    folder = tmp / "half"
    (folder / ".hoodie" / ".temp").mkdir(parents=True)
    return folder


def _make_regular_file(tmp: Path) -> Path:
    target = tmp / "a_file.csv"
    target.write_text("id,city\n1,sf\n")
    return target


NOT_TABLES: dict[str, Callable[[Path], Path]] = {
    "missing": _make_missing,
    "empty-dir": _make_empty_dir,
    "plain-parquet-dir": _make_plain_parquet_dir,
    "hoodie-without-properties": _make_hoodie_without_properties,
    "regular-file": _make_regular_file,
}


@pytest.mark.parametrize("case", sorted(NOT_TABLES))
def test_open_a_path_that_is_not_a_table(tmp_path: Path, case: str) -> None:
    path = NOT_TABLES[case](tmp_path)
    before = table_state(path)
    existed = path.exists()
    message = _expect(TableNotFoundError, lambda: Table.open(str(path)), str(path))
    assert "not a Hudi table" in message or "no Hudi table" in message or "hoodie.properties" in message
    assert path.exists() == existed, "opening created the path"
    assert table_state(path) == before


# -- creating a table where one exists -----------------------------------------------------
def test_create_where_a_table_exists(table_path: Path, before: TableState) -> None:
    _expect(
        TableExistsError, lambda: Table.create(str(table_path), record_key="id", partition_by="city"), str(table_path)
    )
    _assert_unchanged(table_path, before)


def test_create_where_a_table_exists_with_other_settings(table_path: Path, before: TableState) -> None:
    """Different keys, name and schema must not leak into the existing table's properties."""
    _expect(
        TableExistsError,
        lambda: Table.create(
            str(table_path),
            record_key="other",
            partition_by=None,
            table_name="another_name",
            schema=pa.schema([("other", pa.string())]),
            options={"hoodie.datasource.write.hive_style_partitioning": "true"},
        ),
        str(table_path),
    )
    _assert_unchanged(table_path, before)
    assert Table.open(str(table_path)).config.record_key_fields == ("id",)


def test_create_where_an_empty_table_exists(tmp_path: Path) -> None:
    path = tmp_path / "fresh"
    Table.create(str(path), record_key="id", schema=pa.schema([("id", pa.string()), ("v", pa.int64())]))
    before = table_state(path)
    _expect(TableExistsError, lambda: Table.create(str(path), record_key="id"), str(path))
    assert table_state(path) == before


def test_create_where_a_hudi_written_table_exists(fixture_table: Callable[..., Path], tmp_path: Path) -> None:
    """A table Apache Hudi (Spark) wrote is not touched either."""
    path = Path(fixture_table("cow", "v6_nonpartitioned"))
    before = table_state(path)
    assert before.completed
    _expect(TableExistsError, lambda: Table.create(str(path), record_key="id"), str(path))
    _assert_unchanged(path, before)


def test_leftover_metadata_folder_is_no_table_but_can_become_one(tmp_path: Path) -> None:
    """A `.hoodie/` folder left without properties is not a table: create may proceed, open may not."""
    path = _make_hoodie_without_properties(tmp_path)
    with pytest.raises(TableNotFoundError):
        Table.open(str(path))
    table = Table.create(str(path), record_key="id")
    table.upsert(pa.table({"id": ["x"], "v": [1]}))
    assert Table.open(str(path)).read().column("id").to_pylist() == ["x"]


def test_table_state_notices_a_change(tmp_path: Path, table_path: Path, before: TableState) -> None:
    """table_state itself notices a change: a copy with one more commit differs."""
    copy = tmp_path / "copy"
    shutil.copytree(table_path, copy)
    assert table_state(copy).files == before.files
    Table.open(str(copy)).upsert(_good_batch())
    changed = table_state(copy)
    assert changed.completed != before.completed
    assert changed.files != before.files
    assert changed.lakeward_rows != before.lakeward_rows and changed.hudi_rows != before.hudi_rows


def test_reading_unknown_columns_is_a_clear_error(tmp_path):
    """Asked-for columns the table does not have are named before any file is read (pyarrow's own
    KeyError or ArrowInvalid named neither the column list nor the table's columns)."""
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts")
    with pytest.raises(ConfigError, match=r"columns \['id'\] are not known yet: nothing was written"):
        table.read(columns=["id"])
    assert table.read(columns=["_hoodie_record_key"]).num_rows == 0
    table.upsert(pa.table({"id": ["a"], "ts": [1]}))
    with pytest.raises(
        ConfigError, match=r"columns \['nope'\] are not columns of the table; its columns: \['id', 'ts'\]"
    ):
        table.read(columns=["id", "nope"])
    assert table.read(columns=["id"]).column("id").to_pylist() == ["a"]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_value_the_column_type_cannot_hold_is_refused_before_the_write_starts(
    tmp_path: Path, table_type: str
) -> None:
    """1,001 ns is no whole number of the table's microseconds. Before the fix the write started, failed
    in the file writers and rolled itself back: the data was unchanged, but a rollback instant was left
    on the timeline (which also blocked rolling back the last good commit)."""
    path = tmp_path / "events"
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type=table_type)
    table.upsert(pa.table({"id": ["a"], "ts": [1], "at": pa.array([1_000], pa.timestamp("us", "UTC"))}))
    before = table_state(path)
    lossy = pa.table({"id": ["b"], "ts": [2], "at": pa.array([1_001], pa.timestamp("ns", "UTC"))})
    for operation in ("upsert", "insert", "bulk_insert"):
        write = getattr(Table.open(str(path)), operation)
        _expect(SchemaError, lambda: write(lossy), "'at'", "cannot be cast")  # noqa: B023 - called at once
        _assert_unchanged(path, before)
    whole = pa.table({"id": ["b"], "ts": [2], "at": pa.array([2_000], pa.timestamp("ns", "UTC"))})
    Table.open(str(path)).upsert(whole)
    assert Table.open(str(path)).read(columns=["id", "at"]).column("at").type == pa.timestamp("us", "UTC")


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_nested_value_the_field_type_cannot_hold_is_refused_before_the_write_starts(
    tmp_path: Path, table_type: str
) -> None:
    """As above, inside a struct and a list of structs (and with the batch's struct fields in another
    order, a new field added): before the fix only top-level columns were cast ahead of the write, so
    the write started, failed in the file writers and left a rollback instant."""
    path = tmp_path / "events"
    inner = pa.struct([("n", pa.int32()), ("at", pa.timestamp("us", "UTC"))])
    table = Table.create(str(path), record_key="id", ordering_field="ts", table_type=table_type)
    first = pa.table(
        {
            "id": ["a"],
            "ts": [1],
            "s": pa.array([{"n": 1, "at": 1_000}], inner),
            "l": pa.array([[{"n": 1, "at": 1_000}]], pa.list_(inner)),
        }
    )
    table.upsert(first)
    before = table_state(path)
    ns = pa.struct([("at", pa.timestamp("ns", "UTC")), ("n", pa.int32()), ("extra", pa.string())])
    whole_s = pa.array([{"at": 2_000, "n": 2, "extra": "x"}], ns)
    whole_l = pa.array([[{"at": 3_000, "n": 3, "extra": "y"}]], pa.list_(ns))
    lossy_s = pa.array([{"at": 2_001, "n": 2, "extra": "x"}], ns)
    lossy_l = pa.array([[{"at": 3_001, "n": 3, "extra": "y"}]], pa.list_(ns))
    for column, s, lst in (("'s'", lossy_s, whole_l), ("'l'", whole_s, lossy_l)):
        lossy = pa.table({"id": ["b"], "ts": [2], "s": s, "l": lst})
        for operation in ("upsert", "insert", "bulk_insert"):
            write = getattr(Table.open(str(path)), operation)
            _expect(SchemaError, lambda: write(lossy), column, "cannot be cast")  # noqa: B023 - called at once
            _assert_unchanged(path, before)
    Table.open(str(path)).upsert(pa.table({"id": ["b"], "ts": [2], "s": whole_s, "l": whole_l}))
    rows = {r["id"]: r for r in Table.open(str(path)).read(columns=["id", "s", "l"]).to_pylist()}
    assert rows["b"]["s"]["n"] == 2 and rows["b"]["s"]["extra"] == "x"
    assert rows["b"]["l"][0]["extra"] == "y"
    assert rows["a"]["s"]["extra"] is None
