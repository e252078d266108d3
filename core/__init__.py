"""lakeward.core: write and read Apache Hudi table version 6 tables."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeward.core.table import Table
    from lakeward.core.write.client import WriteResult
    from lakeward.core.write.operation import WriteOperation

__all__ = ["Table", "WriteOperation", "WriteResult"]

# Resolved on first use (PEP 562): importing any `lakeward.core.*` module (e.g. `lakeward.core.exceptions`
# in the CLI) imports this package first, and must not load Table and everything under it.
_LAZY = {
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
