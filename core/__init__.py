"""lakeward.core: write and read Apache Hudi tables (table versions 6, 8 and 9)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeward.core.exceptions import LakewardError
    from lakeward.core.table import Table
    from lakeward.core.write.client import WriteResult
    from lakeward.core.write.operation import WriteOperation

__all__ = ["LakewardError", "Table", "WriteOperation", "WriteResult"]

# Resolved on first use (PEP 562): importing any `lakeward.core.*` module (e.g. `lakeward.core.exceptions`
# in the CLI) imports this package first, and must not load Table and everything under it.
_LAZY = {
    "LakewardError": "lakeward.core.exceptions",
    "Table": "lakeward.core.table",
    "WriteOperation": "lakeward.core.write.operation",
    "WriteResult": "lakeward.core.write.client",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
