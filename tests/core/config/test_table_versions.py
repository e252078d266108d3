"""Table versions: what 6, 8 and 9 mean, the error for versions lakeward cannot open, and
`hoodie.table.checksum` validation on open."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import format_properties, parse_properties
from lakeward.core.config.table import table_checksum
from lakeward.core.exceptions import (
    ConfigError,
    CorruptTableError,
    LakewardError,
    MetadataTableError,
    UnsupportedTableVersionError,
)
from lakeward.core.table_version import (
    SUPPORTED_VERSIONS,
    LogSlicing,
    MetadataEncoding,
    TimelineLayout,
    table_version,
)
from lakeward.core.timeline import Action, Instant, State
from tests.support.fixture_tables import all_fixtures, with_unmaintained_index

PROPS = Path(".hoodie") / "hoodie.properties"


def _edit_properties(base: str, **changes: str | None) -> None:
    path = Path(base) / PROPS
    props = parse_properties(path.read_text())
    for key, value in changes.items():
        name = key.replace("_", ".")
        if value is None:
            props.pop(name, None)
        else:
            props[name] = value
    path.write_text(format_properties(props))


def test_what_each_version_means():
    v6, v8, v9 = table_version(6), table_version("8"), table_version(9)
    assert (v6.timeline_folder, v8.timeline_folder, v9.timeline_folder) == (
        ".hoodie",
        ".hoodie/timeline",
        ".hoodie/timeline",
    )
    assert v6.metadata_encoding is MetadataEncoding.JSON and v9.metadata_encoding is MetadataEncoding.AVRO
    assert v6.log_slicing is LogSlicing.BASE_INSTANT and v8.log_slicing is LogSlicing.COMPLETION_TIME
    assert not v6.timeline_layout.completion_time_in_name and v8.timeline_layout.completion_time_in_name
    assert (v6.clustering_action, v9.clustering_action) == (False, True)
    assert v6.history_folder is None and v9.history_folder == ".hoodie/timeline/history"
    assert v6.writable and not v8.writable and not v9.writable
    assert SUPPORTED_VERSIONS == (6, 8, 9)


@pytest.mark.parametrize("version", ["10", "12", "7", "5", "nine"])
def test_unsupported_versions_raise_a_clear_error(version: str):
    with pytest.raises(UnsupportedTableVersionError) as err:
        table_version(version)
    assert f"{version}" in str(err.value) and "[6, 8, 9]" in str(err.value)
    assert isinstance(err.value, LakewardError) and not isinstance(err.value, CorruptTableError)
    assert err.value.supported == (6, 8, 9)


def test_opening_a_version_10_table_names_the_version(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id").upsert(pa.table({"id": [1], "v": ["a"]}))
    _edit_properties(path, hoodie_table_version="10")
    with pytest.raises(UnsupportedTableVersionError, match=r"hoodie.table.version=10 \(newer than lakeward"):
        Table.open(path)


def test_layout_2_instant_names_carry_the_completion_time():
    done = Instant.parse("20260307162557587_20260307162601961.deltacommit", TimelineLayout.V2)
    assert done is not None and done.state is State.COMPLETED
    assert (done.time, done.completion_time) == ("20260307162557587", "20260307162601961")
    assert done.file_name == "20260307162557587_20260307162601961.deltacommit"
    # the completion-time form does not exist on layout 1
    assert Instant.parse("20260307162557587_20260307162601961.deltacommit") is None
    clustering = Instant.parse("20260307162619269.clustering.requested", TimelineLayout.V2)
    assert clustering == Instant("20260307162619269", Action.CLUSTERING, State.REQUESTED)
    assert Action.CLUSTERING.completed_action is Action.REPLACE_COMMIT
    assert Instant.parse("20260307162619269_20260307162620442.clustering", TimelineLayout.V2) is None
    v6 = Instant.parse("20250101000000000.commit")
    assert v6 is not None and v6.completion_time is None


# -- hoodie.table.checksum -------------------------------------------------------------------
def test_checksum_is_crc32_of_database_dot_table():
    # values of the fixture tables (format doc 1.3)
    assert table_checksum("default", "v9_txns_mor_simple_meta") == 1101448031


def test_tables_lakeward_creates_carry_a_valid_checksum(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", table_name="orders", options={"hoodie.database.name": "sales"})
    props = parse_properties((Path(path) / PROPS).read_text())
    assert props["hoodie.table.checksum"] == str(table_checksum("sales", "orders"))
    assert Table.open(path).name == "orders"


def test_a_tampered_checksum_is_a_clear_error_on_open(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id").upsert(pa.table({"id": [1], "v": ["a"]}))
    _edit_properties(path, hoodie_table_checksum="12345")
    with pytest.raises(CorruptTableError, match=r"hoodie.table.checksum=12345 does not match"):
        Table.open(path)


def test_a_renamed_table_fails_the_checksum(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", table_name="orders")
    _edit_properties(path, hoodie_table_name="other")
    with pytest.raises(CorruptTableError, match="does not match the table name"):
        Table.open(path)


def test_a_table_without_checksum_opens(tmp_path: Path):
    """Hudi before 0.10 wrote no checksum; Hudi accepts such tables, so does lakeward."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id")
    _edit_properties(path, hoodie_table_checksum=None)
    assert Table.open(path).config.table_version == 6


