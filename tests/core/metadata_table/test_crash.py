"""A writer killed (SIGKILL) between its metadata-table commit and its data-table commit: the next
writer repairs both tables the way Hudi does (version 6 as Hudi 0.x, 9 as Hudi 1.x).

The data instant `T` never completed, so the next writer rolls it back; that rollback rolls back
the metadata table's delta commit `T` too (pending or completed) with a metadata rollback of the
same time. Afterwards `files` matches storage, both readers give the rows without the killed
write, and the metadata table holds no trace of `T`.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.file_group.metadata_listing import load_metadata_timeline, metadata_storage
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.timeline import Action, Timeline
from tests.core.metadata_table.test_writes import check_metadata_table
from tests.support import crash

pytestmark = pytest.mark.slow
SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])


def _rows(ids: range, ts: int) -> list[dict[str, object]]:
    return [{"id": f"k{i:03d}", "part": f"p{i % 3}", "ts": ts, "val": ts * 1000 + i} for i in ids]


def _mdt_timeline(path: str) -> Timeline:
    return load_metadata_timeline(metadata_storage(Table.open(path).storage))


#: Kill points: (what happens first, the point the writer dies at). The last one kills the first
#: repair too, after it rolled back the metadata table and before its data-table rollback completed.
POINTS = {
    "mdt_requested": ["mdt_requested"],
    "mdt_log_written": ["mdt_log_written"],
    "mdt_completed": ["before_complete"],
    "repair_killed_after_mdt_rollback": ["before_complete", "rollback_mdt_rolled_back"],
}


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("case", sorted(POINTS))
def test_killed_between_the_two_commits_is_repaired_by_the_next_writer(
    tmp_path: Path, case: str, table_type: str, version: int
):
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    model = {r["id"]: r for r in _rows(range(30), 1)}
    table.insert(pa.Table.from_pylist(list(model.values()), schema=SCHEMA))
    table.initialize_metadata_table()

    batch_file = tmp_path / "crash.parquet"
    pq.write_table(pa.Table.from_pylist(_rows(range(0, 40, 2), 2), schema=SCHEMA), batch_file)
    first, *then = POINTS[case]
    crash.run_and_kill("crash_writer.py", path, first, str(batch_file))
    [killed] = [i.time for i in Table.open(path).timeline().pending()]
    assert any(i.time == killed for i in _mdt_timeline(path).instants)
    for point in then:
        crash.run_and_kill("crash_writer.py", path, point, str(batch_file))
    # before any repair the check sees the table as readers do: the killed write's files are not
    # committed, on storage or in `files` (whose delta commit may have completed before the write)
    before = compare_files_partition(Table.open(path).storage)
    assert before.ok, before

    repair = _rows(range(1, 40, 5), 3)
    result = Table.open(path).upsert(pa.Table.from_pylist(repair, schema=SCHEMA))
    model |= {r["id"]: r for r in repair}
    check_metadata_table(path, result.instant_time, list(model.values()))
    mdt = _mdt_timeline(path)
    assert not [i for i in mdt.instants if i.time == killed and i.action is Action.DELTA_COMMIT]
    assert not mdt.pending()
    data_rollbacks = {i.time for i in Table.open(path).timeline().completed(Action.ROLLBACK)}
    mdt_rollbacks = {i.time for i in mdt.completed(Action.ROLLBACK)}
    assert len(data_rollbacks) == 1 and mdt_rollbacks == data_rollbacks  # the same rollback time on both
    assert compare_files_partition(Table.open(path).storage).ok


def test_compaction_killed_after_its_metadata_commit_is_finished_by_a_rerun(tmp_path: Path):
    """Killed with the metadata delta commit `P` completed and the compaction `P` not: the rerun rolls
    back the metadata delta commit of the earlier attempt and commits `P` again (Hudi's re-attempt rule)."""
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ", table_version=9
    )
    model = {r["id"]: r for r in _rows(range(30), 1)}
    table.insert(pa.Table.from_pylist(list(model.values()), schema=SCHEMA))
    table.initialize_metadata_table()
    updates = _rows(range(0, 30, 4), 2)
    Table.open(path).upsert(pa.Table.from_pylist(updates, schema=SCHEMA))
    model |= {r["id"]: r for r in updates}
    compaction = Table.open(path).schedule_compaction(force=True)
    assert compaction is not None
    crash.run_and_kill("crash_compactor.py", path, "before_complete", compaction)
    assert compaction in {i.time for i in _mdt_timeline(path).completed(Action.DELTA_COMMIT)}
    # its files are listed, the compaction pending: the check, as readers, leaves them out
    assert compare_files_partition(Table.open(path).storage).ok

    Table.open(path).run_compaction(compaction)
    check_metadata_table(path, compaction, list(model.values()))
    assert len(_mdt_timeline(path).completed(Action.ROLLBACK)) == 1  # the earlier attempt's metadata commit
