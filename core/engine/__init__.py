"""Engines schedule the per-file-group tasks: locally (a thread pool) or as Spark tasks.

Task scheduling only: an engine decides where a plain Python function runs, never what it does.
The Spark integration (data source, SQL functions, streaming) is `lakeward.core.spark`; the data
planes of a write are `lakeward.core.write.plane`. PySpark is imported only when a Spark engine
runs tasks, so the local engine works without PySpark installed.
"""

from __future__ import annotations

from typing import Any

from lakeward.core.engine.base import Engine
from lakeward.core.engine.local import LocalEngine
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.exceptions import ConfigError

ENGINE_NAMES = ("local", "spark")


def is_spark_dataframe(data: Any) -> bool:
    """True for a PySpark DataFrame (classic or Connect), without importing PySpark."""
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.")


def resolve_engine(engine: Engine | str | None, data: Any = None, default: Engine | None = None) -> Engine:
    """The engine for one call: the one named or given, else Spark for a Spark DataFrame, else `default`.

    `"spark"` uses the active SparkSession; pass a `SparkEngine(spark)` to choose another.
    """
    if isinstance(engine, Engine):
        return engine
    if engine is None:
        if is_spark_dataframe(data) and (default is None or default.name != "spark"):
            return SparkEngine(data.sparkSession)
        return default or LocalEngine()
    name = str(engine).lower()
    if name == "local":
        return default if default is not None and default.name == "local" else LocalEngine()
    if name == "spark":
        if default is not None and default.name == "spark":
            return default

        return SparkEngine(data.sparkSession if is_spark_dataframe(data) else None)
    raise ConfigError(f"engine={engine!r} is not known; use one of {', '.join(ENGINE_NAMES)} or an Engine")


__all__ = ["ENGINE_NAMES", "Engine", "LocalEngine", "is_spark_dataframe", "resolve_engine"]
