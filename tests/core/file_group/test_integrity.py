"""Damaged files must not read as plausible rows (issue 18, items 5 and 6).

Every damage here is made with plain file operations on a real table: a file of a
completed commit replaced by random bytes, truncated or deleted. Reads and writes must
fail with an error naming the file and the instant; `Table.check()` and
`lakeward show --check` must report every problem in one pass without changing anything;
and the legitimate states (a failed write's torn log tail, rollbacks, cleans,
replacements, compaction, archival) must keep reading and check clean.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import hudi
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from lakeward import Table
from lakeward.core.exceptions import CorruptFileError, LakewardError, MissingFileError
from lakeward.core.file_group.log_file import DeleteBlock, encode_block
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.services.cli import app

MOR = "MERGE_ON_READ"
COW = "COPY_ON_WRITE"
SCHEMA = '{"type": "record", "name": "r", "fields": []}'


def _rows(n: int, ts: int, v: str, start: int = 0) -> pa.Table:
    return pa.Table.from_pylist([{"uuid": f"k{i}", "ts": ts, "v": v} for i in range(start, start + n)])


def _table(path: Path, table_type: str, options: dict[str, str] | None = None) -> Table:
    """Two commits: 10 rows 'a', then 5 of them updated to 'b' (a log append on MOR)."""
    table = Table.create(str(path), record_key="uuid", ordering_field="ts", table_type=table_type, options=options)
    table.upsert(_rows(10, 1, "a"))
    table.upsert(_rows(5, 2, "b"))
    return table


def _values(path: Path) -> list[str]:
    return sorted(r["v"] for r in Table.open(str(path)).read().to_pylist())


def _latest_commit(path: Path) -> str:
    return Table.open(str(path)).timeline().completed_writes()[-1].time


def _log_files(path: Path) -> list[Path]:
    return sorted((p for p in path.rglob(".*.log.*") if ".hoodie" not in p.parts), key=lambda p: p.name)


def _base_files(path: Path) -> list[Path]:
    found = [p for p in path.rglob("*.parquet") if ".hoodie" not in p.parts]
    return sorted(found, key=lambda p: parse_base_file_name(p.name).instant_time)  # type: ignore[union-attr]


def _state(path: Path) -> dict[str, tuple[int, int]]:
    """Every file under the table (timeline included) with its size and modification time."""
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*") if p.is_file()}


def _assert_names(exc: LakewardError, file: Path, instant: str) -> None:
    assert isinstance(exc, CorruptFileError)
    assert file.name in str(exc) and instant in str(exc), str(exc)
    assert exc.path is not None and exc.path.endswith(file.name)
    assert exc.instant == instant


# -- log files of completed commits ---------------------------------------------------------


def test_log_of_a_completed_commit_replaced_by_random_bytes_is_an_error(tmp_path: Path) -> None:
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    log.write_bytes(random.Random(7).randbytes(log.stat().st_size))
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, log, _latest_commit(tmp_path))


def test_truncated_log_of_a_completed_commit_is_an_error(tmp_path: Path) -> None:
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    log.write_bytes(log.read_bytes()[: log.stat().st_size // 2])
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, log, _latest_commit(tmp_path))


def test_damaged_block_of_a_completed_commit_is_an_error_even_when_the_size_is_right(tmp_path: Path) -> None:
    """Same size, torn inside: the listing cannot tell; the block scan must (the header survives)."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    data = bytearray(log.read_bytes())
    data[-8:] = b"\xff" * 8  # the trailing block length no longer matches
    log.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, log, _latest_commit(tmp_path))


def test_torn_tail_of_a_failed_write_is_skipped(tmp_path: Path) -> None:
    """As Hudi: a partially written block of an instant that never completed is not an error."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    never_completed = "29990101000000000"
    torn = encode_block(DeleteBlock.create(never_completed, SCHEMA, pa.array(["k1"]), ""))
    with log.open("ab") as f:
        f.write(torn[: len(torn) - 5])
    assert _values(tmp_path) == ["a"] * 5 + ["b"] * 5
    assert Table.open(str(tmp_path)).check().ok


def test_torn_tail_without_a_readable_header_after_the_committed_bytes_is_skipped(tmp_path: Path) -> None:
    """The commit records the log's size: garbage past it is a failed later append, not damage."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    with log.open("ab") as f:
        f.write(b"#HUDI#\x00\x00")
    assert _values(tmp_path) == ["a"] * 5 + ["b"] * 5
    assert Table.open(str(tmp_path)).check().ok


