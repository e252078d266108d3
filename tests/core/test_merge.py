"""Merge semantics: de-duplication inside a batch, `_hoodie_is_deleted`, and the two payloads.

Expected values are worked out by hand from Hudi's rules (format reference, section 8.1):
- inside one batch the record with the largest ordering value wins; ties go to the last one;
- OverwriteWithLatestAvroPayload (default): an incoming record replaces the stored one;
- DefaultHoodieRecordPayload: the stored record stays when its ordering value is larger
  (equal values: the incoming one wins), also when the incoming record is a delete marker.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.merge import PARTITION_PATH, RECORD_KEY, deduplicate, merge_records
from lakeward.core.table import Table

DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"


def make_table(tmp_path: Path, payload: str | None = None, name: str = "t") -> Table:
    options = {"hoodie.datasource.write.payload.class": payload} if payload else None
    return Table.create(
        str(tmp_path / name), record_key="id", partition_by="city", ordering_field="ts", options=options
    )


def batch(*rows: tuple) -> pa.Table:
    """Rows of (id, city, ts, v)."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "city": pa.array([r[1] for r in rows], pa.string()),
            "ts": pa.array([r[2] for r in rows], pa.int64()),
            "v": pa.array([r[3] for r in rows], pa.string()),
        }
    )


def snapshot(table: Table) -> list[tuple]:
    return sorted((r["id"], r["city"], r["ts"], r["v"]) for r in table.read().to_pylist())


# -- de-duplication inside a batch ----------------------------------------------------------
def test_upsert_batch_dedup_keeps_largest_ordering_value_and_last_on_ties(tmp_path):
    t = make_table(tmp_path)
    result = t.upsert(
        batch(
            (1, "sf", 5, "five"),
            (1, "sf", 9, "nine"),
            (1, "sf", 7, "seven"),
            (2, "sf", 3, "first-of-tie"),
            (2, "sf", 3, "last-of-tie"),
            (2, "sf", 1, "older"),
            (3, "ny", 1, "only"),
        )
    )
    assert result.num_inserts == 3
    assert snapshot(t) == [(1, "sf", 9, "nine"), (2, "sf", 3, "last-of-tie"), (3, "ny", 1, "only")]


def test_upsert_batch_dedup_then_update_of_stored_record(tmp_path):
    t = make_table(tmp_path)
    t.upsert(batch((1, "sf", 1, "stored")))
    result = t.upsert(batch((1, "sf", 4, "four"), (1, "sf", 2, "two")))
    assert (result.num_updates, result.num_inserts) == (1, 0)
    assert snapshot(t) == [(1, "sf", 4, "four")]


def test_same_key_in_two_partitions_is_not_deduplicated(tmp_path):
    t = make_table(tmp_path)
    t.upsert(batch((1, "sf", 1, "in-sf"), (1, "ny", 2, "in-ny")))
    assert snapshot(t) == [(1, "ny", 2, "in-ny"), (1, "sf", 1, "in-sf")]


def test_deduplicate_function_directly():
    rows = pa.table(
        {
            RECORD_KEY: ["a", "b", "a", "a", "b", "c"],
            PARTITION_PATH: ["p", "p", "p", "p", "p", "q"],
            "ts": [3, 1, 8, 8, 0, 5],
            "tag": ["a3", "b1", "a8-first", "a8-last", "b0", "c5"],
        }
    )
    out = deduplicate(rows, "ts")
    assert sorted(out.column("tag").to_pylist()) == ["a8-last", "b1", "c5"]
    # Without an ordering field the last record of each key wins.
    out = deduplicate(rows, None)
    assert sorted(out.column("tag").to_pylist()) == ["a8-last", "b0", "c5"]


def test_merge_records_function_directly():
    base = pa.table({RECORD_KEY: ["k1", "k2", "k3"], "ts": [5, 5, 5], "v": ["s1", "s2", "s3"]})
    incoming = pa.table({RECORD_KEY: ["k1", "k2", "k4"], "ts": [9, 1, 1], "v": ["i1", "i2", "i4"]})
    # Overwrite-with-latest: k1 and k2 replaced, k4 inserted, k3 deleted.
    out = merge_records(base, incoming, pa.array(["k3"]), "ts", event_time_ordering=False)
    assert out.kept_base.column("v").to_pylist() == []
    assert sorted(out.written_incoming.column("v").to_pylist()) == ["i1", "i2", "i4"]
    assert (out.num_updates, out.num_inserts, out.num_deletes) == (2, 1, 1)
    # Event-time ordering: k2's stored ts 5 beats incoming ts 1.
    out = merge_records(base, incoming, None, "ts", event_time_ordering=True)
    assert sorted(out.kept_base.column("v").to_pylist()) == ["s2", "s3"]
    assert sorted(out.written_incoming.column("v").to_pylist()) == ["i1", "i4"]
    assert (out.num_updates, out.num_inserts, out.num_deletes) == (1, 1, 0)


