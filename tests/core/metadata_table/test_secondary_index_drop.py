"""Hudi 1.x secondary indexes (`secondary_index_*` metadata partitions), which lakeward cannot maintain yet.

By default a lakeward write or table service drops them first, under the table lock, as Hudi drops
an index: `hoodie.table.metadata.partitions` stops listing them, their definitions leave
`.hoodie/.index_defs/index.json`, their folders go, and a WARNING names each one and why. The
other metadata partitions stay and are kept; hudi-rs and lakeward read the expected rows, and the
`files` partition matches a storage listing. A writer that asks to keep them
(`hoodie.metadata.index.secondary.enable=true`) is refused with an error naming the key, and
nothing changes. Runs on copies of the `_meta` fixtures (each has two secondary indexes).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.table_version import table_version
from tests.core.metadata_table.test_writes import (
    META_FIXTURES,
    _data_rows,
    _unique_rows,
    check_metadata_table,
    fixture_rows,
)
from tests.interop.compare import both_readers, comparable_rows

GATE_LOGGER = "lakeward.core.metadata_table.gate"
#: Services keep every file slice they may (the fixtures' few commits): the clean still has work.
OPTIONS = {"hoodie.cleaner.commits.retained": 1, "hoodie.metadata.compact.max.delta.commits": 1000}


def _properties(path: str) -> dict[str, str]:
    return parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())


def _partitions(path: str) -> list[str]:
    return [p for p in _properties(path)["hoodie.table.metadata.partitions"].split(",") if p]


def _definitions(path: str) -> dict[str, dict[str, object]]:
    return json.loads((Path(path) / ".hoodie" / ".index_defs" / "index.json").read_text())["indexDefinitions"]


def _secondary(names: list[str]) -> list[str]:
    return sorted(n for n in names if n.startswith("secondary_index_"))


def _files(path: str) -> dict[str, int]:
    return {str(p.relative_to(path)): p.stat().st_size for p in Path(path).rglob("*") if p.is_file()}


def _assert_dropped(path: str, before: list[str], secondary: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """The secondary indexes are gone (properties, definitions, folders, a WARNING each); the rest is kept."""
    assert _partitions(path) == [p for p in before if p not in secondary]
    assert _properties(path).get("hoodie.table.metadata.partitions.inflight", "") == ""
    assert not _secondary(list(_definitions(path)))
    metadata = Path(path) / ".hoodie" / "metadata"
    assert not _secondary([p.name for p in metadata.iterdir()])
    assert all((metadata / p).is_dir() for p in _partitions(path))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == GATE_LOGGER]
    for partition in secondary:
        [message] = [m for m in warnings if f"dropped metadata-table partition {partition} " in m]
        assert "lakeward cannot maintain secondary indexes yet" in message
        assert "a Hudi writer with the index enabled rebuilds it" in message
        assert "index definition on" in message  # its columns, to define it again


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_an_upsert_drops_the_secondary_indexes_first(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture, kind: str, name: str
):
    path = fixture_table(kind, name)
    before = _partitions(path)
    secondary = _secondary(before)
    assert len(secondary) == 2 and _secondary(list(_definitions(path))) == secondary
    data, expected = fixture_rows(path)
    table = Table.open(path)
    assert table.read_only_reason() is None  # the daemon serves it: its first action drops them
    key_fields = list(table.config.record_key_fields)
    unique = _unique_rows(data.to_pylist(), key_fields)
    changed = [dict(r, amount=r["amount"] + 1, txn_ts=r["txn_ts"] + 1000) for r in unique[:2]]
    batch = pa.Table.from_pylist(changed, schema=data.schema)
    with caplog.at_level(logging.WARNING, logger=GATE_LOGGER):
        result = table.upsert(batch)
    _assert_dropped(path, before, secondary, caplog)
    old = {tuple(r[f] for f in key_fields) for r in unique[:2]}
    kept = [r for r in expected if tuple(r[f] for f in key_fields) not in old]
    check_metadata_table(path, result.instant_time, _data_rows([*kept, *comparable_rows(batch)]))


@pytest.mark.parametrize(("kind", "name"), [("cow", "v9_txns_nonpart_meta"), ("mor/avro", "v9_txns_simple_meta")])
def test_a_table_service_as_first_action_drops_the_secondary_indexes(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture, kind: str, name: str
):
    path = fixture_table(kind, name)
    before = _partitions(path)
    secondary = _secondary(before)
    _, expected = fixture_rows(path)
    table = Table.open(path, options=OPTIONS)
    with caplog.at_level(logging.WARNING, logger=GATE_LOGGER):
        if kind.startswith("mor"):  # the fixture's logs are compacted already: a clustering
            instant = table.schedule_clustering()
            assert instant is not None
            table.run_clustering(instant)
        else:
            cleaned = table.clean()
            assert cleaned is not None and cleaned.files_deleted > 0
            instant = cleaned.instant_time
    _assert_dropped(path, before, secondary, caplog)
    check_metadata_table(path, instant, expected)


def test_a_writer_asking_to_keep_them_is_refused_naming_the_key(fixture_table: Callable[[str, str], str]):
    path = fixture_table("cow", "v9_txns_nonpart_meta")
    files = _files(path)
    data, expected = fixture_rows(path)
    table = Table.open(path, options={"hoodie.metadata.index.secondary.enable": "true"})
    key_fields = list(table.config.record_key_fields)
    row = _unique_rows(data.to_pylist(), key_fields)[0]
    batch = pa.Table.from_pylist([dict(row, txn_ts=row["txn_ts"] + 1000)], schema=data.schema)
    for action in (lambda: table.upsert(batch), table.clean):
        with pytest.raises(
            MetadataTableError,
            match=r"partition\(s\) secondary_index_merchant_idx,secondary_index_txn_date_idx that.*"
            r"hoodie\.metadata\.index\.secondary\.enable=true.*Nothing was written",
        ):
            action()
        assert _files(path) == files
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == expected


def test_only_partitions_lakeward_neither_keeps_nor_drops_make_the_table_read_only():
    v9 = table_version(9)
    assert v9.read_only_reason(["column_stats", "files", "record_index", "secondary_index_merchant_idx"]) is None
    reason = v9.read_only_reason(["expression_index_amount", "files", "secondary_index_merchant_idx"])
    assert reason is not None and reason.startswith("read-only: table version 9 with a metadata table (expression_")


def test_a_version_6_metadata_table_with_partitions_lakeward_does_not_keep_there_is_read_only():
    """Hudi 0.14/0.15 writers build `column_stats` and `bloom_filters` on version 6 tables too; lakeward
    keeps only `files` and `record_index` there and refuses every write and service on such a table,
    so the daemon must not plan runs on it that could only fail."""
    v6 = table_version(6)
    assert v6.read_only_reason(["files", "record_index"]) is None
    assert v6.read_only_reason(["files", "secondary_index_merchant_idx"]) is None  # dropped by the first action
    reason = v6.read_only_reason(["column_stats", "files"])
    assert reason is not None and reason.startswith("read-only: table version 6 with a metadata table (column_stats,")


def test_the_daemons_metadata_compaction_as_first_action_drops_them(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture
):
    """The daemon runs an action as `services/execution.py` does: `table.services[action]`, schedule
    then execute; the table's secondary indexes go first, and the metadata table is compacted."""
    path = fixture_table("cow", "v9_txns_complex_meta")
    before = _partitions(path)
    secondary = _secondary(before)
    _, expected = fixture_rows(path)
    table = Table.open(path)
    service = table.services["metadata_compaction"]
    with caplog.at_level(logging.WARNING, logger=GATE_LOGGER):
        assert service.unavailable_reason() is None
        instant = service.schedule(force=True)
        assert instant is not None
        service.execute(instant)
    _assert_dropped(path, before, secondary, caplog)
    assert list((Path(path) / ".hoodie" / "metadata" / ".hoodie" / "timeline").glob(f"{instant}_*.commit"))
    mine, theirs = both_readers(path)
    assert _data_rows(mine) == _data_rows(theirs) == expected
    assert compare_files_partition(Table.open(path).storage).ok
