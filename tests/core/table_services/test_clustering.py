"""Clustering: plan (`<t>.replacecommit.requested`), execution (`<t>.replacecommit`), writers
against a pending plan, crash recovery, and the Spark engine. hudi-rs is the oracle reader;
expected rows come from the input batches.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.config.write import parse_write_config
from lakeward.core.exceptions import ConcurrentWriteError, ConfigError, InstantExistsError, MissingFileError
from lakeward.core.file_group.file_group import BaseFile, FileSlice
from lakeward.core.table import Table
from lakeward.core.table_services.clustering import plan_groups
from lakeward.core.timeline import Action, State
from tests.core.table_services.compaction_helpers import tree_digest
from tests.interop.test_hudi_rs_mor_writes import hudi_read
from tests.support import crash
from tests.support.fixture_tables import shared_dir

FIXTURE_SCHEMA = (
    shared_dir() / "reference/hudi-avro/as-written-by-real-hudi-v6/HoodieRequestedReplaceMetadata.fixture.avsc.json"
)
Expected = dict[tuple[str, int], tuple[int, float]]


def batch(ids: list[int], city: str, ts: int = 1, bump: float = 0.0) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "city": [city] * len(ids),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "v": [float(i) + bump for i in ids],
        }
    )


def loaded(
    path: Path, table_type: str = "COPY_ON_WRITE", options: dict[str, Any] | None = None
) -> tuple[Table, Expected]:
    """Three small file groups in each of two partitions (six bulk inserts); on MOR one slice gets a log."""
    t = Table.create(
        str(path), record_key="id", partition_by="city", ordering_field="ts", table_type=table_type, options=options
    )
    expected: Expected = {}
    for i in range(3):
        for city in ("sf", "la"):
            ids = list(range(i * 10, i * 10 + 10))
            t.bulk_insert(batch(ids, city))
            expected.update({(city, k): (1, float(k)) for k in ids})
    t.upsert(batch([1, 2], "sf", ts=2, bump=100.0))
    expected.update({("sf", k): (2, float(k) + 100.0) for k in (1, 2)})
    return t, expected


def rows_of(data: pa.Table | list[pa.RecordBatch]) -> Expected:
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches(data)
    return {(r["city"], r["id"]): (r["ts"], r["v"]) for r in table.select(["city", "id", "ts", "v"]).to_pylist()}


def assert_both_readers(t: Table, expected: Expected) -> None:
    ours = t.read()
    assert ours.num_rows == len(expected)
    assert rows_of(ours) == expected
    theirs = hudi_read(t.path)
    assert sum(b.num_rows for b in theirs) == len(expected)
    assert rows_of(theirs) == expected


def commit_times(t: Table) -> dict[str, str]:
    data = t.read(columns=["_hoodie_record_key", "_hoodie_commit_time", "_hoodie_commit_seqno"])
    return {r["_hoodie_record_key"]: (r["_hoodie_commit_time"], r["_hoodie_commit_seqno"]) for r in data.to_pylist()}


def groups_of(t: Table) -> set[tuple[str, str]]:
    return {(s.partition_path, s.file_id) for s in t.file_slices()}


# -- inline ----------------------------------------------------------------------------------
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_inline_clustering_runs_after_every_max_commits_writes(tmp_path: Path, table_type: str) -> None:
    """`hoodie.clustering.inline`: once `hoodie.clustering.inline.max.commits` writes completed since
    the last clustering, the write that made it due plans and runs one, as Hudi's writers do."""
    t = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        options={"hoodie.clustering.inline": "true", "hoodie.clustering.inline.max.commits": "3"},
    )
    expected: Expected = {}

    def clusterings() -> list[str]:
        return [i.time for i in t.timeline().completed(Action.REPLACE_COMMIT)]

    for i in range(3):
        t.bulk_insert(batch(list(range(i * 10, i * 10 + 10)), "sf"))
        expected.update({("sf", k): (1, float(k)) for k in range(i * 10, i * 10 + 10)})
        assert len(clusterings()) == (1 if i == 2 else 0)
    assert len(groups_of(t)) == 1, "the three small file groups were clustered into one"
    assert_both_readers(t, expected)
    for i in range(3, 5):
        t.bulk_insert(batch(list(range(i * 10, i * 10 + 10)), "sf"))
        expected.update({("sf", k): (1, float(k)) for k in range(i * 10, i * 10 + 10)})
    assert len(clusterings()) == 1, "two writes since the last clustering: not due yet"
    assert_both_readers(t, expected)


