"""An `Instant` (what `completed_instants()` returns) is accepted wherever an instant time is; unknown
options are answered with the closest known keys."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import ConfigError
from lakeward.core.timeline import normalize_instant_time


def _table(tmp_path, **kwargs) -> Table:
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", **kwargs)
    table.upsert(pa.table({"id": [1, 2], "v": ["a", "b"], "ts": [1, 1]}))
    table.upsert(pa.table({"id": [2, 3], "v": ["B", "c"], "ts": [2, 2]}))
    return table


def _rows(data: pa.Table) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in data.select(["id", "v"]).to_pylist())


def test_reads_take_an_instant(tmp_path) -> None:
    table = _table(tmp_path, options={"hoodie.table.cdc.enabled": "true"})
    first, second = table.completed_instants()
    assert _rows(table.read(as_of=first)) == [(1, "a"), (2, "b")] == _rows(table.read(as_of=first.time))
    assert len(table.file_slices(as_of=first)) == len(table.file_slices(as_of=first.time))
    assert _rows(table.read_incremental(first)) == [(2, "B"), (3, "c")]
    assert _rows(table.read_incremental(first, second)) == _rows(table.read_incremental(first.time, second.time))
    changes = table.read_changes(first, second)
    assert sorted(changes.column("op").to_pylist()) == ["i", "u"]
    assert table.read_changes(first).equals(table.read_changes(first.time))
    # str(Instant), e.g. an Instant given to spark.read.option(...), names the same time
    assert normalize_instant_time(str(first)) == first.time


def test_services_take_an_instant(tmp_path) -> None:
    table = _table(tmp_path)
    first, second = table.completed_instants()
    assert table.savepoint(first) == first.time
    assert table.savepoints() == [first.time]
    table.delete_savepoint(first)
    assert table.savepoints() == []
    table.rollback(second)
    assert [i.time for i in table.completed_instants() if i.action.value == "commit"] == [first.time]
    assert _rows(table.read()) == [(1, "a"), (2, "b")]


def test_unknown_option_suggests_the_closest_keys(tmp_path) -> None:
    with pytest.raises(ConfigError) as raised:
        _table(tmp_path, options={"hoodie.upsert.shuffle.paralelism": "4"})
    message = str(raised.value)
    assert "did you mean 'hoodie.upsert.shuffle.parallelism'" in message
    assert len(message) < 300  # not every key


def test_unknown_option_far_from_every_key_gets_no_guess(tmp_path) -> None:
    with pytest.raises(ConfigError) as raised:
        _table(tmp_path, options={"hoodie.zzz": "1"})
    assert "did you mean" not in str(raised.value)
    assert "docs/configuration.md" in str(raised.value)
