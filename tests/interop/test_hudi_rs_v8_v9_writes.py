"""lakeward writes Hudi 1.x tables (table versions 8 and 9) that hudi-rs reads to the same rows.

A seeded sequence of every write operation (with a writer SIGKILLed before completing, which
the next writer rolls back) on COW and MOR tables lakeward created at version 8 and 9; after
each step lakeward equals a dict model, and hudi-rs equals lakeward for the snapshot, time
travel to every instant and incremental reads between consecutive instants. Also: writes onto
copies of the v8 fixtures (none has a metadata table), the refusal of a table with a metadata
table (nothing changes), and `Table.create(table_version=7|10)` errors.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.exceptions import MetadataTableError, UnsupportedTableVersionError
from lakeward.core.timeline import Timeline
from tests.core.test_crash_recovery import run_and_kill
from tests.interop.compare import all_mismatches, both_readers, fail_on
from tests.support.fixture_tables import with_unmaintained_index

PARTS = ["p1", "p2", "p3"]


def _batch(rows: dict[str, tuple[str, int, int]]) -> pa.Table:
    ids = sorted(rows)
    return pa.table(
        {
            "id": ids,
            "part": [rows[i][0] for i in ids],
            "ts": pa.array([rows[i][1] for i in ids], pa.int64()),
            "val": pa.array([rows[i][2] for i in ids], pa.int64()),
        }
    )


def _lakeward_model(path: str) -> dict[str, tuple[str, int, int]]:
    return {r["id"]: (r["part"], r["ts"], r["val"]) for r in Table.open(path).read().to_pylist()}


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [8, 9])
def test_seeded_writes_on_a_new_table_match_the_model_and_hudi_rs(tmp_path: Path, version: int, table_type: str):
    rng = random.Random(version * 10 + len(table_type))
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    model: dict[str, tuple[str, int, int]] = {}
    next_id = 0

    def fresh(n: int, ts: int) -> dict[str, tuple[str, int, int]]:
        nonlocal next_id
        out = {f"k{next_id + i:03d}": (rng.choice(PARTS), ts, rng.randrange(1000)) for i in range(n)}
        next_id += n
        return out

    steps = ["insert", "upsert", "bulk_insert", "kill", "upsert", "delete", "insert_overwrite", "upsert"]
    steps += ["delete_partition", "insert", "insert_overwrite_table", "upsert"]
    for ts, step in enumerate(steps, start=1):
        if step in ("insert", "bulk_insert"):
            rows = fresh(rng.randrange(3, 8), ts)
            getattr(table, step)(_batch(rows))
            model |= rows
        elif step == "upsert":
            keys = rng.sample(sorted(model), min(3, len(model)))
            rows = {k: (model[k][0], ts, rng.randrange(1000)) for k in keys} | fresh(2, ts)
            table.upsert(_batch(rows))
            model |= rows
        elif step == "delete":
            keys = rng.sample(sorted(model), min(2, len(model)))
            table.delete(_batch({k: model[k] for k in keys}))
            for k in keys:
                del model[k]
        elif step == "insert_overwrite":
            rows = {k: (PARTS[0], ts, v) for k, (_, _, v) in fresh(3, ts).items()}
            table.insert_overwrite(_batch(rows))
            model = {k: r for k, r in model.items() if r[0] != PARTS[0]} | rows
        elif step == "insert_overwrite_table":
            rows = fresh(4, ts)
            table.insert_overwrite_table(_batch(rows))
            model = rows
        elif step == "delete_partition":
            victim = sorted({r[0] for r in model.values()})[0]
            table.delete_partition([victim])
            model = {k: r for k, r in model.items() if r[0] != victim}
        elif step == "kill":
            keys = sorted(model)[:2]
            batch_file = tmp_path / "crash.parquet"
            pq.write_table(_batch({k: (model[k][0], ts, -1) for k in keys} | fresh(2, ts)), batch_file)
            run_and_kill(Path(path), "before_complete", batch_file)
            pending = Timeline.load(table.storage, table.version.timeline_layout).pending()
            assert pending, "the killed write left a pending instant"
        assert _lakeward_model(path) == model, f"after {step}"
        fail_on(all_mismatches(path))
    timeline_dir = Path(path) / ".hoodie" / "timeline"
    rollbacks = sorted(p.name for p in timeline_dir.glob("*_*.rollback"))
    assert len(rollbacks) == 1, "the next writer rolled the killed write back, as a layout-2 rollback instant"
    assert not Timeline.load(table.storage, table.version.timeline_layout).pending()
    assert not list((Path(path) / ".hoodie").glob("*.commit")) and not list(
        (Path(path) / ".hoodie").glob("*.deltacommit")
    )
    if table_type == "MERGE_ON_READ":
        logs = [p.name for p in Path(path).rglob(".*.log.*")]
        assert logs and all(n.split(".log.")[1].startswith("1_") for n in logs), logs


V8_FIXTURES = [
    ("cow", "v8_simplekeygen_nonhivestyle_overwritetable"),
    ("mor/avro", "v8_trips_8i1u"),
    ("mor/avro", "v8_trips_8i3d"),
]


@pytest.mark.parametrize(("kind", "name"), V8_FIXTURES)
def test_upsert_and_delete_on_v8_fixture_copies_match_hudi_rs(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    path = fixture_table(kind, name)
    table = Table.open(path)
    rows = table.read()
    data = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie")])
    ordering = table.config.precombine_field
    assert ordering is not None
    first = data.slice(0, 1)
    bumped = first.set_column(
        first.schema.get_field_index(ordering),
        ordering,
        pa.array([first.column(ordering)[0].as_py() + 1000]).cast(first.schema.field(ordering).type),
    )
    table.upsert(bumped)
    if data.num_rows > 1:
        table.delete(data.slice(1, 1))
    mine, theirs = both_readers(path)
    assert mine == theirs
    assert len(mine) == data.num_rows - (1 if data.num_rows > 1 else 0)
    fail_on(all_mismatches(path))


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize(("kind", "name"), [("cow", "v9_txns_simple_meta"), ("mor/avro", "v9_txns_complex_meta")])
def test_a_table_with_a_metadata_table_refuses_writes_and_changes_nothing(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    # an index partition lakeward neither keeps nor drops (its secondary indexes it drops before writing)
    path = str(with_unmaintained_index(fixture_table(kind, name)))
    before = _hashes(Path(path))
    table = Table.open(path)
    rows = table.read()
    data = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie")])
    for attempt in (lambda: table.upsert(data.slice(0, 1)), lambda: table.delete(data.slice(0, 1))):
        with pytest.raises(MetadataTableError, match=r"hoodie\.metadata\.enable=false.*") as err:
            attempt()
        assert "not supported" in str(err.value) and "Nothing was written" in str(err.value)
    assert _hashes(Path(path)) == before


@pytest.mark.parametrize("version", [7, 10])
def test_create_with_an_unsupported_version_is_a_clear_error(tmp_path: Path, version: int):
    with pytest.raises(UnsupportedTableVersionError, match=f"hoodie.table.version={version}"):
        Table.create(str(tmp_path / "t"), record_key="id", table_version=version)
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("version", [8, 9])
def test_create_writes_the_hudi_1x_properties(tmp_path: Path, version: int):
    path = tmp_path / "t"
    Table.create(str(path), record_key="id", partition_by="p", ordering_field="ts", table_version=version)
    props = dict(
        line.split("=", 1) for line in (path / ".hoodie" / "hoodie.properties").read_text().splitlines() if "=" in line
    )
    assert props["hoodie.table.version"] == props["hoodie.table.initial.version"] == str(version)
    assert props["hoodie.timeline.layout.version"] == "2"
    assert props["hoodie.table.keygenerator.type"] == "SIMPLE" and "hoodie.table.keygenerator.class" not in props
    # With an ordering field, Hudi 1.x's default (and what every v8/v9 fixture with one carries).
    assert props["hoodie.record.merge.mode"] == "EVENT_TIME_ORDERING"
    if version == 8:
        assert props["hoodie.compaction.payload.class"] == "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
        assert props["hoodie.record.merge.strategy.id"] == "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
    ordering_key = "hoodie.table.precombine.field" if version == 8 else "hoodie.table.ordering.fields"
    assert props[ordering_key] == "ts"
    assert (path / ".hoodie" / "timeline" / "history").is_dir()
    assert Table.open(str(path)).version.number == version
