"""Engines run the per-file-group functions: locally (threads) or on Spark."""

from lakeward.core.engine.base import Engine
from lakeward.core.engine.local import LocalEngine

__all__ = ["Engine", "LocalEngine"]