# -- _hoodie_is_deleted -----------------------------------------------------------------------
def test_is_deleted_rows_in_an_upsert_delete_records(tmp_path):
    t = make_table(tmp_path)
    t.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b"), (3, "ny", 1, "c")))
    incoming = batch((1, "sf", 2, "gone"), (2, "sf", 2, "b2"), (4, "ny", 2, "d"), (99, "sf", 2, "never")).append_column(
        "_hoodie_is_deleted", pa.array([True, False, None, True])
    )
    result = t.upsert(incoming)
    assert result.num_deletes == 1
    assert result.num_updates == 1
    assert result.num_inserts == 1
    assert snapshot(t) == [(2, "sf", 2, "b2"), (3, "ny", 1, "c"), (4, "ny", 2, "d")]


def test_is_deleted_marker_wins_dedup_when_it_has_the_largest_ordering_value(tmp_path):
    t = make_table(tmp_path)
    t.upsert(batch((1, "sf", 1, "a"), (2, "sf", 1, "b")))
    incoming = batch((1, "sf", 2, "update"), (1, "sf", 3, "delete"), (2, "sf", 3, "delete"), (2, "sf", 4, "keep"))
    incoming = incoming.append_column("_hoodie_is_deleted", pa.array([False, True, True, False]))
    t.upsert(incoming)
    assert snapshot(t) == [(2, "sf", 4, "keep")]


# -- payloads ---------------------------------------------------------------------------------
@pytest.mark.parametrize("reopen", [False, True], ids=["same-handle", "reopened"])
def test_default_payload_keeps_stored_record_with_larger_ordering_value(tmp_path, reopen):
    t = make_table(tmp_path, DEFAULT_PAYLOAD)
    props = (Path(t.path) / ".hoodie" / "hoodie.properties").read_text()
    assert f"hoodie.compaction.payload.class={DEFAULT_PAYLOAD}" in props
    t.upsert(batch((1, "sf", 10, "stored-1"), (2, "sf", 10, "stored-2"), (3, "sf", 10, "stored-3")))
    if reopen:
        t = Table.open(t.path)
    t.upsert(batch((1, "sf", 5, "older"), (2, "sf", 10, "same-ts"), (3, "sf", 11, "newer"), (4, "sf", 1, "new")))
    assert snapshot(t) == [
        (1, "sf", 10, "stored-1"),
        (2, "sf", 10, "same-ts"),
        (3, "sf", 11, "newer"),
        (4, "sf", 1, "new"),
    ]


def test_overwrite_with_latest_payload_replaces_regardless_of_ordering(tmp_path):
    t = make_table(tmp_path)  # default payload class
    props = (Path(t.path) / ".hoodie" / "hoodie.properties").read_text()
    assert f"hoodie.compaction.payload.class={OVERWRITE_PAYLOAD}" in props
    t.upsert(batch((1, "sf", 10, "stored-1"), (2, "sf", 10, "stored-2")))
    result = t.upsert(batch((1, "sf", 5, "older"), (2, "sf", 11, "newer")))
    assert result.num_updates == 2
    assert snapshot(t) == [(1, "sf", 5, "older"), (2, "sf", 11, "newer")]


def test_default_payload_ignores_an_older_delete_marker(tmp_path):
    """DefaultHoodieRecordPayload: a `_hoodie_is_deleted` record older than the stored one loses."""
    t = make_table(tmp_path, DEFAULT_PAYLOAD)
    t.upsert(batch((1, "sf", 10, "stored-1"), (2, "sf", 10, "stored-2")))
    incoming = batch((1, "sf", 5, "old-delete"), (2, "sf", 12, "new-delete")).append_column(
        "_hoodie_is_deleted", pa.array([True, True])
    )
    result = t.upsert(incoming)
    assert result.num_deletes == 1
    assert snapshot(t) == [(1, "sf", 10, "stored-1")]


def test_explicit_delete_ignores_ordering_even_with_default_payload(tmp_path):
    t = make_table(tmp_path, DEFAULT_PAYLOAD)
    t.upsert(batch((1, "sf", 10, "stored-1"), (2, "sf", 10, "stored-2")))
    result = t.delete(keys=[1])
    assert result.num_deletes == 1
    assert snapshot(t) == [(2, "sf", 10, "stored-2")]


def test_unsupported_payload_class_is_rejected(tmp_path):
    from lakeward.core.exceptions import ConfigError

    with pytest.raises(ConfigError, match="payload"):
        make_table(tmp_path, "com.example.MyPayload")
