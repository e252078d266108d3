"""lakeward.core: write and read Apache Hudi tables (table versions 6, 8 and 9).

The names users need are re-exported here (and by `lakeward`): `Table`, the typed results
of its writes and table services, `ServiceState`, and the `LakewardError` hierarchy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeward.core.exceptions import (
        ConcurrentWriteError,
        ConfigError,
        CorruptFileError,
        CorruptTableError,
        IndexExistsError,
        IndexNotFoundError,
        InstantExistsError,
        InstantNotFoundError,
        InvalidRecordError,
        LakewardError,
        LockError,
        MetadataTableError,
        MissingFileError,
        ReadOnlyTableVersionError,
        RollbackAbortedError,
        SchemaError,
        SharedLockRequiredError,
        SparkSessionLostError,
        StorageError,
        TableClosedError,
        TableExistsError,
        TableNotFoundError,
        TableVersionChangedError,
        UnsupportedTableVersionError,
        UpgradeError,
    )
    from lakeward.core.table import Table
    from lakeward.core.table_services.archival import ArchiveResult
    from lakeward.core.table_services.change_tracking import ChangeTrackingResult
    from lakeward.core.table_services.clean.execute import CleanResult
    from lakeward.core.table_services.clustering.execute import ClusteringResult
    from lakeward.core.table_services.compaction.execute import CompactionResult
    from lakeward.core.table_services.index_build.execute import IndexBuildResult
    from lakeward.core.table_services.rollback import RollbackResult
    from lakeward.core.table_services.savepoint import RestoreResult
    from lakeward.core.table_services.state import ServiceState
    from lakeward.core.table_services.upgrade import UpgradeResult
    from lakeward.core.write.client import WriteResult
    from lakeward.core.write.operation import WriteOperation

_EXCEPTIONS = "lakeward.core.exceptions"

# Resolved on first use (PEP 562): importing any `lakeward.core.*` module (e.g. `lakeward.core.exceptions`
# in the CLI) imports this package first, and must not load Table and everything under it.
_LAZY = {
    "Table": "lakeward.core.table",
    "WriteOperation": "lakeward.core.write.operation",
    # typed results
    "WriteResult": "lakeward.core.write.client",
    "CompactionResult": "lakeward.core.table_services.compaction.execute",
    "ClusteringResult": "lakeward.core.table_services.clustering.execute",
    "CleanResult": "lakeward.core.table_services.clean.execute",
    "UpgradeResult": "lakeward.core.table_services.upgrade",
    "RollbackResult": "lakeward.core.table_services.rollback",
    "RestoreResult": "lakeward.core.table_services.savepoint",
    "ArchiveResult": "lakeward.core.table_services.archival",
    "ChangeTrackingResult": "lakeward.core.table_services.change_tracking",
    "IndexBuildResult": "lakeward.core.table_services.index_build.execute",
    "ServiceState": "lakeward.core.table_services.state",
    # errors
    "LakewardError": _EXCEPTIONS,
    "ConfigError": _EXCEPTIONS,
    "TableNotFoundError": _EXCEPTIONS,
    "TableExistsError": _EXCEPTIONS,
    "CorruptTableError": _EXCEPTIONS,
    "CorruptFileError": _EXCEPTIONS,
    "MissingFileError": _EXCEPTIONS,
    "SchemaError": _EXCEPTIONS,
    "InvalidRecordError": _EXCEPTIONS,
    "InstantNotFoundError": _EXCEPTIONS,
    "InstantExistsError": _EXCEPTIONS,
    "ConcurrentWriteError": _EXCEPTIONS,
    "SharedLockRequiredError": _EXCEPTIONS,
    "LockError": _EXCEPTIONS,
    "TableClosedError": _EXCEPTIONS,
    "StorageError": _EXCEPTIONS,
    "IndexNotFoundError": _EXCEPTIONS,
    "IndexExistsError": _EXCEPTIONS,
    "UnsupportedTableVersionError": _EXCEPTIONS,
    "ReadOnlyTableVersionError": _EXCEPTIONS,
    "MetadataTableError": _EXCEPTIONS,
    "RollbackAbortedError": _EXCEPTIONS,
    "SparkSessionLostError": _EXCEPTIONS,
    "UpgradeError": _EXCEPTIONS,
    "TableVersionChangedError": _EXCEPTIONS,
}

__all__ = [
    "ArchiveResult",
    "ChangeTrackingResult",
    "CleanResult",
    "ClusteringResult",
    "CompactionResult",
    "ConcurrentWriteError",
    "ConfigError",
    "CorruptFileError",
    "CorruptTableError",
    "IndexBuildResult",
    "IndexExistsError",
    "IndexNotFoundError",
    "InstantExistsError",
    "InstantNotFoundError",
    "InvalidRecordError",
    "LakewardError",
    "LockError",
    "MetadataTableError",
    "MissingFileError",
    "ReadOnlyTableVersionError",
    "RestoreResult",
    "RollbackAbortedError",
    "SparkSessionLostError",
    "RollbackResult",
    "SchemaError",
    "ServiceState",
    "SharedLockRequiredError",
    "StorageError",
    "Table",
    "TableClosedError",
    "TableExistsError",
    "TableNotFoundError",
    "TableVersionChangedError",
    "UnsupportedTableVersionError",
    "UpgradeError",
    "UpgradeResult",
    "WriteOperation",
    "WriteResult",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
