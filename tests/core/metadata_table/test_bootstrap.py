"""`Table.initialize_metadata_table` on lakeward-written v8/v9 tables: Hudi's layout, hudi-rs and
lakeward reading through it, crashes before it is put in use, and what stays refused.

Proof that both readers list through the metadata table: a stray copy of a data file added
after initialisation (a committed-looking base file of a new file group) would duplicate rows
for a reader that lists storage; neither reader sees it.
"""

from __future__ import annotations

import hashlib
import posixpath
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import MetadataTableError
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import MetadataFileListing
from lakeward.core.file_group.naming import PARTITION_METADATA_FILE, parse_base_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.bootstrap import initialize_metadata_table
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, CommitMetadata
from lakeward.core.timeline.transitions import create_requested
from tests.interop.compare import all_mismatches, both_readers, fail_on

SCRIPT = Path(__file__).parents[1] / "scripts" / "crash_mdt_init.py"
OFF = {"hoodie.metadata.enable": "false"}
PARTS = ["p1", "p2", "p3"]
Model = dict[str, tuple[str, int, int]]
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])


def _batch(rows: Model) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": k, "part": p, "ts": ts, "val": v} for k, (p, ts, v) in sorted(rows.items())], schema=SCHEMA
    )


def _write_table(path: str, version: int, table_type: str) -> Model:
    """Insert, upsert (logs on MOR), delete and insert overwrite: a few instants of each kind, written
    without a metadata table (what these tests initialise afterwards)."""
    keys = {"record_key": "id", "partition_by": "part", "ordering_field": "ts"}
    table = Table.create(path, **keys, table_type=table_type, table_version=version, options=OFF)
    model = {f"k{i:02d}": (PARTS[i % 3], 1, i) for i in range(12)}
    table.insert(_batch(model))
    updates = {k: (model[k][0], 2, 100 + n) for n, k in enumerate(["k00", "k04", "k08"])}
    table.upsert(_batch(updates | {"k12": ("p2", 2, 12)}))
    model |= updates | {"k12": ("p2", 2, 12)}
    table.delete(_batch({k: model[k] for k in ("k01", "k05")}))
    del model["k01"], model["k05"]
    overwrite = {"k20": ("p3", 3, 20), "k21": ("p3", 3, 21)}
    table.insert_overwrite(_batch(overwrite))
    return {k: r for k, r in model.items() if r[0] != "p3"} | overwrite


def _model_rows(model: Model) -> list[tuple[str, str, int, int]]:
    return sorted((k, *r) for k, r in model.items())


def _rows_of(rows: list[dict[str, Any]]) -> list[tuple[str, str, int, int]]:
    return sorted((r["id"], r["part"], r["ts"], r["val"]) for r in rows)


def _data_files(storage: Storage) -> list[tuple[str, int]]:
    """(path, size) of every data file on storage (what a storage listing gives readers)."""
    return sorted(
        (e.path, e.size)
        for e in storage.list_dir("", recursive=True)
        if not e.is_dir and not e.path.startswith(".hoodie/") and e.name != PARTITION_METADATA_FILE
    )


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


def _add_stray_copy(path: Path) -> str:
    """Copy a committed base file as the base file of a new file group: visible to a storage listing."""
    source = next(p for p in sorted(path.glob("p2/*.parquet")))
    parsed = parse_base_file_name(source.name)
    assert parsed is not None
    stray = source.with_name(f"{uuid.uuid4()}-0_{parsed.write_token}_{parsed.instant_time}.parquet")
    shutil.copyfile(source, stray)
    return str(stray.relative_to(path))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_initialize_then_hudi_rs_and_lakeward_list_through_it(tmp_path: Path, version: int, table_type: str):
    path = tmp_path / "t"
    model = _write_table(str(path), version, table_type)
    table = Table.open(str(path))
    files_before = _data_files(table.storage)
    result = table.initialize_metadata_table()
    assert (result.instant_time, result.partitions, result.files) == ("00000000000000000", 3, len(files_before))
    assert result.as_of == table.timeline().completed()[-1].time
    props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    assert props["hoodie.table.metadata.partitions.inflight"] == ""
    assert not (path / ".hoodie" / "hoodie.properties.backup").exists()

    # (b) lakeward's reader of the `files` partition lists what storage holds, sizes included
    listing = MetadataFileListing(table.storage)
    assert sorted((e.path, e.size) for e in listing.file_entries()) == files_before
    assert listing.partitions() == PARTS

    # (a) both readers give the model's rows, and list through the metadata table
    mine, theirs = both_readers(str(path))
    assert mine == theirs and _rows_of(mine) == _model_rows(model)
    stray = _add_stray_copy(path)
    by_storage = FileSystemView.from_storage_listing(table.storage, table.timeline())
    assert any(s.base_file and s.base_file.path == stray for s in by_storage.latest_file_slices())
    view = FileSystemView.load(table.storage, table.timeline())
    assert view.from_metadata_table and all(
        s.base_file is None or s.base_file.path != stray for s in view.latest_file_slices()
    )
    mine, theirs = both_readers(str(path))
    assert mine == theirs and _rows_of(mine) == _model_rows(model), "a reader listed storage (stray copy seen)"
    fail_on(all_mismatches(str(path)))

    # writes and table services keep it (test_writes.py, test_services.py); a second one is refused
    before = _hashes(path)
    with pytest.raises(MetadataTableError, match="already has a metadata table"):
        initialize_metadata_table(table.storage, table.config)
    assert _hashes(path) == before