def test_inline_clustering_options_are_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hoodie.clustering.inline.max.commits"):
        Table.create(str(tmp_path / "t"), record_key="id", options={"hoodie.clustering.inline.max.commits": "0"})


# -- plan ------------------------------------------------------------------------------------
def test_plan_content_decodes_with_fastavro_and_hudis_schema(tmp_path: Path) -> None:
    t, _ = loaded(tmp_path / "t")
    before = groups_of(t)
    instant = t.schedule_clustering()
    assert instant is not None and t.pending_clustering() == [instant]
    raw = (Path(t.path) / ".hoodie" / f"{instant}.replacecommit.requested").read_bytes()
    (record,) = list(fastavro.reader(io.BytesIO(raw)))
    assert record["operationType"] == "CLUSTER"
    plan = record["clusteringPlan"]
    assert plan["preserveHoodieMetadata"] is True
    assert plan["strategy"]["strategyClassName"].endswith("SparkSortAndSizeExecutionStrategy")
    groups = plan["inputGroups"]
    assert len(groups) == 2 and all(g["numOutputFileGroups"] == 1 for g in groups)
    planned = {(s["partitionPath"], s["fileId"]) for g in groups for s in g["slices"]}
    assert planned == before
    for g in groups:
        for s in g["slices"]:
            assert s["dataFilePath"].startswith(t.path) and s["dataFilePath"].endswith(".parquet")
            assert Path(s["dataFilePath"]).exists()
    # Hudi's own schema (as Hudi 0.14 writes it) reads the plan as well.
    hudi_schema = fastavro.parse_schema(json.loads(FIXTURE_SCHEMA.read_text()))
    (again,) = list(fastavro.reader(io.BytesIO(raw), reader_schema=hudi_schema))
    assert again["clusteringPlan"]["inputGroups"][0]["slices"] == groups[0]["slices"]
    # Planned groups are not planned again.
    assert t.schedule_clustering() is None


def _slices(partition: str, sizes: list[int]) -> list[FileSlice]:
    return [
        FileSlice(
            partition, f"f{i}-0", "20240101000000000", BaseFile(f"{partition}/f{i}.parquet", f"f{i}-0", "1", size)
        )
        for i, size in enumerate(sizes)
    ]


def test_grouping_by_size_and_limits() -> None:
    wc = parse_write_config(
        {
            "hoodie.clustering.plan.strategy.small.file.limit": 100,
            "hoodie.clustering.plan.strategy.max.bytes.per.group": 200,
            "hoodie.clustering.plan.strategy.target.file.max.bytes": 80,
        }
    )
    # 150 is not small; the others pack largest first into groups of at most 200 bytes.
    groups = plan_groups(_slices("a", [90, 150, 60, 50, 40, 30]), wc)
    assert [[op.file_id for op in g.slices] for g in groups] == [["f0-0", "f2-0", "f3-0"], ["f4-0", "f5-0"]]
    assert [g.num_output_file_groups for g in groups] == [3, 1]  # ceil(200/80), ceil(70/80)
    # A lone small file is not rewritten (unless sorting), and max.num.groups caps the plan.
    assert plan_groups(_slices("a", [10]), wc) == []
    assert len(plan_groups(_slices("a", [10]), wc, ("v",))) == 1
    many = parse_write_config({"hoodie.clustering.plan.strategy.max.num.groups": 2})
    parts = [s for p in ("a", "b", "c") for s in _slices(p, [5, 5])]
    assert [g.partition_path for g in plan_groups(parts, many)] == ["a", "b"]
    # Defaults are Hudi's.
    d = parse_write_config({})
    assert (d.clustering_small_file_limit, d.clustering_target_file_max_bytes, d.clustering_max_num_groups) == (
        300 * 1024 * 1024,
        1024 * 1024 * 1024,
        30,
    )


