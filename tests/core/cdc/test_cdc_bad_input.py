"""CDC queries with a bad range, or on a table without CDC: clear errors naming the problem."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.timeline import Action
from lakeward.core.timeline.transitions import create_requested
from tests.support.write_model import disk_state

SCHEMA = pa.schema([("id", pa.string()), ("v", pa.int64()), ("ts", pa.int64())])


def batch(*items: tuple[str, int, int]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, i)) for i in items], schema=SCHEMA)


def cdc_table(path, **options) -> Table:
    return Table.create(
        str(path), record_key="id", ordering_field="ts", options={"hoodie.table.cdc.enabled": "true", **options}
    )


def test_begin_is_required(tmp_path):
    t = cdc_table(tmp_path / "t")
    t.insert(batch(("a", 1, 1)))
    for missing in (None, "", "  "):
        with pytest.raises(ConfigError, match="begin instant"):
            t.read_changes(missing)  # type: ignore[arg-type]


def test_begin_after_end(tmp_path):
    t = cdc_table(tmp_path / "t")
    one = t.insert(batch(("a", 1, 1))).instant_time
    two = t.upsert(batch(("a", 2, 2))).instant_time
    with pytest.raises(InstantNotFoundError, match=f"begin {two} is after end {one}"):
        t.read_changes(two, one)


def test_begin_not_completed_yet_names_the_queryable_instants(tmp_path):
    t = cdc_table(tmp_path / "t")
    one = t.insert(batch(("a", 1, 1))).instant_time
    pending = "29991231000000000"
    create_requested(t.storage, pending, Action.COMMIT)
    with pytest.raises(InstantNotFoundError, match=f"begin instant {pending} is not completed yet.*{one}"):
        t.read_changes(pending)


def test_cdc_query_on_a_table_without_cdc(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts")
    one = t.insert(batch(("a", 1, 1))).instant_time
    before = disk_state(tmp_path / "t")
    with pytest.raises(ConfigError, match="does not have CDC enabled.*hoodie.table.cdc.enabled"):
        t.read_changes(one)
    assert disk_state(tmp_path / "t") == before


def test_bad_logging_mode_is_rejected_at_create(tmp_path):
    with pytest.raises(ConfigError, match="hoodie.table.cdc.supplemental.logging.mode='EVERYTHING'"):
        cdc_table(tmp_path / "t", **{"hoodie.table.cdc.supplemental.logging.mode": "EVERYTHING"})
    with pytest.raises(ConfigError, match="hoodie.table.cdc.enabled='yes'"):
        Table.create(str(tmp_path / "u"), record_key="id", options={"hoodie.table.cdc.enabled": "yes"})


@pytest.mark.parametrize("name", ["KEY_OP", "OP_KEY_ONLY", "data_before", "DATA_BEFORE_AFTER"])
def test_hudi_and_lakeward_mode_names_are_accepted(tmp_path, name):
    t = cdc_table(tmp_path / "t", **{"hoodie.table.cdc.supplemental.logging.mode": name})
    text = (tmp_path / "t" / ".hoodie" / "hoodie.properties").read_text()
    assert "hoodie.table.cdc.enabled=true" in text
    assert f"hoodie.table.cdc.supplemental.logging.mode={Table.open(t.path).config.cdc_mode.value}" in text


def test_enabling_cdc_later_queries_before_that_fail_clearly(tmp_path):
    t = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts")
    one = t.insert(batch(("a", 1, 1))).instant_time
    two = t.upsert(batch(("a", 2, 2))).instant_time
    t.enable_cdc("KEY_OP")
    three = t.upsert(batch(("a", 3, 3))).instant_time
    with pytest.raises(InstantNotFoundError, match=f"CDC was enabled .* after instant {two}"):
        t.read_changes(one)
    got = Table.open(t.path).read_changes(two, images="struct").to_pylist()
    assert [(r["op"], r["ts_ms"], r["before"]["v"], r["after"]["v"]) for r in got] == [("u", three, 2, 3)]
    assert [r["ts_ms"] for r in t.read_changes("earliest").to_pylist()] == [three]


def test_cleaned_begin_is_refused(tmp_path):
    t = cdc_table(tmp_path / "t", **{"hoodie.cleaner.commits.retained": 1})
    times = [t.upsert(batch(("a", i, i))).instant_time for i in range(4)]
    assert t.clean() is not None
    with pytest.raises(InstantNotFoundError, match="no longer retained|cleaned"):
        t.read_changes(times[0])
    assert t.read_changes(times[-2]).num_rows == 1


def test_archived_begin_is_refused(tmp_path):
    t = cdc_table(
        tmp_path / "t",
        **{"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3, "hoodie.cleaner.commits.retained": 1},
    )
    times = [t.upsert(batch(("a", i, i))).instant_time for i in range(6)]
    t.clean()
    t.archive()
    first_active = t.timeline().instants[0].time
    assert first_active > times[0]
    with pytest.raises(InstantNotFoundError, match=f"archived.*active timeline starts at {first_active}"):
        t.read_changes(times[0])
