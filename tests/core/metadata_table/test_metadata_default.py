"""`hoodie.metadata.enable` defaults to true, as in Apache Hudi since 0.11: a new table gets its metadata
table (`files`) with its first write, an existing one without it with its first write or table service
(once nothing else is pending), every table version; `hoodie.metadata.enable=false` deletes it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.storage import Storage
from tests.interop.compare import both_readers

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
OFF = {"hoodie.metadata.enable": "false"}
KEYS = {"record_key": "id", "partition_by": "part", "ordering_field": "ts"}


def _batch(ids: range, ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": i * ts} for i in ids], schema=SCHEMA
    )


def _create(path: str, version: int, table_type: str = "COPY_ON_WRITE", options: dict[str, str] | None = None) -> Table:
    return Table.create(path, **KEYS, table_type=table_type, table_version=version, options=options)


def _partitions(path: str) -> str:
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    return props.get("hoodie.table.metadata.partitions", "")


def _mdt(path: str) -> Path:
    return Path(path) / ".hoodie" / "metadata"


def _check_consistent(path: str) -> None:
    """The `files` partition lists what storage holds, and (v8/v9: through it) hudi-rs reads lakeward's rows."""
    diff = compare_files_partition(Storage.for_uri(path))
    assert diff.ok, str(diff)
    ours, theirs = both_readers(path)
    assert ours == theirs


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8, 9])
def test_new_table_gets_a_metadata_table_with_its_first_write(tmp_path: Path, version: int, table_type: str) -> None:
    path = str(tmp_path / "t")
    table = _create(path, version, table_type)
    table.insert(_batch(range(30), 1))
    assert _partitions(path) == "files"
    assert (_mdt(path) / "files").is_dir()
    assert (_mdt(path) / ".hoodie" / "hoodie.properties").is_file()
    table.upsert(_batch(range(0, 30, 2), 2))
    table.delete(_batch(range(0, 6), 3))
    _check_consistent(path)
    rows = Table.open(path).read()
    assert rows.num_rows == 24


@pytest.mark.parametrize("version", [6, 9])
def test_metadata_enable_false_deletes_it_and_builds_none(tmp_path: Path, version: int) -> None:
    path = str(tmp_path / "t")
    _create(path, version).insert(_batch(range(10), 1))
    assert (_mdt(path) / "files").is_dir()
    Table.open(path, options=OFF).upsert(_batch(range(5), 2))
    assert _partitions(path) == ""
    assert not _mdt(path).exists()
    off = str(tmp_path / "off")
    _create(off, version, options=OFF).insert(_batch(range(10), 1))
    assert _partitions(off) == "" and not _mdt(off).exists()
    # the next writer with the default builds it again
    Table.open(path).upsert(_batch(range(5), 3))
    assert _partitions(path) == "files"
    _check_consistent(path)


@pytest.mark.parametrize("version", [6, 8])
def test_a_table_service_builds_it_once_nothing_is_pending(tmp_path: Path, version: int) -> None:
    path = str(tmp_path / "t")
    once = {"hoodie.compact.inline.max.delta.commits": "1"}
    table = _create(path, version, "MERGE_ON_READ", options=OFF | once)  # a table written without a metadata table
    table.insert(_batch(range(20), 1))
    table.upsert(_batch(range(10), 2))
    plan = table.services.compaction.schedule()
    assert plan is not None
    default = Table.open(path)
    default.upsert(_batch(range(5), 3))  # Hudi's rule: no initialisation while another instant is pending
    assert _partitions(path) == "" and not _mdt(path).exists()
    default.services.compaction.execute(plan)
    assert _partitions(path) == ""  # its own plan was pending when it started
    Table.open(path).services.clean.schedule()
    assert _partitions(path) == "files"
    _check_consistent(path)