# -- execution -------------------------------------------------------------------------------
@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_clustering_replaces_groups_for_both_readers(tmp_path: Path, table_type: str) -> None:
    t, expected = loaded(tmp_path / "t", table_type)
    if table_type == "MERGE_ON_READ":
        assert any(s.log_files for s in t.file_slices()), "the upsert went to a log file"
    before_groups = groups_of(t)
    before_times = commit_times(t)
    last_before = t.timeline().completed_writes()[-1].time
    instant = t.schedule_clustering()
    assert instant is not None
    result = t.run_clustering(instant)
    assert (result.groups, result.file_groups_replaced, result.records_written) == (2, 6, 60)

    after = groups_of(t)
    assert len(after) == 2 and not after & before_groups
    assert all(s.base_file is not None and s.base_file.instant_time == instant for s in t.file_slices())
    assert all(not s.log_files for s in t.file_slices())
    assert_both_readers(t, expected)
    assert commit_times(t) == before_times, "clustering preserves commit times and sequence numbers"
    meta = json.loads((Path(t.path) / ".hoodie" / f"{instant}.replacecommit").read_text())
    assert meta["operationType"] == "CLUSTER"
    assert {(p, f) for p, ids in meta["partitionToReplaceFileIds"].items() for f in ids} == before_groups
    assert sorted(s["path"] for ss in meta["partitionToWriteStats"].values() for s in ss) == sorted(
        result.files_written
    )
    assert not (Path(t.path) / ".hoodie" / ".temp" / instant).exists()
    # Time travel to before the clustering still sees the old file groups, in both readers.
    old = Table.open(t.path)
    assert {(s.partition_path, s.file_id) for s in old.file_slices(as_of=last_before)} == before_groups
    assert rows_of(old.read(as_of=last_before)) == expected
    assert rows_of(hudi_read(t.path, as_of=last_before)) == expected
    with pytest.raises(InstantExistsError):
        t.run_clustering(instant)
    # Writes after the clustering go to the new file groups.
    t.upsert(batch([3], "la", ts=5, bump=7.0))
    expected[("la", 3)] = (5, 10.0)
    assert_both_readers(t, expected)


def test_sort_columns_produce_sorted_files(tmp_path: Path) -> None:
    options = {
        "hoodie.clustering.plan.strategy.sort.columns": "v",
        "hoodie.clustering.plan.strategy.target.file.max.bytes": 4000,
    }
    t, expected = loaded(tmp_path / "t", options=options)
    t.upsert(batch([25, 5], "la", ts=3, bump=-100.0))  # out of order values
    expected.update({("la", 25): (3, -75.0), ("la", 5): (3, -95.0)})
    instant = t.schedule_clustering()
    assert instant is not None
    result = t.run_clustering(instant)
    assert len(result.files_written) > 2, "a target size below the group's size splits its output"
    values = []
    for path in result.files_written:
        v = pq.read_table(Path(t.path) / path, columns=["v"]).column("v").to_pylist()
        assert v == sorted(v)
        values.append(v)
    # The files of one group are consecutive ranges of the sort order.
    by_partition: dict[str, list[list[float]]] = {}
    for path, v in zip(result.files_written, values):
        by_partition.setdefault(path.split("/")[0], []).append(v)
    for chunks in by_partition.values():
        flat = [x for c in sorted(chunks, key=lambda c: c[0]) for x in c]
        assert flat == sorted(flat)
    assert_both_readers(t, expected)


