"""Bad input on Hudi 1.x tables (versions 8 and 9): a clear error or the right rows, never wrong rows.

- a Hudi 1.x table relabelled as version 10: UnsupportedTableVersionError, before anything is read;
- timeline files cut short at several points: each read either fails with CorruptTableError
  naming the file or returns the rows hudi-rs reads from the intact table. A completed write
  whose file is empty is corrupt on layout 2 (Hudi 1.x writes an Avro container for every
  completed commit, delta commit and replace commit, and hudi-rs fails on an empty
  replacecommit): read as "no metadata", an empty replacecommit would bring back the file
  groups it replaced;
- a metadata table whose HFiles are damaged inside (not only truncated): the read logs the
  fallback to storage listing and returns the right rows;
- a merge-on-read table whose metadata table is stale (it misses the last delta commit):
  lakeward and hudi-rs both follow the metadata table and agree.

`tests/core/test_table_versions.py` and `tests/interop/test_hudi_rs_metadata_listing.py` hold
the first cases of each (version 10 of a lakeward table, one truncated v8 delta commit, truncated
metadata HFiles).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from lakeward import Table
from lakeward.core.exceptions import CorruptTableError, UnsupportedTableVersionError
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.log_file.log_block import BlockType
from lakeward.core.file_group.log_file.log_format import RawBlock, scan_blocks
from tests.interop.compare import comparable_rows, hudi_snapshot, hudi_table

TIMELINE = Path(".hoodie") / "timeline"
FILES = Path(".hoodie") / "metadata" / "files"


def _hudi_rows(path: str) -> list:
    return comparable_rows(hudi_snapshot(hudi_table(path)))


def test_a_hudi_1x_table_labelled_version_10_is_refused(fixture_table: Callable[[str, str], str]):
    path = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))
    props = path / ".hoodie" / "hoodie.properties"
    props.write_text(props.read_text().replace("hoodie.table.version=9", "hoodie.table.version=10"))
    assert "hoodie.table.version=10" in props.read_text()
    with pytest.raises(UnsupportedTableVersionError, match=r"hoodie.table.version=10 .*\[6, 8, 9\]") as err:
        Table.open(str(path)).read()
    assert err.value.supported == (6, 8, 9)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("cow", "v8_simplekeygen_nonhivestyle_overwritetable"), ("cow", "v9_txns_simple_overwrite")],
)
def test_an_empty_completed_replacecommit_is_a_clear_error(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    path = fixture_table(kind, name)
    [replace] = (Path(path) / TIMELINE).glob("*_*.replacecommit")
    replace.write_bytes(b"")
    with pytest.raises(CorruptTableError, match=replace.name):
        Table.open(path).read()
    with pytest.raises(Exception, match="Avro"):  # hudi-rs does not read it either
        _hudi_rows(path)


def test_an_empty_completed_commit_is_a_clear_error(fixture_table: Callable[[str, str], str]):
    """Reads check the listing against what every completed write says it wrote, so an empty
    commit fails the snapshot as well as an incremental range over it (which would otherwise
    silently miss the commit's rows)."""
    path = fixture_table("cow", "v9_txns_simple_overwrite")
    first = sorted((Path(path) / TIMELINE).glob("*_*.commit"))[0]
    first.write_bytes(b"")
    table = Table.open(path)
    with pytest.raises(CorruptTableError, match=first.name):
        table.read()
    with pytest.raises(CorruptTableError, match=first.name):
        table.read_incremental("19700101000000000", None)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("mor/avro", "v8_trips_8i3d"),
        ("cow", "v8_simplekeygen_nonhivestyle_overwritetable"),
        # a metadata table, clustering, compaction, indexing: ~100 cuts of a larger table
        pytest.param("mor/avro", "v9_txns_simple_meta", marks=pytest.mark.slow),
    ],
)
def test_cut_timeline_files_give_a_clear_error_or_the_right_rows(
    fixture_table: Callable[[str, str], str], tmp_path: Path, kind: str, name: str
):
    """Every timeline file cut to 0 bytes, 1 byte, half and all but its last byte, one at a time."""
    base = Path(fixture_table(kind, name))
    want = _hudi_rows(str(base))
    names = sorted(p.name for p in (base / TIMELINE).iterdir() if p.is_file())
    errors, problems = 0, []
    for file_name in names:
        size = (base / TIMELINE / file_name).stat().st_size
        for cut in sorted({0, 1, size // 2, size - 1} - {size}):
            if cut < 0:
                continue
            copy = tmp_path / f"{file_name}-{cut}"
            shutil.copytree(base, copy)
            target = copy / TIMELINE / file_name
            target.write_bytes(target.read_bytes()[:cut])
            try:
                got = comparable_rows(Table.open(str(copy)).read())
            except CorruptTableError as exc:
                errors += 1
                if file_name not in str(exc):
                    problems.append(f"{file_name} cut to {cut}: the error does not name the file: {exc}")
            else:
                if got != want:
                    problems.append(f"{file_name} cut to {cut}: {len(got)} rows, hudi-rs reads {len(want)} intact")
            shutil.rmtree(copy)
    assert not problems, "\n".join(problems)
    assert errors > 0  # cut completed writes at least are noticed


def _flip_inside_first_data_block(data: bytes, name: str) -> bytes:
    """The HFile with one byte of its first data block's compressed payload inverted."""
    reader = HFileReader(data, name)
    entry = reader.index[0]
    at = entry.offset + (entry.size * 2) // 3  # past the 33-byte block header, in the payload
    damaged = bytearray(data)
    damaged[at] ^= 0xFF
    return bytes(damaged)


def test_a_metadata_hfile_damaged_inside_falls_back_to_listing(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture
):
    path = fixture_table("mor/avro", "v9_txns_simple_meta")
    want = _hudi_rows(path)
    hfiles = sorted((Path(path) / FILES).glob("*.hfile"))
    assert hfiles
    for hfile in hfiles:
        hfile.write_bytes(_flip_inside_first_data_block(hfile.read_bytes(), hfile.name))
    with caplog.at_level(logging.WARNING):
        got = comparable_rows(Table.open(path).read())
    assert got == want
    assert any("from storage" in r.getMessage() and "metadata" in r.getMessage() for r in caplog.records), caplog.text


def test_a_damaged_hfile_log_block_of_the_metadata_table_falls_back_to_listing(
    fixture_table: Callable[[str, str], str], caplog: pytest.LogCaptureFixture
):
    """Every HFile data block of the `files` logs gets a damaged first data block; the log
    block's framing is intact (same size), its HFile content is not."""
    path = fixture_table("cow", "v9_txns_simple_meta")
    want = _hudi_rows(path)
    damaged = 0
    for log_file in sorted((Path(path) / FILES).glob(".files-*.log.*")):
        data = log_file.read_bytes()
        for block in scan_blocks(data):
            assert isinstance(block, RawBlock)
            if block.block_type is BlockType.HFILE_DATA:
                start = data.index(block.content)
                content = _flip_inside_first_data_block(block.content, log_file.name)
                data = data[:start] + content + data[start + len(content) :]
                damaged += 1
        log_file.write_bytes(data)
    assert damaged
    with caplog.at_level(logging.WARNING):
        got = comparable_rows(Table.open(path).read())
    assert got == want
    assert any("from storage" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.parametrize(("kind", "name"), [("mor/avro", "v9_txns_simple_meta"), ("mor/avro", "v9_txns_complex_meta")])
def test_a_stale_metadata_table_of_a_merge_on_read_table_is_followed_by_both_readers(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    """The metadata table's record of the last delta commit removed (a writer that skipped it):
    lakeward and hudi-rs both list through it, so both miss that commit's log file, and agree.
    (`tests/interop/test_hudi_rs_metadata_listing.py` does the same on a copy-on-write table.)"""
    path = fixture_table(kind, name)
    before = comparable_rows(Table.open(path).read())
    last = [i for i in Table.open(path).completed_instants() if i.action.value == "deltacommit"][-1].time
    mdt = Path(path) / ".hoodie" / "metadata"
    removed = [p for p in mdt.rglob(f"*{last}*") if p.is_file()]
    assert any(".log." in p.name for p in removed), removed
    for p in removed:
        p.unlink()
    ours = comparable_rows(Table.open(path).read())
    assert ours == _hudi_rows(path)
    assert ours != before  # the metadata table, not a storage listing, decided what was read
