"""Change data capture and secondary indexes on Hudi 1.x tables (versions 8 and 9) lakeward writes.

CDC logging (copy-on-write rewrites and compactions write `.cdc` files; their `cdcStats` go
into the Avro commit metadata of the version), the change-tracking service (merge-on-read)
and secondary-index builds run on v8/v9 tables, with the metadata table their writes build by
default (`hoodie.metadata.enable`). Their instants follow the version's timeline layout
(`.hoodie/timeline/<t>_<c>.<action>`; nothing in
`.hoodie/` itself), archival moves them into the LSM history like every other instant,
CDC ranges are in completion time, and hudi-rs, which skips `changetracking` and
`indexing` instants and `.cdc` files, reads every state of the table to lakeward's rows.
Change tracking and index builds SIGKILLed mid-run and re-run neither lose nor duplicate.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.timeline import Action
from tests.interop.compare import fail_on
from tests.support import crash
from tests.support.change_model import ChangeModel, read_as_changes
from tests.support.hudi_rs_states import readable_mismatches

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])
# merge-on-read archival keeps the delta commits a compaction counts (Hudi's rule): 2 of them
ARCHIVE = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.compact.inline.max.delta.commits": "2",
}
INSTANT_FILE = re.compile(r"^\d{17}")


class Scenario:
    """A CDC-enabled table of one version and type, with a change model of its writes."""

    def __init__(self, path: Path, version: int, table_type: str):
        self.path = str(path)
        self.table = Table.create(
            self.path,
            record_key="id",
            partition_by="part",
            ordering_field="ts",
            table_type=table_type,
            table_version=version,
            options={"hoodie.table.cdc.enabled": "true", "hoodie.parquet.small.file.limit": "0", **ARCHIVE},
        )
        self.model = ChangeModel("id", "part")
        self.instants: list[str] = []
        self.ts = 0

    def upsert(self, values: dict[str, int]) -> str:
        self.ts += 1
        rows = [{"id": k, "part": "p1" if k < "m" else "p2", "ts": self.ts, "val": v} for k, v in values.items()]
        instant = self.table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA)).instant_time
        self.model.upsert(instant, rows)
        self.instants.append(instant)
        return instant

    def delete(self, keys: list[str]) -> str:
        instant = self.table.delete(keys=keys).instant_time
        self.model.delete(instant, keys)
        self.instants.append(instant)
        return instant

    def changes(self, begin: str, end: str | None = None) -> list[tuple[object, ...]]:
        """lakeward's CDC read of (begin, end] as the model's tuples."""
        got = Table.open(self.path).read_changes(begin, end, images="struct")
        return read_as_changes(self.table, got.to_pylist(), "id")

    def completion(self, instant: str) -> str:
        found = [i for i in Table.open(self.path).timeline().completed() if i.time == instant]
        assert found and found[0].completion_time, f"{instant} completed with a completion time"
        return found[0].completion_time


def _writes(s: Scenario) -> None:
    s.upsert({"a": 1, "b": 2, "x": 3})
    s.upsert({"a": 10, "y": 4})
    s.delete(["b"])
    s.upsert({"x": 30, "c": 5})


def _assert_layout_2(path: str) -> None:
    """Every instant file is in `.hoodie/timeline/`, completed ones named `<t>_<c>.<action>`."""
    root = Path(path) / ".hoodie"
    assert not [p.name for p in root.iterdir() if p.is_file() and INSTANT_FILE.match(p.name)]
    completed = [p.name for p in (root / "timeline").iterdir() if p.is_file() and "." in p.name]
    assert all(re.match(r"^\d{17}(_\d{17}\.\w+|\.\w+\.(requested|inflight)|\.inflight)$", n) for n in completed)


def _cdc_stats(path: str, instant: str) -> dict[str, int]:
    """`cdcStats` of every write stat in the Avro commit metadata of completed `instant`."""
    (completed,) = (Path(path) / ".hoodie" / "timeline").glob(f"{instant}_*.commit")
    data = completed.read_bytes()
    assert data.startswith(b"Obj\x01"), "Hudi 1.x commit metadata is an Avro container"
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.writer_schema["name"].endswith("HoodieCommitMetadata")
    (record,) = list(reader)
    out: dict[str, int] = {}
    for stats in record["partitionToWriteStats"].values():
        for stat in stats:
            out |= stat.get("cdcStats") or {}
    return out


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_cdc_change_tracking_and_indexes_on_v8_v9(tmp_path: Path, version: int, table_type: str) -> None:
    s = Scenario(tmp_path / "t", version, table_type)
    _writes(s)
    if table_type == "COPY_ON_WRITE":
        stats = _cdc_stats(s.path, s.instants[1])
        assert stats and all(Path(s.path, p).stat().st_size == size for p, size in stats.items()), stats
        assert all(p.endswith(".cdc") for p in stats)
    else:
        tracking = s.table.schedule_change_tracking()
        assert tracking is not None
        result = s.table.run_change_tracking(tracking)
        assert result.files_written and all(f.endswith(".cdc") for f in result.files_written)
        assert list((Path(s.path) / ".hoodie" / "timeline").glob(f"{tracking}_*.changetracking"))
        compaction = s.table.schedule_compaction(force=True)
        assert compaction is not None
        s.table.run_compaction(compaction)
    s.table.create_index("by_val", "val")
    build = s.table.build_indexes()
    assert build is not None
    assert list((Path(s.path) / ".hoodie" / "timeline").glob(f"{build.instant_time}_*.indexing"))
    assert s.table.explain([("val", "=", 30)]).uses_index
    assert s.table.read(filters=[("val", "=", 30)]).column("id").to_pylist() == ["x"]
    _assert_layout_2(s.path)

    assert s.changes("earliest") == s.model.changes("", None)
    # Ranges are in completion time: (completion of write k, ...] holds the writes after k.
    for k, instant in enumerate(s.instants[:-1]):
        assert s.changes(s.completion(instant)) == s.model.changes(instant, None), k
        assert s.changes(s.completion(instant), s.completion(s.instants[k + 1])) == s.model.changes(
            instant, s.instants[k + 1]
        )
    fail_on(readable_mismatches(s.path))

    for value in (100, 101, 102):  # later writes to p1: the index build and the change tracking are old now
        s.upsert({"a": value})
    archived = Table.open(s.path, options=ARCHIVE).archive()
    archived_actions = {name.split(".")[1] for name in archived.archived}
    expected_actions = {"indexing", "changetracking"} if table_type == "MERGE_ON_READ" else {"indexing"}
    assert expected_actions <= archived_actions, archived.archived
    assert archived.archive_file is not None and archived.archive_file.startswith(".hoodie/timeline/history/")
    reopened = Table.open(s.path)
    assert reopened.explain([("val", "=", 30)]).uses_index, "an archived index build still counts"
    # Hudi 1.x reads incremental and CDC ranges into the archived timeline; so does lakeward.
    assert s.changes("earliest") == s.model.changes("", None)
    s.upsert({"a": 103})
    assert s.changes(s.completion(s.instants[-2])) == s.model.changes(s.instants[-2], None)
    _assert_layout_2(s.path)
    fail_on(readable_mismatches(s.path))


@pytest.mark.parametrize("point", ["after_inflight", "before_complete"])
@pytest.mark.parametrize("service", ["change_tracking", "index_build"])
def test_change_tracking_and_index_builds_on_v9_killed_and_rerun(tmp_path: Path, service: str, point: str) -> None:
    s = Scenario(tmp_path / "t", 9, "MERGE_ON_READ")
    _writes(s)
    if service == "change_tracking":
        instant = s.table.schedule_change_tracking()
    else:
        s.table.create_index("by_val", "val")
        compaction = s.table.schedule_compaction(force=True)
        assert compaction is not None
        s.table.run_compaction(compaction)
        instant = s.table.schedule_index_build()
    assert instant is not None
    crash.run_and_kill("crash_service.py", s.path, point, service, instant)
    timeline = Table.open(s.path).timeline()
    action = Action.CHANGE_TRACKING if service == "change_tracking" else Action.INDEXING
    assert [i.time for i in timeline.pending(action)] == [instant], "the killed run left its instant pending"
    getattr(Table.open(s.path).services, service).execute(instant)
    timeline = Table.open(s.path).timeline()
    assert [i.time for i in timeline.completed(action)] == [instant] and not timeline.pending(action)
    if service == "change_tracking":
        cdc_files = sorted(p.name for p in Path(s.path).rglob("*.cdc"))
        assert len(cdc_files) == len(set(cdc_files))
        assert all(n.count(".log.") == 1 for n in cdc_files)
    else:
        assert Table.open(s.path).explain([("val", "=", 30)]).uses_index
        assert Table.open(s.path).index_status().missing() == []
    assert s.changes("earliest") == s.model.changes("", None)
    _assert_layout_2(s.path)
    fail_on(readable_mismatches(s.path))
