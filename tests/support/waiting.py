"""Polling until a condition holds, for tests of processes that move on their own (daemons, clusters)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    diagnostics: Callable[[], str] = lambda: "",
    step_s: float = 0.2,
) -> Any:
    """The first truthy value of `predicate()`, polled every `step_s`; AssertionError naming `what`
    (and `diagnostics()`, e.g. log tails) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}\n{diagnostics()}")


__all__ = ["wait_until"]
