"""Life cycle of secondary index files: builds (incremental, all, idempotent re-runs), cleaning,
rollback, drop; and bad input (clear errors or documented fallbacks)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.exceptions import (
    ConfigError,
    IndexExistsError,
    IndexNotFoundError,
    InstantExistsError,
    InstantNotFoundError,
)
from lakeward.core.index.secondary.definitions import DEFINITIONS_PATH, save_definitions
from lakeward.core.index.secondary.storage import list_index_files
from lakeward.core.table import Table
from lakeward.core.timeline import Action, State


def _rows(ids: range, tag: str = "v") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "p": ["a" if i % 2 else "b" for i in ids],
            "k": pa.array([i % 10 for i in ids], pa.int64()),
            "s": [f"{tag} word{i % 7} Buying" for i in ids],
            "tags": [[i] for i in ids],
        }
    )


def _table(tmp_path: Any, table_type: str = "COPY_ON_WRITE", **options: str) -> Table:
    table = Table.create(
        str(tmp_path / "t"),
        record_key="id",
        partition_by="p",
        table_type=table_type,
        options={"hoodie.parquet.small.file.limit": "0", **options},
    )
    table.bulk_insert(_rows(range(0, 100)))
    return table


def _base_files(table: Table) -> set[str]:
    return {s.base_file.name for s in table.file_slices() if s.base_file is not None}


def _indexed_stems(table: Table) -> set[str]:
    return {f.base_stem for f in list_index_files(table.storage)}


def test_index_build_incremental_indexes_only_new_base_files(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    first = table.build_indexes()
    assert first is not None and first.base_files == 2
    assert table.index_status().missing() == []
    assert table.build_indexes() is None  # nothing new
    table.bulk_insert(_rows(range(100, 150)))
    status = table.index_status()
    assert len(status.missing("by_k")) == 2 and len(status.indexed("by_k")) == 2
    second = table.build_indexes()
    assert second is not None and second.base_files == 2
    assert {f.instant_time for f in list_index_files(table.storage)} == {first.instant_time, second.instant_time}
    # ALL rebuilds every base file and removes the index files it supersedes.
    rebuilt = table.build_indexes("ALL")
    assert rebuilt is not None and rebuilt.base_files == 4
    assert {f.instant_time for f in list_index_files(table.storage)} == {rebuilt.instant_time}
    assert table.completed_instants()[-1].action is Action.INDEXING
    assert table.read(filters=[("k", "=", 3)]).num_rows == 15


def test_index_build_rerun_after_crash_is_idempotent(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    instant = table.schedule_index_build()
    assert instant is not None and table.pending_index_builds() == [instant]

    def die(_: str) -> None:
        raise RuntimeError("replica died before completing")

    table.completion_check = die
    with pytest.raises(RuntimeError):
        table.run_index_build(instant)
    table.completion_check = None
    written = sorted(f.path for f in list_index_files(table.storage))
    assert written and table.timeline().state_of(instant, Action.INDEXING) is State.INFLIGHT
    assert table.explain([("k", "=", 1)]).count("index") == 0  # files of a pending build are not used
    result = table.run_index_build(instant)
    assert sorted(result.files_written) == written == sorted(f.path for f in list_index_files(table.storage))
    assert table.explain([("k", "=", 1)]).count("index") == 2
    with pytest.raises(InstantExistsError):
        table.run_index_build(instant)
    with pytest.raises(InstantNotFoundError):
        table.run_index_build("20200101000000000")


def test_build_indexes_finishes_an_index_build_that_died_first(tmp_path: Any) -> None:
    """A build that died (here: planned, never run) kept its base files out of every later plan: build_indexes()
    planned around it and said nothing, the files stayed unindexed, and the pending plan held archival back."""
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    dead = table.schedule_index_build()
    assert dead is not None
    table.bulk_insert(_rows(range(100, 150)))
    result = table.build_indexes()
    assert table.pending_index_builds() == []
    assert table.timeline().state_of(dead, Action.INDEXING) is State.COMPLETED
    assert result is not None and result.base_files == 2  # the new base files, after the dead plan's two
    assert table.index_status().missing() == []
    assert table.explain([("k", "=", 3)]).count("index") == 4
    assert table.build_indexes() is None  # nothing left
    table.schedule_index_build("ALL")
    assert table.build_indexes() is not None  # only a pending plan to finish: its result


def test_rollback_of_pending_index_build_removes_its_files(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    instant = table.schedule_index_build()
    assert instant is not None
    table.completion_check = lambda _: (_ for _ in ()).throw(RuntimeError("stop"))
    with pytest.raises(RuntimeError):
        table.run_index_build(instant)
    table.completion_check = None
    assert list_index_files(table.storage)
    result = table.rollback_index_build(instant)
    assert result.rolled_back_instant_time == instant
    assert list_index_files(table.storage) == []
    assert table.pending_index_builds() == []
    assert not table.storage.exists(f".hoodie/.index/plans/{instant}.json")
    assert any(i.action is Action.ROLLBACK for i in table.completed_instants())


def test_clean_removes_index_files_of_cleaned_base_files(tmp_path: Any) -> None:
    table = _table(tmp_path, **{"hoodie.cleaner.commits.retained": "1"})
    table.create_index("by_k", "k")
    table.create_index("words", "s", "text")
    table.build_indexes()
    first = {name.rsplit(".", 1)[0] for name in _base_files(table)}
    for tag in ("w", "x"):
        table.upsert(_rows(range(0, 100), tag))  # a new slice of both file groups
        table.build_indexes()
    assert len(list_index_files(table.storage)) == 12  # 2 indexes x 3 slices x 2 file groups
    cleaned = table.clean()
    assert cleaned is not None and cleaned.files_deleted == 2
    live = {name.rsplit(".", 1)[0] for name in _base_files(table)}
    remaining = _indexed_stems(table)
    assert not (remaining & first)  # the cleaned slices' index files are gone
    assert live <= remaining and len(list_index_files(table.storage)) == 8
    assert table.read(filters=[("s", "match", "x word3")]).num_rows == 14


def test_rollback_of_compaction_removes_its_auto_built_index_files(tmp_path: Any) -> None:
    table = _table(tmp_path, "MERGE_ON_READ")
    table.create_index("by_k", "k", options={"auto_build": True})
    table.build_indexes()
    table.upsert(_rows(range(0, 40), "w"))
    instant = table.schedule_compaction(force=True)
    assert instant is not None
    table.run_compaction(instant)
    by_instant = {f.instant_time for f in list_index_files(table.storage)}
    assert instant in by_instant  # compaction built the index of the base files it wrote
    assert table.index_status().missing() == []
    assert table.explain([("k", "=", 2)]).count("index") == 2
    expected = table.read(filters=[("k", "=", 2)])
    table.rollback(instant)
    assert instant not in {f.instant_time for f in list_index_files(table.storage)}
    assert table.explain([("k", "=", 2)]).count("merge+index") == 2  # the old slices, merged with their logs
    assert sorted(table.read(filters=[("k", "=", 2)]).column("id").to_pylist()) == sorted(
        expected.column("id").to_pylist()
    )


def test_drop_index_removes_definition_and_files(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    table.create_index("words", "s", "text")
    table.build_indexes()
    removed = table.drop_index("by_k")
    assert len(removed) == 2
    assert [d.name for d in table.indexes()] == ["words"]
    assert {f.index_name for f in list_index_files(table.storage)} == {"words"}
    with pytest.raises(IndexNotFoundError, match="no index named 'by_k'"):
        table.drop_index("by_k")
    # Files built for an earlier index of the same name (a build that raced a drop) are never used.
    table.create_index("by_k", "k")
    table.build_indexes()
    assert table.explain([("k", "=", 1)]).count("index") == 2
    recreated = [replace(d, id="0" * 16) if d.name == "by_k" else d for d in table.indexes()]
    save_definitions(table.storage, recreated)
    explain = table.explain([("k", "=", 1)])
    assert explain.count("index") == 0 and "not indexed yet" in explain.slices[0].reason


def test_bad_index_definitions_fail_clearly(tmp_path: Any) -> None:
    table = _table(tmp_path)
    with pytest.raises(ConfigError, match="column 'nope' is not in the table"):
        table.create_index("i1", "nope")
    with pytest.raises(ConfigError, match="type list<.*bitmap index does not support"):
        table.create_index("i1", "tags")
    with pytest.raises(ConfigError, match="column 'k' has type int64.*text indexes take string columns"):
        table.create_index("i1", "k", "text")
    with pytest.raises(ConfigError, match="index_type='btree' is not known"):
        table.create_index("i1", "k", "btree")
    with pytest.raises(ConfigError, match="unknown index option"):
        table.create_index("i1", "k", options={"fast": True})
    with pytest.raises(ConfigError, match="is not valid"):
        table.create_index("1 bad", "k")
    with pytest.raises(ConfigError, match="meta column"):
        table.create_index("i1", "_hoodie_record_key")
    table.create_index("i1", "k")
    with pytest.raises(IndexExistsError, match="'i1' already exists"):
        table.create_index("i1", "s")
    with pytest.raises(ConfigError, match="no index named"):
        table.schedule_index_build(indexes=["zzz"])
    with pytest.raises(ConfigError, match="strategy"):
        table.schedule_index_build("SOME")
    assert table.storage.exists(DEFINITIONS_PATH)
    empty = Table.create(str(tmp_path / "empty"), record_key="id")
    with pytest.raises(ConfigError, match="no schema yet"):
        empty.create_index("i", "k")


def test_an_index_build_of_one_index_named_alone(tmp_path: Any) -> None:
    """`indexes="ks"` is the index "ks", not indexes "k" and "s"."""
    table = _table(tmp_path)
    for name, column in (("k", "k"), ("s", "s"), ("ks", "k")):
        table.create_index(name, column)
    instant = table.schedule_index_build(indexes="ks")
    assert instant is not None
    table.run_index_build(instant)
    built = {f.index_name for f in list_index_files(table.storage)}
    assert built == {"ks"}


def test_predicates_the_index_cannot_answer_fall_back_to_scanning(tmp_path: Any) -> None:
    table = _table(tmp_path)
    table.create_index("by_k", "k", options={"max_in_values": 3})
    table.create_index("words", "s", "text")
    table.build_indexes()
    cases = {
        "contains": [("s", "like", "%ord3%")],  # no literal prefix: the text index cannot answer
        "other column": [("id", "<", 10)],
        "or with unindexed branch": [[("k", "=", 1)], [("id", "=", 2)]],
        "too many in values": [("k", "in", [1, 2, 3, 4])],
        "unselective": [("k", "!=", 3)],
    }
    for label, filters in cases.items():
        explain = table.explain(filters)
        assert explain.count("index") == 0, label
        scan = [s.reason for s in explain.slices]
        assert all(scan), label
    assert table.read(filters=[("s", "like", "%ord3%")]).num_rows == 14
    assert table.read(filters=[[("k", "=", 1)], [("id", "=", 2)]]).num_rows == 11
    assert table.read(filters=[("k", "!=", 3)]).num_rows == 90
    import pyarrow.compute as pc

    assert table.read(filters=pc.field("k") == 3).num_rows == 10  # an Expression is applied as is
    assert "expression" in table.explain(pc.field("k") == 3).predicates
    with pytest.raises(ConfigError, match="not one of"):
        table.read(filters=[("k", "~", 3)])
    for run in (table.explain, lambda f: table.read(filters=f)):  # a literal of another type: named, not read
        with pytest.raises(ConfigError, match="do not fit the table's columns"):
            run([("k", "=", "3")])


def test_index_files_stay_usable_after_their_build_is_archived(tmp_path: Any) -> None:
    options = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3", "hoodie.cleaner.commits.retained": "1"}
    table = _table(tmp_path, **options)
    table.create_index("by_k", "k")
    build = table.build_indexes()
    assert build is not None
    for start in (100, 200, 300):
        table.bulk_insert(_rows(range(start, start + 10)))
    archived = table.archive()
    assert f"{build.instant_time}.indexing" in archived.archived
    assert build.instant_time not in {i.time for i in table.timeline().instants}
    assert len(table.index_status().indexed("by_k")) == 2  # the archived build's files still count
    assert table.explain([("k", "=", 3)]).count("index") == 2
    assert table.read(filters=[("k", "=", 3)]).num_rows == 13


def test_explain_of_a_scan_without_indexes_says_every_slice_is_scanned(tmp_path: Any) -> None:
    """`scan(use_index=False)` reads no index: its explain() must not report index reads."""
    table = _table(tmp_path)
    table.create_index("by_k", "k")
    table.build_indexes()
    assert table.explain([("k", "=", 1)]).count("index") == 2
    explain = table.scan(filters=[("k", "=", 1)], use_index=False).explain()
    assert explain.count("index") == 0
    assert {s.reason for s in explain.slices} == {"use_index=False: no secondary index nor statistics consulted"}