@pytest.mark.parametrize(("kind", "name"), all_fixtures())
def test_every_fixture_opens_with_its_checksum_and_version(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    table = Table.open(fixture_table(kind, name))
    expected = int(re.match(r"v(\d+)_", name).group(1))  # type: ignore[union-attr]
    assert table.version.number == expected


# -- table services on v8/v9: refused on a table with a metadata table -------------------------
def _service_attempts(table: Table) -> list[Callable[[], object]]:
    # a savepoint runs no metadata-table gate (it changes no data, and the metadata table does not record
    # it); a rollback checks its instant first (this fixture's last write has later instants after it)
    return [
        lambda: table.schedule_compaction(force=True),
        lambda: table.schedule_clustering(),
        lambda: table.clean(),
        lambda: table.archive(),
    ]


def test_services_on_a_v9_table_with_a_metadata_table_refuse_without_touching_it(
    fixture_table: Callable[[str, str], str],
):
    path = str(with_unmaintained_index(fixture_table("mor/avro", "v9_txns_simple_meta")))
    table = Table.open(path)
    before = sorted((p.name, p.stat().st_size) for p in Path(path).rglob("*") if p.is_file())
    for attempt in _service_attempts(table):
        with pytest.raises(MetadataTableError, match=r"hoodie\.metadata\.enable=false"):
            attempt()
    assert sorted((p.name, p.stat().st_size) for p in Path(path).rglob("*") if p.is_file()) == before


def test_services_on_a_v8_table_without_a_metadata_table_run(fixture_table: Callable[[str, str], str]):
    path = fixture_table("mor/avro", "v8_trips_8i1u")
    table = Table.open(path)
    rows = table.read().num_rows
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    table.run_compaction(instant)
    table.savepoint(instant)
    assert table.savepoints() == [instant]
    assert table.read().num_rows == rows


def test_a_truncated_v8_timeline_file_is_a_clear_error(fixture_table: Callable[[str, str], str]):
    path = fixture_table("mor/avro", "v8_trips_8i1u")
    completed = sorted((Path(path) / ".hoodie" / "timeline").glob("*_*.deltacommit"))
    last = completed[-1]
    last.write_bytes(last.read_bytes()[:50])
    with pytest.raises(CorruptTableError, match=re.escape(last.name)):
        Table.open(path).read()


def test_hoodie_write_table_version_chooses_the_version_of_a_new_table(tmp_path: Path):
    """Hudi 1.x's writer key for the version of the tables it creates; the keyword wins over it."""
    made = Table.create(str(tmp_path / "a"), record_key="id", options={"hoodie.write.table.version": "8"})
    assert made.version.number == 8
    assert Table.open(made.path).version.number == 8
    keyword = Table.create(
        str(tmp_path / "b"), record_key="id", table_version=9, options={"hoodie.write.table.version": 8}
    )
    assert keyword.version.number == 9
    with pytest.raises(ConfigError, match=r"hoodie\.write\.table\.version='x'"):
        Table.create(str(tmp_path / "c"), record_key="id", options={"hoodie.write.table.version": "x"})
    with pytest.raises(UnsupportedTableVersionError):
        Table.create(str(tmp_path / "d"), record_key="id", options={"hoodie.write.table.version": "7"})
    assert not (tmp_path / "c").exists() and not (tmp_path / "d" / ".hoodie").exists()