# -- writers against a pending clustering ----------------------------------------------------
def test_update_of_a_clustered_group_is_rejected_and_plan_survives(tmp_path: Path) -> None:
    t, expected = loaded(tmp_path / "t", "MERGE_ON_READ")
    instant = t.schedule_clustering()
    assert instant is not None
    planned = groups_of(t)
    files_before = sorted(p.name for p in Path(t.path).rglob("*") if p.is_file() and ".hoodie" not in p.parts)
    with pytest.raises(ConcurrentWriteError, match=rf"pending clustering {instant}") as err:
        t.upsert(batch([4], "sf", ts=9))
    assert any(fid in str(err.value) for _, fid in planned)
    with pytest.raises(ConcurrentWriteError, match="SparkRejectUpdateStrategy"):
        t.delete(keys=[{"id": 5, "city": "la"}])
    files_after = sorted(p.name for p in Path(t.path).rglob("*") if p.is_file() and ".hoodie" not in p.parts)
    assert files_after == files_before, "the rejected writes left no file behind"
    assert_both_readers(t, expected)
    # Inserts of new keys are fine: they go to a new file group, not to a small file under the plan.
    res = t.insert(batch([100, 101], "sf"))
    expected.update({("sf", 100): (1, 100.0), ("sf", 101): (1, 101.0)})
    new = groups_of(t) - planned
    assert len(new) == 1 and res.num_inserts == 2
    # The next writer did not roll back the pending plan (it is not a failed write).
    assert t.pending_clustering() == [instant]
    assert Table.open(t.path).timeline().state_of(instant, Action.REPLACE_COMMIT) is State.REQUESTED
    t.run_clustering(instant)
    assert t.pending_clustering() == []
    assert new <= groups_of(t)
    assert_both_readers(t, expected)
    t.upsert(batch([4], "sf", ts=9))  # accepted now
    expected[("sf", 4)] = (9, 4.0)
    assert_both_readers(t, expected)


# -- crash recovery ---------------------------------------------------------------------------
def run_and_kill(path: str, point: str, instant: str, timeout: float = 60.0) -> None:
    crash.run_and_kill("crash_clusterer.py", path, point, instant, timeout=timeout)


@pytest.fixture(scope="module")
def crash_template(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Expected, str]:
    path = tmp_path_factory.mktemp("clustering-crash") / "table"
    t, expected = loaded(path, "MERGE_ON_READ")
    instant = t.schedule_clustering()
    assert instant is not None
    return path, expected, instant


@pytest.mark.parametrize("point", ["after_inflight", "after_first_base_file", "marker_without_file", "before_complete"])
def test_clusterer_killed_then_plan_run_again(
    crash_template: tuple[Path, Expected, str], tmp_path: Path, point: str
) -> None:
    source, template_rows, instant = crash_template
    expected = dict(template_rows)
    path = tmp_path / "table"
    shutil.copytree(source, path)
    t = Table.open(str(path))
    groups_before = groups_of(t)
    completed_before = [i.file_name for i in t.timeline().completed()]

    run_and_kill(str(path), point, instant)
    killed = Table.open(str(path))
    assert [i.file_name for i in killed.timeline().completed()] == completed_before
    assert killed.timeline().state_of(instant, Action.REPLACE_COMMIT) is State.INFLIGHT
    assert killed.pending_clustering() == [instant]
    assert groups_of(killed) == groups_before
    assert_both_readers(killed, expected)
    # A writer meanwhile neither rolls the clustering back nor updates its groups.
    killed.insert(batch([200], "la"))
    expected[("la", 200)] = (1, 200.0)
    assert killed.pending_clustering() == [instant]

    result = Table.open(str(path)).run_clustering(instant)
    done = Table.open(str(path))
    assert done.pending_clustering() == []
    written = sorted(str(p.relative_to(path)) for p in path.rglob(f"*_{instant}.parquet") if ".hoodie" not in p.parts)
    assert written == sorted(result.files_written), "leftovers of the killed run are gone"
    assert not groups_of(done) & groups_before
    assert_both_readers(done, expected)


