"""Every v8/v9 fixture without a metadata table, changed by lakeward, against a model of the rows.

On a copy of each fixture: upsert (an update and an insert), delete, compact (merge-on-read),
cluster, clean and archive (into the LSM history) with lakeward. The expected rows are the
fixture's own rows as hudi-rs reads them before any change, with the model of lakeward's
changes applied (the updated row's values and commit time, the new row, the deleted key) —
never lakeward's output. After each step lakeward and hudi-rs must both read exactly those
rows (data columns, record key, partition path, commit time), and at the end hudi-rs must
read every readable state (time travel to each instant, incremental ranges) as lakeward does.

Every v8/v9 fixture without a metadata table is listed; the v9 fixtures all have one (their
writes are tested with the metadata table, tests/core/metadata_table). lakeward writes every one of them,
including the time-based key generator and the no-meta-fields (virtual keys) fixtures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from lakeward import Table
from tests.interop.compare import Row, comparable_rows, fail_on, hudi_snapshot, hudi_table, same_rows
from tests.support.hudi_rs_states import readable_mismatches

#: Fixture copies get a short retention so that clean and archival have work to do, and new
#: rows go to new file groups (no small-file packing) so that clustering has groups to merge.
OPTIONS = {
    "hoodie.parquet.small.file.limit": "0",
    "hoodie.cleaner.policy": "KEEP_LATEST_COMMITS",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "1",
    "hoodie.keep.max.commits": "2",
    "hoodie.clustering.plan.strategy.small.file.limit": str(100 * 1024 * 1024),
}


FIXTURES = [
    pytest.param("cow", "v8_simplekeygen_nonhivestyle_overwritetable", id="cow-v8-simplekeygen-overwritetable"),
    pytest.param("mor/avro", "v8_trips_8i1u", id="mor-v8-trips-8i1u"),
    pytest.param("mor/avro", "v8_trips_8i3d", id="mor-v8-trips-8i3d"),
    pytest.param("cow", "v8_timebasedkeygen_nonhivestyle", id="cow-v8-timebasedkeygen"),
    pytest.param("cow", "v8_simplekeygen_hivestyle_no_metafields", id="cow-v8-no-metafields"),
]


class RowModel:
    """The fixture's rows (as hudi-rs reads them, normalised) with lakeward's changes applied."""

    def __init__(self, rows: list[Row], key_field: str, partition_fields: tuple[str, ...]):
        self.key_field = key_field
        self.partition_fields = partition_fields
        self.rows = {str(r[key_field]): r for r in rows}
        assert len(self.rows) == len(rows), "one row per record key"

    def upsert(self, instant: str, batch: pa.Table) -> None:
        for new in comparable_rows(batch):
            key = str(new[self.key_field])
            template = self.rows.get(key) or next(r for r in self.rows.values() if self._same_partition(r, new))
            # meta columns where the table populates them (`hoodie.populate.meta.fields`)
            populated = "_hoodie_record_key" in template
            meta = {"_hoodie_record_key": key, "_hoodie_commit_time": instant} if populated else {}
            self.rows[key] = {**template, **new, **meta}

    def _same_partition(self, row: Row, new: Row) -> bool:
        """A row of the partition the new row goes to: its partition path is the new row's too."""
        return all(row[c] == new[c] for c in self.partition_fields)

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            del self.rows[key]

    def expected(self) -> list[Row]:
        return sorted(self.rows.values(), key=repr)


def _rows(data: pa.Table | list[pa.RecordBatch]) -> list[Row]:
    return sorted(comparable_rows(data), key=repr)


def _bumped(row: pa.Table, column: str, by: Any) -> pa.Table:
    value = row.column(column)[0].as_py()
    return row.set_column(
        row.schema.get_field_index(column), column, pa.array([value + by]).cast(row.schema.field(column).type)
    )


@pytest.mark.parametrize(("kind", "name"), FIXTURES)
def test_lakeward_changes_to_a_v8_v9_fixture_read_as_the_model(
    fixture_table: Callable[[str, str], str], kind: str, name: str
) -> None:
    table = Table.open(fixture_table(kind, name), options=OPTIONS)
    path, config = table.path, table.config
    assert not config.to_properties().get("hoodie.table.metadata.partitions"), "fixtures without a metadata table"
    assert len(config.record_key_fields) == 1 and config.precombine_field is not None
    key_field, ordering = config.record_key_fields[0], config.precombine_field
    model = RowModel(_rows(hudi_snapshot(hudi_table(path))), key_field, tuple(config.partition_fields))
    data = table.read()
    data = data.drop_columns([c for c in data.column_names if c.startswith("_hoodie")]).sort_by(key_field)
    assert data.num_rows >= 1, "the fixture has rows to update"

    def agree(step: str) -> None:
        want = model.expected()
        mine = _rows(Table.open(path).read())
        assert same_rows(mine, want), f"lakeward after {step}: {mine} != {want}"
        theirs = _rows(hudi_snapshot(hudi_table(path)))
        assert same_rows(theirs, want), f"hudi-rs after {step}: {theirs} != {want}"

    # upsert: the first row with a larger ordering value, and two new rows with new keys
    updated = _bumped(data.slice(0, 1), ordering, 1000)
    key_type = data.schema.field(key_field).type
    first_key = data.column(key_field)[0].as_py()
    inserted = [
        updated.set_column(
            updated.schema.get_field_index(key_field),
            key_field,
            pa.array([first_key + n if pa.types.is_integer(key_type) else f"{first_key}-{n}"]).cast(key_type),
        )
        for n in (1000, 2000)
    ]
    batch = pa.concat_tables([updated, *inserted])
    result = table.upsert(batch)
    model.upsert(result.instant_time, batch)
    agree("upsert")

    # delete: the fixture's second row (a one-row fixture: one of the new rows)
    gone = data.slice(1, 1) if data.num_rows > 1 else inserted[1]
    table.delete(gone)
    model.delete([str(gone.column(key_field)[0].as_py())])
    agree("delete")

    if config.table_type.value == "MERGE_ON_READ":
        compaction = table.schedule_compaction(force=True)
        assert compaction is not None, "the fixture's logs and lakeward's delta commits are compacted"
        table.run_compaction(compaction)
        agree("compaction")
    clustering = table.schedule_clustering()
    assert clustering is not None, "the fixture's small file groups are clustered"
    table.run_clustering(clustering)
    agree("clustering")
    assert table.clean() is not None, "the clean removes the replaced and compacted slices"
    agree("clean")
    archived = table.archive()
    assert archived.archived and archived.archive_file is not None
    assert archived.archive_file.startswith(".hoodie/timeline/history/")
    agree("archival")
    fail_on(readable_mismatches(path))
