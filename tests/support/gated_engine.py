"""A local engine held at a gate made of files, so that it works in a run's child process too.

`FileGatedEngine(folder)` pickles to a child like the local engine: before its first map it
creates `folder/arrived` (holding its pid) and waits until `folder/gate` exists. A test acts
while the plan is half-way through -- in the daemon's process or in a child's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lakeward.core.engine import LocalEngine


class FileGatedEngine(LocalEngine):
    """The local engine, but every map waits for `folder/gate` first (after writing `folder/arrived`)."""

    def __init__(self, folder: Path | str, timeout_s: float = 120.0) -> None:
        super().__init__(1)
        self.folder = str(folder)
        self.timeout_s = timeout_s
        Path(self.folder).mkdir(parents=True, exist_ok=True)

    def map(self, fn: Callable[[Any], Any], items: Any, description: str = "") -> list[Any]:
        folder = Path(self.folder)
        (folder / "arrived").write_text(str(os.getpid()))
        (folder / f"arrived-{os.getpid()}").touch()
        deadline = time.monotonic() + self.timeout_s
        while not (folder / "gate").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return super().map(fn, items, description)

    def arrived_pid(self, timeout_s: float = 60.0) -> int:
        """The pid of the process that reached the gate, once one has."""
        marker = Path(self.folder) / "arrived"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                return int(marker.read_text())
            time.sleep(0.05)
        raise AssertionError(f"nothing reached the gate in {self.folder} within {timeout_s}s")

    def arrived_pids(self) -> set[int]:
        """Every process that has reached the gate so far."""
        return {int(p.name.removeprefix("arrived-")) for p in Path(self.folder).glob("arrived-*")}

    def open(self) -> None:
        (Path(self.folder) / "gate").touch()