def test_a_block_torn_by_a_retried_task_then_made_again_is_skipped(tmp_path: Path) -> None:
    """A Spark task that died midway through its append leaves a torn block of the instant; the retry
    appends the whole block after it, and the instant completes. Every Hudi reader skips the torn
    one; so must lakeward, reading the rows the completed block holds."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    block = log.read_bytes()  # the one block of the second commit
    log.write_bytes(block[: len(block) * 2 // 3] + block)
    expected = ["a"] * 5 + ["b"] * 5
    assert _values(tmp_path) == expected
    theirs = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(tmp_path)).build().read())
    assert sorted(theirs.column("v").to_pylist()) == expected
    assert Table.open(str(tmp_path)).check().ok


def test_a_torn_block_of_a_completed_commit_is_an_error_when_no_block_of_its_kind_follows(tmp_path: Path) -> None:
    """A sound block of the same instant but of another kind (its delete block) does not make the torn
    data block an attempt made again: its rows would be missing, so the read refuses."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    instant = _latest_commit(tmp_path)
    block = log.read_bytes()
    log.write_bytes(
        block[: len(block) * 2 // 3] + encode_block(DeleteBlock.create(instant, SCHEMA, pa.array(["k9"]), ""))
    )
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, log, instant)


# -- files missing from storage -------------------------------------------------------------


def test_deleted_base_file_of_the_latest_commit_is_an_error(tmp_path: Path) -> None:
    _table(tmp_path, COW)
    newest = _base_files(tmp_path)[-1]
    newest.unlink()
    with pytest.raises(MissingFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, newest, _latest_commit(tmp_path))


def test_deleted_only_file_of_a_new_file_group_is_an_error(tmp_path: Path) -> None:
    """The whole file group disappears from the listing: the view alone cannot notice."""
    table = Table.create(str(tmp_path), record_key="uuid", ordering_field="ts", partition_by="p")
    table.upsert(pa.Table.from_pylist([{"uuid": "a", "ts": 1, "p": "x"}]))
    table.upsert(pa.Table.from_pylist([{"uuid": "b", "ts": 1, "p": "y"}]))
    (only,) = (tmp_path / "y").glob("*.parquet")
    only.unlink()
    with pytest.raises(MissingFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, only, _latest_commit(tmp_path))


@pytest.mark.parametrize("version", [6, 8, 9])
def test_a_deleted_base_file_older_than_another_partitions_newest_is_an_error(tmp_path: Path, version: int) -> None:
    """On 8+ the scan found the file missing while it opened its files, outside the check that names
    it: a raw FileNotFoundError, not MissingFileError. Found by a report-only exploration."""
    table = Table.create(str(tmp_path), record_key="uuid", ordering_field="ts", partition_by="p", table_version=version)
    table.insert(pa.Table.from_pylist([{"uuid": "a", "ts": 1, "p": "x"}, {"uuid": "b", "ts": 1, "p": "y"}]))
    table.upsert(pa.Table.from_pylist([{"uuid": "c", "ts": 3, "p": "y"}]))
    (lost,) = (tmp_path / "x").glob("*.parquet")
    lost.unlink()
    with pytest.raises(MissingFileError, match=lost.name):
        Table.open(str(tmp_path)).read()


def test_deleted_log_file_of_the_latest_commit_is_an_error(tmp_path: Path) -> None:
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    log.unlink()
    with pytest.raises(MissingFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, log, _latest_commit(tmp_path))


# -- truncated base files (item 6) ---------------------------------------------------------


