"""Tables written without meta fields (`hoodie.populate.meta.fields=false`, Hudi's virtual keys).

lakeward writes them as Apache Hudi 1.x does: the five `_hoodie_*` columns are in every base
file but null, except `_hoodie_file_name`; footers carry no bloom filter and no key range
(`HoodieFileWriterFactory.enableBloomFilter` is false without meta fields); record keys and
partition paths are computed from the key generator's fields wherever stored rows are read
(index lookups, merges, compaction, clustering). What Hudi refuses is refused.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import ConfigError, Table
from lakeward.core.index.bloom_filter import BLOOM_FILTER_FOOTER_KEY, MIN_RECORD_KEY_FOOTER_KEY
from lakeward.core.schema import META_COLUMNS, VIRTUAL_META_COLUMNS

VIRTUAL = {"hoodie.populate.meta.fields": "false"}
#: New keys go to new file groups, so that clustering and compaction have several groups.
OPTIONS = {**VIRTUAL, "hoodie.parquet.small.file.limit": "0"}
FIXTURE = ("cow", "v8_simplekeygen_hivestyle_no_metafields")

Model = dict[tuple[int, str], dict[str, object]]


def _batch(rows: list[dict[str, object]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "region": pa.array([r["region"] for r in rows], pa.string()),
            "ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "value": pa.array([r["value"] for r in rows], pa.string()),
        }
    )


def _rows(table: pa.Table) -> list[dict[str, object]]:
    data = table.select(["id", "region", "ts", "value"])
    return sorted(data.to_pylist(), key=lambda r: (r["region"], r["id"]))


def _expected(model: Model) -> list[dict[str, object]]:
    return sorted(model.values(), key=lambda r: (r["region"], r["id"]))


def _base_files(path: str) -> list[Path]:
    return [p for p in Path(path).rglob("*.parquet") if ".hoodie" not in p.parts]


def _assert_stored_without_meta(path: str) -> None:
    """Every base file: meta columns present, null but `_hoodie_file_name`; no bloom filter nor key range."""
    files = _base_files(path)
    assert files
    for file in files:
        parquet = pq.ParquetFile(file)
        footer = {k.decode() for k in (parquet.metadata.metadata or {})}
        assert BLOOM_FILTER_FOOTER_KEY not in footer and MIN_RECORD_KEY_FOOTER_KEY not in footer, file
        rows = parquet.read()
        assert rows.column_names[:5] == list(META_COLUMNS)
        for name in VIRTUAL_META_COLUMNS:
            assert rows.column(name).null_count == rows.num_rows, (file, name)
        assert set(rows.column("_hoodie_file_name").to_pylist()) <= {file.name, *(f.name for f in files)}
        assert rows.column("_hoodie_file_name").null_count == 0


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8, 9])
def test_virtual_key_table_writes_and_services_read_as_the_model(tmp_path: Path, version: int, table_type: str) -> None:
    rng = random.Random(version * 10 + len(table_type))
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="id",
        partition_by="region",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options=OPTIONS,
    )
    assert not table.config.populate_meta_fields and table.read_only_reason() is None
    model: Model = {}
    states: list[tuple[str, list[dict[str, object]]]] = []
    next_id = 0

    def fresh(n: int, ts: int) -> list[dict[str, object]]:
        nonlocal next_id
        rows = [{"id": next_id + i, "region": rng.choice("ab"), "ts": ts, "value": f"v{ts}"} for i in range(n)]
        next_id += n
        return rows

    def record(instant: str) -> None:
        assert _rows(Table.open(path).read()) == _expected(model), f"after {instant}"
        states.append((instant, _expected(model)))

    for step in range(1, 7):
        op = ["insert", "bulk_insert", "upsert", "upsert", "delete", "upsert"][step - 1]
        if op in ("insert", "bulk_insert"):
            rows = fresh(rng.randint(5, 12), step)
            result = getattr(table, op)(_batch(rows))
        elif op == "upsert":
            existing = rng.sample(sorted(model.values(), key=lambda r: r["id"]), k=min(4, len(model)))
            rows = [{**r, "ts": step, "value": f"u{step}"} for r in existing] + fresh(3, step)
            result = table.upsert(_batch(rows))
        else:
            rows = rng.sample(sorted(model.values(), key=lambda r: r["id"]), k=min(3, len(model)))
            result = table.delete(_batch(rows))
            for r in rows:
                del model[(r["id"], r["region"])]  # type: ignore[index]
            rows = []
        for r in rows:
            model[(r["id"], r["region"])] = r  # type: ignore[index]
        record(result.instant_time)

    if table_type == "MERGE_ON_READ":
        assert any(p.name.startswith(".") and ".log." in p.name for p in Path(path).rglob("*")), "logs were written"
        instant = table.schedule_compaction(force=True)
        assert instant is not None
        table.run_compaction(instant)
    else:
        instant = table.schedule_clustering()
        assert instant is not None
        table.run_clustering(instant)
    record(instant)
    # an upsert after the service finds the keys in the rewritten files (no duplicates)
    again = [{**r, "ts": 99, "value": "after"} for r in sorted(model.values(), key=lambda r: r["id"])[:3]]
    for r in again:
        model[(r["id"], r["region"])] = r  # type: ignore[index]
    record(table.upsert(_batch(again)).instant_time)
    table.clean()

    _assert_stored_without_meta(path)
    reopened = Table.open(path)
    for instant_time, rows in states:
        assert _rows(reopened.read(as_of=instant_time)) == rows, f"time travel to {instant_time}"
    assert not any(c.startswith("_hoodie") for c in reopened.read().column_names)


def test_virtual_keys_with_a_composite_key_on_copy_on_write(tmp_path: Path) -> None:
    path = str(tmp_path / "t")
    table = Table.create(path, record_key=["id", "region"], partition_by="region", ordering_field="ts", options=VIRTUAL)
    table.insert(
        _batch([{"id": 1, "region": "a", "ts": 1, "value": "x"}, {"id": 1, "region": "b", "ts": 1, "value": "y"}])
    )
    table.upsert(_batch([{"id": 1, "region": "b", "ts": 2, "value": "z"}]))
    table.delete(_batch([{"id": 1, "region": "a", "ts": 3, "value": "x"}]))
    assert _rows(Table.open(path).read()) == [{"id": 1, "region": "b", "ts": 2, "value": "z"}]
    _assert_stored_without_meta(path)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_filter_on_a_meta_column_of_a_virtual_key_table_is_refused(tmp_path: Path, table_type: str) -> None:
    """The `_hoodie_*` columns store nothing here (reads drop them): a filter on `_hoodie_record_key`
    matched the stored nulls of base-only files and the computed keys of merged slices, so its rows
    depended on the file layout. Refused, as hudi-rs refuses it; the key fields filter instead."""
    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="region", ordering_field="ts", table_type=table_type, options=VIRTUAL
    )
    table.upsert(
        _batch([{"id": 1, "region": "a", "ts": 1, "value": "x"}, {"id": 2, "region": "a", "ts": 1, "value": "y"}])
    )
    table.upsert(_batch([{"id": 1, "region": "a", "ts": 2, "value": "z"}]))
    for column, value in (("_hoodie_record_key", "1"), ("_hoodie_partition_path", "a")):
        with pytest.raises(ConfigError, match=column):
            Table.open(path).read(filters=[(column, "=", value)])
    assert _rows(Table.open(path).read(filters=[("id", "=", 1)])) == [{"id": 1, "region": "a", "ts": 2, "value": "z"}]


def test_what_hudi_refuses_on_virtual_key_tables_is_refused(tmp_path: Path) -> None:
    # merge-on-read merges log records by one key field: Hudi allows the simple key generator only
    with pytest.raises(ConfigError, match=r"MERGE_ON_READ table needs the simple key generator"):
        Table.create(str(tmp_path / "mor"), record_key=["id", "region"], table_type="MERGE_ON_READ", options=VIRTUAL)
    assert not (tmp_path / "mor" / ".hoodie" / "hoodie.properties").exists()
    # change data capture needs the stored meta fields
    with pytest.raises(ConfigError, match=r"hoodie.populate.meta.fields=false"):
        Table.create(str(tmp_path / "cdc"), record_key="id", options={**VIRTUAL, "hoodie.table.cdc.enabled": "true"})
    assert not (tmp_path / "cdc" / ".hoodie" / "hoodie.properties").exists()
    # secondary indexes map values to the stored record keys, which stay null
    table = Table.create(str(tmp_path / "idx"), record_key="id", options=VIRTUAL)
    table.insert(_batch([{"id": 1, "region": "a", "ts": 1, "value": "x"}]))
    with pytest.raises(ConfigError, match=r"secondary indexes need the stored record keys"):
        table.create_index("by_value", "value")
    assert table.indexes() == []


def test_hudi_written_virtual_key_fixture_is_written_and_served(fixture_table: Callable[[str, str], str]) -> None:
    """The Hudi 1.x fixture without meta fields: upsert, delete and clean work, and the daemon serves it."""
    path = fixture_table(*FIXTURE)
    table = Table.open(path)
    assert table.read_only_reason() is None
    rows = table.read().sort_by("id")
    changed = rows.slice(0, 1)
    changed = changed.set_column(changed.schema.get_field_index("name"), "name", pa.array(["Zed"]))
    changed = changed.set_column(
        changed.schema.get_field_index("longField"), "longField", pa.array([changed.column("longField")[0].as_py() + 1])
    )
    table.upsert(changed)
    table.delete(rows.slice(1, 1))
    after = Table.open(path).read().sort_by("id")
    assert after.num_rows == rows.num_rows - 1
    assert after.column("name").to_pylist()[0] == "Zed"
    assert rows.column("id")[1].as_py() not in after.column("id").to_pylist()
    table.clean()
    for file in _base_files(path):  # Hudi's files and lakeward's alike
        stored = pq.read_table(file)
        assert all(stored.column(name).null_count == stored.num_rows for name in VIRTUAL_META_COLUMNS), file


def test_savepoint_restore_rollback_archive_and_upgrade_on_a_virtual_key_table(tmp_path: Path) -> None:
    """The other services: savepoint and restore, rollback of the latest write, archival, and
    the upgrade of a merge-on-read table (which compacts its logs first) to version 9."""
    path = str(tmp_path / "t")
    # the metadata table is compacted only before the archival (which waits for its compaction): a rollback
    # of a write whose metadata delta commit a compaction already took is refused, as Hudi refuses it
    options = {
        **OPTIONS,
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.metadata.compact.max.delta.commits": "1000",
    }
    table = Table.create(
        path, record_key="id", partition_by="region", ordering_field="ts", table_type="MERGE_ON_READ", options=options
    )
    first = [{"id": i, "region": "ab"[i % 2], "ts": 1, "value": "v1"} for i in range(6)]
    saved = table.insert(_batch(first)).instant_time
    table.savepoint(saved)
    table.upsert(_batch([{**first[0], "ts": 2, "value": "v2"}]))
    table.restore(saved)
    assert _rows(Table.open(path).read()) == sorted(first, key=lambda r: (r["region"], r["id"]))
    table.delete_savepoint(saved)
    model = {r["id"]: r for r in first}
    for ts in range(3, 8):
        row = {**first[ts % 6], "ts": ts, "value": f"v{ts}"}
        table.upsert(_batch([row]))
        model[row["id"]] = row
    latest = table.upsert(_batch([{**first[1], "ts": 9, "value": "undone"}])).instant_time
    table.rollback(latest)
    table.clean()
    planned = table.services["metadata_compaction"].schedule(force=True)
    assert planned is not None
    table.services["metadata_compaction"].execute(planned)  # the archival stays behind its last compaction
    table.archive()
    assert _rows(Table.open(path).read()) == sorted(model.values(), key=lambda r: (r["region"], r["id"]))
    assert (Path(path) / ".hoodie" / "archived").exists() and any((Path(path) / ".hoodie" / "archived").iterdir())
    table.upgrade(to=9)
    upgraded = Table.open(path)
    assert upgraded.version.number == 9 and not upgraded.config.populate_meta_fields
    assert _rows(upgraded.read()) == sorted(model.values(), key=lambda r: (r["region"], r["id"]))
    upgraded.upsert(_batch([{**first[2], "ts": 20, "value": "v9"}]))
    model[first[2]["id"]] = {**first[2], "ts": 20, "value": "v9"}
    assert _rows(Table.open(path).read()) == sorted(model.values(), key=lambda r: (r["region"], r["id"]))
    _assert_stored_without_meta(path)


@pytest.mark.parametrize(("created", "option"), [("false", "true"), ("true", "false")])
def test_opening_with_a_populate_meta_fields_other_than_the_tables_is_refused(
    tmp_path: Path, created: str, option: str
) -> None:
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", options={"hoodie.populate.meta.fields": created})
    with pytest.raises(ConfigError, match=rf"hoodie.populate.meta.fields={option} in the options.*={created}"):
        Table.open(path, options={"hoodie.populate.meta.fields": option})
    # the table's own value is accepted, and so is no value at all
    table = Table.open(path, options={"hoodie.populate.meta.fields": created})
    table.insert(_batch([{"id": 1, "region": "a", "ts": 1, "value": "x"}]))
    assert _rows(Table.open(path).read()) == [{"id": 1, "region": "a", "ts": 1, "value": "x"}]
