"""lakeward: Hudi-format (table versions 6, 8 and 9) lakehouse tables and their table services.

`Table`, the typed results of writes and table services, `ServiceState` and the
`LakewardError` hierarchy are importable from here (`from lakeward import Table, CleanResult`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lakeward.core import __all__  # the same names; importing lakeward.core is cheap (it is lazy too)

if TYPE_CHECKING:
    from lakeward.core import *  # noqa: F403

__version__ = "0.1.0"

# The names above resolve on first use (PEP 562), through lakeward.core, which resolves them lazily too:
# every `lakeward.*` import -- `lakeward --help` included, as the CLI is `lakeward.services.cli` -- imports
# this package first, and Table brings pyarrow, polars and numpy (about a second).


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("lakeward.core"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