def test_layout_is_hudis(tmp_path: Path, fixture_table: Callable[[str, str], str]):
    """On an empty v9 table of the same name, every file of the metadata table is as Hudi 1.1.1
    wrote it when it initialised `files` (fixture `v9_txns_simple_overwrite`), except the
    clocks (completion time, HFile create time, properties' dates) and the HFile's write token."""
    hudi = Path(fixture_table("cow", "v9_txns_simple_overwrite")) / ".hoodie" / "metadata"
    path = tmp_path / "t"
    Table.create(str(path), record_key="txn_id", table_name="v9_txns_cow_simple_overwrite", table_version=9)
    Table.open(str(path)).initialize_metadata_table()
    ours = path / ".hoodie" / "metadata"

    def props(root: Path) -> dict[str, str]:
        return parse_properties((root / ".hoodie" / "hoodie.properties").read_text())

    assert props(ours) == props(hudi)
    assert (ours / "files" / PARTITION_METADATA_FILE).read_text().splitlines()[2:] == (
        hudi / "files" / PARTITION_METADATA_FILE
    ).read_text().splitlines()[2:]
    init_log = ".files-0000-0_00000000000000000.log.1_0-0-0"
    assert (ours / "files" / init_log).read_bytes() == (hudi / "files" / init_log).read_bytes()
    [our_hfile] = list((ours / "files").glob("*.hfile"))
    hudi_hfile = hudi / "files" / "files-0000-0_0-5-4_00000000000000000.hfile"
    assert list(HFileReader(our_hfile.read_bytes()).items()) == list(HFileReader(hudi_hfile.read_bytes()).items())

    def init_instant(root: Path) -> tuple[list[str], dict[str, Any]]:
        timeline = root / ".hoodie" / "timeline"
        names = sorted(p.name for p in timeline.iterdir() if p.name.startswith("00000000000000000"))
        for name in names[:2]:
            assert (timeline / name).read_bytes() == b""  # requested and inflight are empty
        meta = CommitMetadata.from_bytes((timeline / names[2]).read_bytes())
        [stat] = meta.partitionToWriteStats["files"]
        assert stat.fileSizeInBytes == stat.totalWriteBytes == (root / stat.path).stat().st_size
        summary = {
            "file": (stat.fileId, stat.partitionPath, stat.prevCommit, stat.numWrites, stat.numInserts),
            "op": (meta.operationType, meta.compacted, meta.extraMetadata),
        }
        return [n.split("_")[0] if "_" in n else n for n in names], summary

    assert init_instant(ours) == init_instant(hudi)
    hudi_init_files = [p.name for p in (hudi / "files").iterdir() if "00000000000000000" in p.name]
    assert sorted(p.name for p in (ours / "files").iterdir()) == sorted(
        [*(n.replace("_0-5-4_", "_0-0-0_") for n in hudi_init_files), PARTITION_METADATA_FILE]
    )


def test_refused_with_a_pending_instant_and_twice(tmp_path: Path):
    path = tmp_path / "v9"
    _write_table(str(path), 9, "COPY_ON_WRITE")
    table = Table.open(str(path))
    pending = create_requested(table.storage, "29990101000000000", Action.COMMIT, b"", table.version.timeline_layout)
    before = _hashes(path)
    with pytest.raises(MetadataTableError, match="while instants are pending.*29990101000000000"):
        initialize_metadata_table(table.storage, table.config)
    assert _hashes(path) == before
    (path / ".hoodie" / "timeline" / pending.file_name).unlink()
    assert table.initialize_metadata_table() is not None
    built = _hashes(path)
    assert table.initialize_metadata_table() is None  # it has one: nothing is written
    assert _hashes(path) == built


