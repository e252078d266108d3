"""lakeward: Hudi-format (table version 6) lakehouse tables and their table services."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakeward.core.exceptions import LakewardError
    from lakeward.core.table import Table
    from lakeward.core.write.client import WriteResult
    from lakeward.core.write.operation import WriteOperation

__all__ = ["LakewardError", "Table", "WriteOperation", "WriteResult"]
__version__ = "0.1.0"

# The names above resolve on first use (PEP 562) instead of at import: every `lakeward.*` import --
# `lakeward --help` included, as the CLI is `lakeward.services.cli` -- imports this package first, and
# Table brings pyarrow, polars and numpy (about a second). `from lakeward import Table` works as before.
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
