"""The engine interface: run one plain Python function per work unit (file group, file slice).

The per-file-group functions are shared by every engine; an engine only decides where
they run (local threads, or Spark tasks on executors).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Engine(ABC):
    """Runs a function over work units and returns the results in input order."""

    name: str = "abstract"

    @abstractmethod
    def map(self, fn: Callable[[T], R], items: Sequence[T], description: str = "") -> list[R]:
        """Apply `fn` to every item; an exception in any task fails the whole call."""
