"""What `lakeward` re-exports: Table, typed results and the error hierarchy, resolved lazily."""

from __future__ import annotations

import subprocess
import sys
import typing

import lakeward
import lakeward.core
from lakeward.core.exceptions import LakewardError
from lakeward.core.table import Table

RESULTS = [
    "WriteResult",
    "CompactionResult",
    "ClusteringResult",
    "CleanResult",
    "RollbackResult",
    "RestoreResult",
    "ArchiveResult",
    "ChangeTrackingResult",
    "IndexBuildResult",
    "UpgradeResult",
    "ServiceState",
]


def test_every_name_resolves_to_the_class_core_defines() -> None:
    assert lakeward.__all__ == lakeward.core.__all__
    for name in lakeward.__all__:
        assert getattr(lakeward, name) is getattr(lakeward.core, name), name
    assert set(RESULTS) <= set(lakeward.__all__)


def test_results_are_what_table_methods_return() -> None:
    # names table.py imports only for type checking resolve through lakeward
    names = {**{n: getattr(lakeward, n) for n in lakeward.__all__}, **vars(sys.modules[Table.__module__])}
    returned = {
        name: typing.get_type_hints(getattr(Table, name), names)["return"]
        for name in ("upsert", "run_compaction", "run_clustering", "run_clean", "rollback", "archive", "restore")
    }
    assert returned["upsert"] is lakeward.WriteResult
    assert returned["run_compaction"] is lakeward.CompactionResult
    assert returned["run_clustering"] is lakeward.ClusteringResult
    assert returned["run_clean"] is lakeward.CleanResult
    assert returned["rollback"] is lakeward.RollbackResult
    assert returned["archive"] is lakeward.ArchiveResult
    assert returned["restore"] is lakeward.RestoreResult


def test_every_lakeward_error_is_exported() -> None:
    def subclasses(cls: type) -> set[type]:
        return {cls}.union(*(subclasses(c) for c in cls.__subclasses__()))

    core_errors = {c for c in subclasses(LakewardError) if c.__module__ == "lakeward.core.exceptions"}
    exported = {getattr(lakeward, n) for n in lakeward.__all__ if n.endswith("Error")}
    assert core_errors == exported


def test_importing_lakeward_loads_no_table_code() -> None:
    heavy = ["pyarrow", "polars", "numpy", "lakeward.core.table", "lakeward.core.exceptions"]
    code = f"import sys, lakeward; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"
    code = "import lakeward; print(lakeward.CleanResult.__module__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "lakeward.core.table_services.clean.execute"