def test_truncated_base_file_is_a_clear_error_at_read_and_at_write(tmp_path: Path) -> None:
    _table(tmp_path, COW)
    newest = _base_files(tmp_path)[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).read()
    _assert_names(info.value, newest, _latest_commit(tmp_path))
    with pytest.raises(CorruptFileError) as info:
        Table.open(str(tmp_path)).upsert(_rows(1, 3, "c"))
    _assert_names(info.value, newest, _latest_commit(tmp_path))


def test_base_file_damaged_at_the_same_size_names_the_file(tmp_path: Path) -> None:
    """Past the listing check (sizes agree), Parquet's own error must still name the file."""
    _table(tmp_path, COW)
    newest = _base_files(tmp_path)[-1]
    newest.write_bytes(random.Random(3).randbytes(newest.stat().st_size))
    for action in (
        lambda: Table.open(str(tmp_path)).read(),
        lambda: Table.open(str(tmp_path)).upsert(_rows(1, 3, "c")),
    ):
        with pytest.raises(CorruptFileError) as info:
            action()
        assert newest.name in str(info.value)
        assert isinstance(info.value.__cause__, (pa.ArrowInvalid, OSError))  # Parquet's own error, kept as the cause


# -- writes refuse to build on a damaged table ----------------------------------------------


@pytest.mark.parametrize("table_type", [COW, MOR])
def test_writes_refuse_to_build_on_a_damaged_table_and_leave_it_unchanged(tmp_path: Path, table_type: str) -> None:
    _table(tmp_path, table_type)
    victim = _log_files(tmp_path)[-1] if table_type == MOR else _base_files(tmp_path)[-1]
    victim.unlink()
    before = _state(tmp_path)
    with pytest.raises(MissingFileError) as info:
        Table.open(str(tmp_path)).upsert(_rows(1, 3, "c"))
    assert "lakeward show --check" in str(info.value)
    assert _state(tmp_path) == before


# -- Table.check() and `lakeward show --check` ----------------------------------------------


def _damage_everything(path: Path) -> dict[str, str]:
    """Three damaged files in three partitions; returns file name -> kind of damage."""
    table = Table.create(str(path), record_key="uuid", ordering_field="ts", partition_by="p", table_type=MOR)
    table.upsert(pa.Table.from_pylist([{"uuid": f"k{i}", "ts": 1, "p": p} for i in range(5) for p in "xyz"]))
    table.upsert(pa.Table.from_pylist([{"uuid": f"k{i}", "ts": 2, "p": p} for i in range(2) for p in "xyz"]))
    (x_log,) = _log_files(path / "x")
    (y_log,) = _log_files(path / "y")
    (z_base,) = _base_files(path / "z")
    x_log.unlink()
    y_log.write_bytes(os.urandom(y_log.stat().st_size))
    z_base.write_bytes(z_base.read_bytes()[:100])
    return {x_log.name: "missing", y_log.name: "log", z_base.name: "base"}


def test_check_reports_every_problem_in_one_pass_and_changes_nothing(tmp_path: Path) -> None:
    damaged = _damage_everything(tmp_path)
    before = _state(tmp_path)
    report = Table.open(str(tmp_path)).check()
    assert _state(tmp_path) == before
    assert not report.ok
    named = {p.path.rsplit("/", 1)[-1] for p in report.problems}
    assert named == set(damaged), report
    by_name = {p.path.rsplit("/", 1)[-1]: p for p in report.problems}
    assert by_name[next(n for n, k in damaged.items() if k == "missing")].kind == "missing"
    assert all(p.instant for p in report.problems)
    assert report.files_checked >= 4


def test_check_of_a_sound_table_finds_nothing(tmp_path: Path) -> None:
    _table(tmp_path, MOR)
    report = Table.open(str(tmp_path)).check()
    assert report.ok, report
    assert report.problems == [] and report.files_checked == 2


def test_cli_show_check_prints_the_problems_and_exits_non_zero(tmp_path: Path) -> None:
    damaged = _damage_everything(tmp_path)
    result = CliRunner().invoke(app, ["show", "--check", str(tmp_path)])
    assert result.exit_code == 1, result.output
    for name in damaged:
        assert name in result.output
    as_json = CliRunner().invoke(app, ["show", "--check", "--json", str(tmp_path)])
    assert as_json.exit_code == 1, as_json.output
    problems = json.loads(as_json.output)["problems"]
    assert {p["path"].rsplit("/", 1)[-1] for p in problems} == set(damaged)