# -- Spark engine ----------------------------------------------------------------------------
@pytest.mark.spark
def test_spark_engine_gives_the_same_rows(tmp_path: Path, spark: Any) -> None:
    from lakeward.core.engine.spark import SparkEngine

    t, expected = loaded(tmp_path / "t", "MERGE_ON_READ", options={"hoodie.clustering.plan.strategy.sort.columns": "v"})
    instant = t.schedule_clustering()
    assert instant is not None
    result = t.run_clustering(instant, engine=SparkEngine(spark))
    assert result.records_written == 60
    assert len(groups_of(t)) == 2
    assert_both_readers(t, expected)
    for path in result.files_written:
        v = pq.read_table(Path(t.path) / path, columns=["v"]).column("v").to_pylist()
        assert v == sorted(v)


@pytest.mark.parametrize("version", [6, 8, 9])
def test_a_pending_clustering_plan_can_be_rolled_back_on_every_version(tmp_path: Path, version: int) -> None:
    """On 8/9 the plan's action is `clustering`, which `rollback` did not count as a write: a plan that
    could not run (or died mid-run) could not be dropped, and writes to its file groups stayed refused."""
    path = str(tmp_path / "t")
    options = {"hoodie.clustering.plan.strategy.sort.columns": "v"}
    table = Table.create(
        path, record_key="id", partition_by="p", ordering_field="ts", table_version=version, options=options
    )
    table.upsert(pa.table({"id": ["a", "b", "c"], "p": ["x"] * 3, "v": [3, 2, 1], "ts": [1] * 3}))
    table.upsert(pa.table({"id": ["d"], "p": ["x"], "v": [0], "ts": [1]}))
    plan = Table.open(path, options=options).schedule_clustering()
    assert plan is not None
    with pytest.raises(ConcurrentWriteError, match="clustering"):
        Table.open(path).upsert(pa.table({"id": ["a"], "p": ["x"], "v": [9], "ts": [2]}))
    Table.open(path).rollback(plan)
    assert Table.open(path).pending_clustering() == []
    Table.open(path).upsert(pa.table({"id": ["a"], "p": ["x"], "v": [9], "ts": [2]}))
    assert sorted((r["id"], r["v"]) for r in Table.open(path).read().to_pylist()) == [
        ("a", 9),
        ("b", 2),
        ("c", 1),
        ("d", 0),
    ]


def test_sort_columns_that_cannot_be_sorted_are_refused_when_scheduling(tmp_path: Path) -> None:
    """A list column as a sort column was planned, and every run of the plan then failed with pyarrow's
    ArrowTypeError: refused at scheduling, naming the column, with no plan written."""
    path = str(tmp_path / "t")
    options = {"hoodie.clustering.plan.strategy.sort.columns": "ls"}
    table = Table.create(path, record_key="id", ordering_field="ts", options=options)
    for i in range(2):
        table.upsert(pa.table({"id": [f"k{i}"], "ls": [[i]], "ts": [1]}))
    with pytest.raises(ConfigError, match="hoodie.clustering.plan.strategy.sort.columns.*'ls'"):
        Table.open(path, options=options).schedule_clustering()
    assert Table.open(path).pending_clustering() == []


def test_a_lost_log_file_stops_scheduling_and_running_a_clustering(tmp_path: Path) -> None:
    """A clustering rewrites its slices from their files: one whose log file is lost would be rewritten
    without that file's rows (the storage listing no longer shows it). Refused before any plan or
    instant, whether the file went before the plan or after it."""
    t, _ = loaded(tmp_path / "t", "MERGE_ON_READ")
    (lost,) = [f.path for s in t.file_slices() for f in s.log_files]
    planned = t.schedule_clustering()
    assert planned is not None
    (Path(t.path) / lost).unlink()
    before = tree_digest(t.path)
    with pytest.raises(MissingFileError, match=Path(lost).name):
        t.run_clustering(planned)
    assert tree_digest(t.path) == before

    u, _ = loaded(tmp_path / "u", "MERGE_ON_READ")
    for s in u.file_slices():
        for f in s.log_files:
            (Path(u.path) / f.path).unlink()
    before = tree_digest(u.path)
    with pytest.raises(MissingFileError):
        u.schedule_clustering()
    assert tree_digest(u.path) == before