@pytest.mark.parametrize("point", ["before_mdt_complete", "before_properties"])
def test_killed_before_the_properties_leaves_the_table_as_it_was_and_a_rerun_succeeds(tmp_path: Path, point: str):
    path = tmp_path / "t"
    model = _write_table(str(path), 9, "MERGE_ON_READ")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(path), point], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert (path / ".hoodie" / "metadata" / "files").is_dir()  # the metadata table was (partly) written
    table = Table.open(str(path))
    assert "hoodie.table.metadata.partitions" not in table.config.to_properties()
    assert not FileSystemView.load(table.storage, table.timeline()).from_metadata_table
    mine, theirs = both_readers(str(path))
    assert mine == theirs and _rows_of(mine) == _model_rows(model)

    # no metadata table in use: lakeward writes as before (a writer without one); the rerun lists that write too
    Table.open(str(path), options=OFF).upsert(_batch({"k30": ("p1", 4, 30)}))
    model["k30"] = ("p1", 4, 30)
    result = table.initialize_metadata_table()
    assert result is not None and result.files == len(_data_files(table.storage))
    timeline = sorted(p.name for p in (path / ".hoodie" / "metadata" / ".hoodie" / "timeline").glob("*.deltacommit"))
    assert len(timeline) == 1 and timeline[0].startswith("00000000000000000_")
    mine, theirs = both_readers(str(path))
    assert mine == theirs and _rows_of(mine) == _model_rows(model)
    assert FileSystemView.load(table.storage, table.timeline()).from_metadata_table
    assert sorted((e.path, e.size) for e in MetadataFileListing(table.storage).file_entries()) == _data_files(
        table.storage
    )


def test_reinitialized_on_a_copy_of_a_hudi_table_reads_as_before(fixture_table: Callable[[str, str], str]):
    """A Hudi 1.1 table whose metadata table was dropped (as `hoodie.metadata.enable=false` leaves
    it), initialised again by lakeward: the same listing as Hudi's, the same rows in hudi-rs."""
    path = Path(fixture_table("mor/avro", "v9_txns_simple_meta"))
    storage = Storage.for_uri(str(path))
    hudi_listing = sorted((e.path, e.size) for e in MetadataFileListing(storage).file_entries())
    rows_before = both_readers(str(path))[1]
    shutil.rmtree(path / ".hoodie" / "metadata")
    props_path = path / ".hoodie" / "hoodie.properties"
    kept = [line for line in props_path.read_text().splitlines() if "hoodie.table.metadata.partitions" not in line]
    props_path.write_text("\n".join(kept) + "\n")
    result = Table.open(str(path)).initialize_metadata_table()
    assert result.partitions == 3
    assert sorted((e.path, e.size) for e in MetadataFileListing(storage).file_entries()) == hudi_listing
    mine, theirs = both_readers(str(path))
    assert mine == theirs == rows_before
    assert posixpath.basename(result.base_file).startswith("files-0000-0_")


@pytest.mark.parametrize("version", [6, 9])
def test_a_writer_with_the_metadata_table_enabled_builds_it_before_its_first_commit(tmp_path: Path, version: int):
    path = tmp_path / "t"
    model = _write_table(str(path), version, "MERGE_ON_READ")
    Table.open(str(path), options={"hoodie.metadata.enable": "false"}).upsert(_batch({"k30": ("p1", 4, 30)}))
    assert not (path / ".hoodie" / "metadata").exists()  # `false` (or unset) creates none
    model |= {"k30": ("p1", 4, 30)}
    table = Table.open(str(path), options={"hoodie.metadata.enable": "true"})
    result = table.upsert(_batch({"k31": ("p2", 4, 31)}))
    model |= {"k31": ("p2", 4, 31)}
    props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    assert any(i.time == result.instant_time for i in table.timeline().completed())
    listed = {e.path for e in MetadataFileListing(Table.open(str(path)).storage).file_entries()}
    assert {p for p, _ in _data_files(table.storage)} == listed
    mine, theirs = both_readers(str(path))
    assert _rows_of(mine) == _rows_of(theirs) == _model_rows(model)
