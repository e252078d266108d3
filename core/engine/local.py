"""The local engine: a thread pool in this process (the embedded default; pyarrow releases the GIL)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from lakeward.core.engine.base import Engine

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)


class LocalEngine(Engine):
    name = "local"

    def __init__(self, parallelism: int | None = None):
        self.parallelism = max(1, parallelism or os.cpu_count() or 1)

    def map(self, fn: Callable[[T], R], items: Sequence[T], description: str = "") -> list[R]:
        if not items:
            return []
        log.debug("local engine: %s over %d task(s)", description or fn.__name__, len(items))
        if len(items) == 1 or self.parallelism == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(max_workers=min(self.parallelism, len(items))) as pool:
            return list(pool.map(fn, items))
