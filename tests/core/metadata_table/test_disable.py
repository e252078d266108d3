"""`hoodie.metadata.enable=false` on a write: the metadata table is dropped first, as Hudi's writer does.

On copies of Hudi 1.1 tables with a full metadata table: a write with the option clears
`hoodie.table.metadata.partitions` (and `.inflight`), deletes `.hoodie/metadata/`, logs it, and
writes; hudi-rs then reads the same rows as lakeward. Without the option the write is refused
with the error that names lakeward's option, and no file changes.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import MetadataTableError
from tests.interop.compare import fail_on, snapshot_mismatches
from tests.support.fixture_tables import with_unmaintained_index


def _props(path: str) -> dict[str, str]:
    return parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())


def _hashes(path: str) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in Path(path).rglob("*")
        if p.is_file()
    }


def _one_row(table: Table) -> pa.Table:
    rows = table.read()
    return rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie")]).slice(0, 1)


@pytest.mark.parametrize(("kind", "name"), [("cow", "v9_txns_simple_meta"), ("mor/avro", "v9_txns_complex_meta")])
def test_write_with_metadata_disabled_drops_the_metadata_table_as_hudi_does(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture, kind: str, name: str
):
    path = fixture_table(kind, name)
    before = _props(path)
    assert before["hoodie.table.metadata.partitions"] and (Path(path) / ".hoodie" / "metadata").is_dir()
    table = Table.open(path, options={"hoodie.metadata.enable": "false"})
    row = _one_row(table)
    count = table.read().num_rows

    with caplog.at_level(logging.WARNING, logger="lakeward.core.metadata_table.disable"):
        result = table.upsert(row)

    after = _props(path)
    assert after["hoodie.table.metadata.partitions"] == "" and after["hoodie.table.metadata.partitions.inflight"] == ""
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed == {"hoodie.table.metadata.partitions"}, "only the metadata partitions change, as in Hudi"
    assert not (Path(path) / ".hoodie" / "metadata").exists()
    assert any("deleted the metadata table" in r.getMessage() for r in caplog.records)
    assert result.num_updates == 1
    assert Table.open(path).read().num_rows == count
    fail_on(snapshot_mismatches(path))  # hudi-rs lists storage now, and sees the write
    Table.open(path).upsert(row)  # further writes need no option: the metadata table is gone


@pytest.mark.parametrize("options", [{}, {"hoodie.metadata.enable": "true"}])
def test_write_without_the_option_is_refused_naming_it_and_changes_nothing(
    fixture_table: Callable[[str, str], str], options: dict[str, str]
):
    path = str(with_unmaintained_index(fixture_table("cow", "v9_txns_simple_meta")))  # its secondary indexes go
    table = Table.open(path, options=options)
    row = _one_row(table)
    hashes = _hashes(path)

    with pytest.raises(MetadataTableError) as err:
        table.upsert(row)

    message = str(err.value)
    assert "pass the write option hoodie.metadata.enable=false to lakeward" in message
    assert "Nothing was written" in message
    assert _hashes(path) == hashes


def test_a_table_without_a_metadata_table_ignores_the_option(tmp_path: Path):
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", table_version=9)
    table = Table.open(path, options={"hoodie.metadata.enable": "false"})
    table.upsert(pa.table({"id": ["a"], "v": [1]}))
    assert table.read().num_rows == 1
    assert "hoodie.table.metadata.partitions" not in _props(path)
