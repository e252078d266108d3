"""A compaction or clustering whose plan a restore (or a rollback) undoes while it runs must not complete.

The restore takes the table lock, rolls the plan back with every instant after the savepoint, and
deletes the files it finds; the run, which holds no lock while it works, then wrote its files after
that listing. Completing it would bring the undone writes' rows back (clustering rewrites them) or
commit files the restore deleted (an unreadable table). The run must fail with a ConcurrentWriteError,
leave none of its files behind, and the table must read as the savepoint, in lakeward and hudi-rs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

import lakeward.core.table_services.clustering.execute as clustering_execute
import lakeward.core.table_services.compaction.execute as compaction_execute
from lakeward.core.exceptions import ConcurrentWriteError
from lakeward.core.table import Table

OPTIONS = {"hoodie.clustering.plan.strategy.small.file.limit": "100000000", "hoodie.parquet.small.file.limit": "0"}


def _batch(keys: list[str], value: str) -> pa.Table:
    return pa.table({"id": keys, "part": ["p"] * len(keys), "ts": [0] * len(keys), "v": [value] * len(keys)})


def _rows(path: str) -> dict[str, str]:
    ours = Table.open(path).read(columns=["id", "v"])
    mine = dict(zip(ours.column("id").to_pylist(), ours.column("v").to_pylist(), strict=True))
    theirs = pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(path).build().read())
    assert dict(zip(theirs.column("id").to_pylist(), theirs.column("v").to_pylist(), strict=True)) == mine
    return mine


def _files_named(path: str, instant: str) -> list[str]:
    return [str(p) for p in Path(path).rglob(f"*{instant}*") if ".hoodie" not in p.parts or ".temp" in p.parts]


def _undo_meanwhile(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, undo: Callable[[], Any]) -> None:
    """Run `undo` once, right after the service's `module.name` returns (the run goes on afterwards)."""
    real = getattr(module, name)
    done: list[bool] = []

    def then_undo(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not done:
            done.append(True)
            undo()
        return result

    monkeypatch.setattr(module, name, then_undo)


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize(
    "service,hook,undo",
    [
        # after the run read its input: the restore lists no output yet, the run writes it afterwards
        ("clustering", "read_merged_file_slice", "restore"),
        ("clustering", "read_merged_file_slice", "rollback"),
        # after the run wrote its output: the restore deletes it
        ("clustering", "cluster_group", "restore"),
        ("clustering", "cluster_group", "rollback"),
        ("compaction", "compact_file_slice", "restore"),  # a pending compaction is not rolled back (as in Hudi)
        # midway: the run then finds the slice's files gone (a raw FileNotFoundError before)
        ("compaction", "merge_slice", "restore"),
    ],
)
def test_a_service_whose_plan_was_undone_while_it_ran_does_not_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int, service: str, hook: str, undo: str
) -> None:
    path = str(tmp_path / "t")
    mor = service == "compaction"
    table = Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_type="MERGE_ON_READ" if mor else "COPY_ON_WRITE",
        options=OPTIONS,
        table_version=version,
    )
    saved = table.upsert(_batch(["a", "b"], "A")).instant_time
    table.savepoint(saved)
    table.upsert(_batch(["a", "b"], "B"))  # a log file on merge-on-read
    table.upsert(_batch(["c"], "C"))
    expected = {"a": "A", "b": "A"} if undo == "restore" else _rows(path)
    plan = table.schedule_compaction(force=True) if mor else table.schedule_clustering()
    assert plan is not None

    def undo_the_plan() -> None:
        other = Table.open(path)
        if undo == "restore":
            assert plan in other.restore(saved).rolled_back
        else:
            other.rollback(plan)

    module = compaction_execute if mor else clustering_execute
    _undo_meanwhile(monkeypatch, module, hook, undo_the_plan)
    run = table.run_compaction if mor else table.run_clustering
    with pytest.raises(ConcurrentWriteError, match=f"{plan}.*(restore|roll)"):
        run(plan)
    monkeypatch.undo()

    timeline = Table.open(path).timeline()
    assert timeline.pending() == []
    assert all(i.time != plan for i in timeline.completed()), "the undone plan completed"
    assert _files_named(path, plan) == [], "the run left its files behind"
    assert _rows(path) == expected
    assert Table.open(path).check().ok


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_write_undone_by_a_restore_before_it_began_does_not_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table_type: str
) -> None:
    """A restore between a write's requested and inflight steps rolls the write back (it is pending and
    after the savepoint). The write then wrote its inflight file anew and, on merge-on-read, completed: an
    acknowledged write the restore reports rolled back, which a resumed restore would undo again."""
    import lakeward.core.write.client as client_mod

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type)
    saved = table.upsert(_batch(["a", "b"], "A")).instant_time
    table.savepoint(saved)
    table.upsert(_batch(["a", "b"], "B"))
    undone: list[str] = []
    real = client_mod.transition_to_inflight

    def restore_first(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(client_mod, "transition_to_inflight", real)
        undone.extend(Table.open(path).restore(saved).rolled_back)
        return real(*args, **kwargs)

    monkeypatch.setattr(client_mod, "transition_to_inflight", restore_first)
    with pytest.raises(ConcurrentWriteError, match="rolled back"):
        table.upsert(_batch(["a"], "C"))
    timeline = Table.open(path).timeline()
    assert timeline.pending() == []
    assert not [i for i in timeline.completed_writes() if i.time in undone], "a write the restore undid completed"
    assert _rows(path) == {"a": "A", "b": "A"}
