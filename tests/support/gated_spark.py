"""A Spark engine held at a gate made of files, for runs in the Spark driver process.

`gated_spark(folder)` is an engine factory (`SparkDriver(engine_factory=...)`): the driver
builds a `GatedSparkEngine` on its session. Before each map it writes `folder/arrived` (the
driver's pid); then, if `folder/hold-in-driver` exists, it waits for `folder/gate` in the
driver's Python (work no job-group cancel can interrupt), else it runs Spark tasks that each
touch `folder/task-started` and wait for the gate (work a cancel of the job group interrupts).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakeward.core.engine.spark import SparkEngine

#: Longest wait at the gate.
HOLD_S = 120.0


def _wait_for(gate: str) -> None:
    deadline = time.monotonic() + HOLD_S
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)


class GatedSparkEngine(SparkEngine):
    """SparkEngine whose maps wait at `folder/gate`, in the driver or in their tasks (module doc)."""

    def __init__(self, spark: Any, folder: str) -> None:
        super().__init__(spark)
        self.folder = folder

    def map(self, fn: Callable[[Any], Any], items: Any, description: str = "") -> list[Any]:
        folder = Path(self.folder)
        (folder / "arrived").write_text(str(os.getpid()))
        gate, started = str(folder / "gate"), str(folder / "task-started")
        if (folder / "hold-in-driver").exists():
            _wait_for(gate)
            return super().map(fn, items, description)

        def held(item: Any) -> Any:  # self-contained: Spark's Python workers may not import tests.support
            import os
            import time

            open(started, "a").close()
            deadline = time.monotonic() + HOLD_S
            while not os.path.exists(gate) and time.monotonic() < deadline:
                time.sleep(0.05)
            return fn(item)

        return super().map(held, items, description)


def gated_spark(folder: Path) -> Callable[[Any], GatedSparkEngine]:
    """The engine factory for a driver whose maps wait at `folder/gate` (module doc)."""
    folder.mkdir(parents=True, exist_ok=True)
    return functools.partial(GatedSparkEngine, folder=str(folder))
