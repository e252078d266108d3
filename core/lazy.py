"""Submodules of a package, and names they define, imported on first use (PEP 562).

Start-up time (issue 23): `lakeward show PATH` and the other table commands open a `Table` and list its
timeline and file slices. `Table` offers writes, table services, indexes, CDC and the metadata-table
bootstrap too; importing all of them (and kazoo, behind the ZooKeeper lock) at start doubled a
command's start-up. A package whose modules load on first use says, in its `__init__`:

    __getattr__ = on_first_use(__name__, {"ZooKeeperLockProvider": "zookeeper"})

Then `package.module` (after a module-level `from lakeward.core import package`) imports
`package.module` when a function first reads it, and `package.ZooKeeperLockProvider` imports
`package.zookeeper` and returns that name. Both are ordinary imports (thread-safe, cached in
`sys.modules`): only their time moves. Type checkers see re-exported names through the package's
`if TYPE_CHECKING:` imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def on_first_use(package: str, exports: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: `package.name` is a name re-exported from one of its
    modules (`exports`: name -> module under `package`), else the submodule `package.name`, imported
    when first read; AttributeError when there is neither."""
    names = dict(exports or {})

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is not None:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        if name.startswith("__"):  # dunder probes (`__path__`, `__wrapped__`, ...) are never submodules
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None

    return __getattr__