def test_cli_show_check_of_a_sound_table_exits_zero(tmp_path: Path) -> None:
    _table(tmp_path, MOR)
    result = CliRunner().invoke(app, ["show", "--check", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "no problems" in result.output


# -- legitimate states still read and check clean ---------------------------------------------


def test_rollback_clean_replace_compaction_and_archival_leave_a_sound_table(tmp_path: Path) -> None:
    options = {
        "hoodie.cleaner.commits.retained": "1",
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
    }
    table = Table.create(
        str(tmp_path), record_key="uuid", ordering_field="ts", partition_by="p", table_type=MOR, options=options
    )
    for round_ in range(4):
        table.upsert(pa.Table.from_pylist([{"uuid": f"k{i}", "ts": round_, "p": "xy"[i % 2]} for i in range(6)]))
    table.rollback(table.timeline().completed_writes()[-1].time)
    compaction = table.schedule_compaction(force=True)
    assert compaction is not None
    table.run_compaction(compaction)
    table.insert_overwrite(pa.Table.from_pylist([{"uuid": "k0", "ts": 9, "p": "x"}]))
    table.upsert(pa.Table.from_pylist([{"uuid": "k1", "ts": 9, "p": "y"}]))
    assert table.schedule_clean() is not None
    table.run_clean(table.pending_cleans()[0])
    table.archive()
    report = Table.open(str(tmp_path)).check()
    assert report.ok, report
    rows = {r["uuid"]: r["ts"] for r in Table.open(str(tmp_path)).read().to_pylist()}
    assert rows == {"k0": 9, "k1": 9, "k3": 2, "k5": 2}


def test_a_failed_write_left_behind_does_not_count_as_damage(tmp_path: Path) -> None:
    """A pending (never completed) instant's log file, torn in the middle of its only block."""
    _table(tmp_path, MOR)
    (log,) = _log_files(tmp_path)
    parsed = parse_log_file_name(log.name)
    assert parsed is not None
    pending = "29990101000000000"
    (tmp_path / ".hoodie" / f"{pending}.deltacommit.requested").write_bytes(b"")
    torn = encode_block(DeleteBlock.create(pending, SCHEMA, pa.array(["k1"]), ""))
    stray = log.with_name(log.name.replace(f".log.{parsed.version}_", f".log.{parsed.version + 1}_"))
    stray.write_bytes(torn[:40])
    assert _values(tmp_path) == ["a"] * 5 + ["b"] * 5
    assert Table.open(str(tmp_path)).check().ok


@pytest.mark.parametrize("table_type", [COW, MOR])
def test_rolling_back_the_damaged_instant_repairs_the_table(tmp_path: Path, table_type: str) -> None:
    """The way out the errors point to: roll back the instant whose file is gone, then write on."""
    _table(tmp_path, table_type)
    latest = _latest_commit(tmp_path)
    victim = _log_files(tmp_path)[-1] if table_type == MOR else _base_files(tmp_path)[-1]
    victim.unlink()
    table = Table.open(str(tmp_path))
    table.rollback(latest)
    assert table.check().ok
    assert _values(tmp_path) == ["a"] * 10
    Table.open(str(tmp_path)).upsert(_rows(1, 3, "c", start=1))
    assert _values(tmp_path) == ["a"] * 9 + ["c"]


def test_incremental_read_over_a_missing_file_is_an_error(tmp_path: Path) -> None:
    _table(tmp_path, COW)
    first = Table.open(str(tmp_path)).timeline().completed_writes()[0].time
    newest = _base_files(tmp_path)[-1]
    newest.unlink()
    with pytest.raises(MissingFileError) as info:
        Table.open(str(tmp_path)).read_incremental(first)
    _assert_names(info.value, newest, _latest_commit(tmp_path))
