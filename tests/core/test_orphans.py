"""Orphan files: what a killed writer, a stray copy and a pending instant leave, found and removed by Hudi's rules."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import ReadOnlyTableVersionError
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.orphans import find_orphans, remove_orphans
from lakeward.core.storage import Storage
from lakeward.core.table import Table
from lakeward.core.table_services.orphan_clean import DRY_RUN_KEY, OLDER_THAN_KEY, OrphanCleanService
from lakeward.core.timeline import Timeline
from tests.core.test_crash_recovery import run_and_kill
from tests.support.fixture_tables import all_fixtures

CITIES = ["sf", "nyc", "la", "sea"]
DAY = dt.timedelta(days=1)


def _batch(ids: range, ts: int) -> pa.Table:
    return pa.table(
        {"id": list(ids), "city": [CITIES[i % 4] for i in ids], "ts": [ts] * len(ids), "v": [f"{i}-{ts}" for i in ids]}
    )


def _later() -> dt.datetime:
    """Two days on: every file on disk is then older than a one-day threshold."""
    return dt.datetime.now(dt.UTC) + 2 * DAY


def _table(path: Path, table_type: str = "COPY_ON_WRITE") -> Table:
    table = Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts", table_type=table_type)
    table.upsert(_batch(range(8), 1))
    table.upsert(_batch(range(4, 12), 2))
    return table


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _data_files(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and (parse_base_file_name(p.name) or parse_log_file_name(p.name))
    )


def _rows(table: Table) -> list[tuple[int, str]]:
    data = table.read(columns=["id", "v"])
    return sorted(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def _stray_copy(path: Path) -> tuple[Path, Path]:
    """A committed base file copied under a fresh file id (same instant) and under a non-Hudi name."""
    source = next(p for p in sorted(path.rglob("*.parquet")) if parse_base_file_name(p.name))
    parsed = parse_base_file_name(source.name)
    assert parsed is not None
    renamed = source.with_name(source.name.replace(parsed.file_id, "00000000-0000-0000-0000-000000000000-0"))
    shutil.copy2(source, renamed)
    manual = source.with_name("copy of data.parquet")
    shutil.copy2(source, manual)
    return renamed, manual


def test_orphans_healthy_table_has_none(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", "MERGE_ON_READ")
    table.upsert(_batch(range(0, 12, 3), 3))  # log files
    assert find_orphans(table, DAY, now=_later()) == []


def test_orphans_stray_copies_found_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    rows = _rows(table)
    renamed, manual = _stray_copy(path)
    orphans = {o.path: o for o in find_orphans(table, DAY, now=_later())}
    rel = {str(renamed.relative_to(path)), str(manual.relative_to(path))}
    assert set(orphans) == rel
    copy = orphans[str(renamed.relative_to(path))]
    assert copy.instant_time is not None and f"completed instant {copy.instant_time} does not list it" == copy.reason
    assert copy.size == renamed.stat().st_size
    assert orphans[str(manual.relative_to(path))].reason == "not a Hudi data file name"

    before = _hashes(path)
    report = remove_orphans(table, DAY, now=_later())  # dry run by default
    assert report.dry_run and report.removed == ()
    assert {r.path for r in report.removals} == rel and not any(r.removed for r in report.removals)
    assert report.orphan_bytes == renamed.stat().st_size + manual.stat().st_size
    assert _hashes(path) == before

    done = remove_orphans(table, DAY, dry_run=False, now=_later())
    assert set(done.removed) == rel
    record = json.loads(json.dumps(done.to_json_dict()))
    assert record["dry_run"] is False and record["older_than"] == 86400.0
    assert {r["path"] for r in record["removals"] if r["removed"]} == rel
    after = _hashes(path)
    assert set(before) - set(after) == rel and all(after[k] == before[k] for k in after)
    assert _rows(Table.open(str(path))) == rows


def test_orphans_newer_than_threshold_kept(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path)
    renamed, manual = _stray_copy(path)
    # just made: modified within the threshold
    assert find_orphans(table, dt.timedelta(hours=1)) == []
    # modified long ago, but the instant in the name is within the threshold: still kept
    old = (dt.datetime.now() - 3 * DAY).timestamp()
    for p in (renamed, manual):
        os.utime(p, (old, old))
    assert [o.path for o in find_orphans(table, dt.timedelta(hours=1))] == [str(manual.relative_to(path))]
    assert {o.path for o in find_orphans(table, dt.timedelta(0))} == {
        str(renamed.relative_to(path)),
        str(manual.relative_to(path)),
    }
    with pytest.raises(ValueError, match="older_than"):
        find_orphans(table, dt.timedelta(hours=-1))


def test_orphans_stray_log_file_of_completed_delta_commit(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path, "MERGE_ON_READ")
    table.upsert(_batch(range(0, 12, 3), 3))
    log = next(p for p in sorted(path.rglob(".*")) if parse_log_file_name(p.name) and ".hoodie" not in p.parts)
    parsed = parse_log_file_name(log.name)
    assert parsed is not None
    stray = log.with_name(log.name.replace(f".log.{parsed.version}_", ".log.99_"))
    shutil.copy2(log, stray)
    (orphan,) = find_orphans(table, DAY, now=_later())
    assert orphan.path == str(stray.relative_to(path))
    assert "log file of instant(s)" in orphan.reason and "do not list it" in orphan.reason


@pytest.fixture
def crash_batch(tmp_path: Path) -> Path:
    batch = tmp_path / "crash.parquet"
    pq.write_table(_batch(range(100, 140), 3), batch)
    return batch


def test_orphans_sigkilled_writer_files_kept_while_pending_then_found_once_markers_and_instant_are_lost(
    tmp_path: Path, crash_batch: Path
) -> None:
    path = tmp_path / "t"
    table = _table(path)
    committed = set(_data_files(path))
    run_and_kill(path, "after_two_files", crash_batch)
    (pending,) = Timeline.load(table.storage).pending()
    written = set(_data_files(path)) - committed
    assert len(written) == 2

    # pending: never an orphan, with or without its markers
    assert find_orphans(table, DAY, now=_later()) == []
    shutil.rmtree(path / ".hoodie" / ".temp" / pending.time)
    assert find_orphans(table, DAY, now=_later()) == []

    # the instant lost too (as a rollback that found no markers leaves it): its files are orphans
    for f in (path / ".hoodie").glob(f"{pending.time}.*"):
        f.unlink()
    (path / ".hoodie" / ".heartbeat" / pending.time).unlink(missing_ok=True)
    orphans = find_orphans(table, DAY, now=_later())
    assert {o.path for o in orphans} == written
    assert {o.reason for o in orphans} == {f"instant {pending.time} is not on the timeline"}
    before = _hashes(path)
    remove_orphans(table, DAY, now=_later())
    assert _hashes(path) == before
    report = remove_orphans(table, DAY, dry_run=False, now=_later())
    assert set(report.removed) == written
    assert set(_data_files(path)) == committed


def test_orphans_files_of_pending_compaction_kept(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path, "MERGE_ON_READ")
    table.upsert(_batch(range(0, 12, 3), 3))
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    # a compactor wrote one output file, then died and its markers were lost
    source = next(p for p in sorted(path.rglob("*.parquet")) if parse_base_file_name(p.name))
    parsed = parse_base_file_name(source.name)
    assert parsed is not None
    shutil.copy2(source, source.with_name(source.name.replace(parsed.instant_time, instant)))
    assert find_orphans(table, DAY, now=_later()) == []


def test_orphans_removal_refused_on_read_only_version_dry_run_works(fixture_table: object) -> None:
    path = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))  # type: ignore[operator]
    table = Table.open(str(path))
    before = _hashes(path)
    report = remove_orphans(table, DAY, now=_later())
    assert report.dry_run
    assert _hashes(path) == before
    with pytest.raises(ReadOnlyTableVersionError, match="remove orphan files"):
        remove_orphans(table, DAY, dry_run=False, now=_later())


@pytest.mark.parametrize(("kind", "name"), all_fixtures())
def test_orphans_hudi_written_fixture_has_none(fixture_table: object, kind: str, name: str) -> None:
    """Tables Apache Hudi wrote (v6, v8, v9; rollbacks, overwrites, log files) hold no orphan by these rules."""
    table = Table.open(fixture_table(kind, name))  # type: ignore[operator]
    assert find_orphans(table, DAY, now=dt.datetime.now(dt.UTC) + 3650 * DAY) == []


def test_orphans_files_a_savepoint_lists_kept(tmp_path: Path) -> None:
    """A savepoint keeps its files even when no instant on the active timeline lists them any more."""
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", partition_by="city", ordering_field="ts")
    for ts, city in enumerate(CITIES[:3]):  # one new partition per commit
        table.upsert(pa.table({"id": [ts], "city": [city], "ts": [ts], "v": [city]}))
    middle = Timeline.load(table.storage).completed_writes()[1].time
    table.savepoint(middle)
    for f in [*(path / ".hoodie").glob(f"{middle}.commit*"), path / ".hoodie" / f"{middle}.inflight"]:
        f.unlink()  # its commit gone from the active timeline (as a manual repair or an archival past it would)
    (saved,) = [p for p in _data_files(path) if middle in p]
    assert find_orphans(table, DAY, now=_later()) == []
    table.delete_savepoint(middle)
    assert [o.path for o in find_orphans(table, DAY, now=_later())] == [saved]


def test_orphans_never_the_metadata_tables_files(tmp_path: Path) -> None:
    path = tmp_path / "t"
    table = _table(path, "MERGE_ON_READ")  # the default writer keeps a metadata table
    table.upsert(_batch(range(0, 12, 3), 3))  # log files in the data table and in the metadata table
    table.services.compaction.execute(table.services.compaction.schedule(force=True))
    mdt = path / ".hoodie" / "metadata"
    assert (mdt / "files").is_dir()
    metadata_files = {k: v for k, v in _hashes(path).items() if k.startswith(".hoodie/metadata/")}
    assert any(k.endswith(".hfile") for k in metadata_files) and any(".log." in k for k in metadata_files)
    renamed, manual = _stray_copy(path)  # real orphans of the data table
    orphans = {str(renamed.relative_to(path)), str(manual.relative_to(path))}

    assert {o.path for o in find_orphans(table, dt.timedelta(0), now=_later())} == orphans
    ctx = Table.open(str(path), options={OLDER_THAN_KEY: "0", DRY_RUN_KEY: "false"}).service_context("orphan_clean")
    report = OrphanCleanService(ctx).execute()

    assert set(report.removed) == orphans
    after = _hashes(path)
    assert {k: v for k, v in after.items() if k.startswith(".hoodie/metadata/")} == metadata_files
    assert compare_files_partition(Storage.for_uri(str(path))).ok
    assert find_orphans(Table.open(str(path)), dt.timedelta(0), now=_later()) == []
