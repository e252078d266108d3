"""The Spark engine: per-file-group functions run as Spark tasks on executors.

Writes never collect the records to the driver: keys, de-duplication, tagging (a join
with the keys of the candidate base files) and assignment run as Spark stages, one task
per file group writes its files, and only write statuses come back to the driver, which
alone writes the timeline. Reads return Spark DataFrames.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lakeward.core import exceptions
from lakeward.core.engine.base import Engine
from lakeward.core.exceptions import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The Python that Spark's Python workers run (the `PYSPARK_PYTHON` environment variable is the fallback).
PYTHON_CONF = "spark.pyspark.python"

T = TypeVar("T")
R = TypeVar("R")
log = logging.getLogger(__name__)

#: Called inside the Spark task with each file group's write stat (a `lakeward.core.timeline.WriteStat`)
#: after its files are written (and before the task reports back). For fault-injection tests of task
#: retries; must be picklable. The engine only carries it: the Spark data plane calls it.
AfterFileGroupHook = Callable[[Any], None]


def active_session() -> SparkSession:
    """The active SparkSession, or a clear error when there is none."""
    try:
        # lazy: PySpark is optional (lakeward[spark]) and slow to import
        from pyspark.sql import SparkSession
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ConfigError("engine='spark' needs PySpark: pip install 'lakeward[spark]'") from exc
    session = SparkSession.getActiveSession()
    if session is None:
        raise ConfigError("engine='spark' needs a SparkSession: create one first or pass SparkEngine(spark)")
    return session


def python_worker_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """Conf for a session lakeward creates: its Python workers run this interpreter, so they can import
    lakeward, unless the user chose one (`spark.pyspark.python` in `conf`, or `PYSPARK_PYTHON`).

    Also sets `PYSPARK_PYTHON` when unset: PySpark's RDD jobs (`SparkContext.pythonExec`) and its
    start-up lookup of data sources read only the environment, not the conf.
    """
    chosen = conf.get(PYTHON_CONF) or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", chosen)
    return {} if PYTHON_CONF in conf else {PYTHON_CONF: chosen}


_MISSING_MODULE = re.compile(r"No module named '((?:py)?(?:spark_)?lakeward[\w.]*)'")


class WorkerImportError(ConfigError):
    """Spark's Python workers cannot import lakeward (their Python is not the one lakeward is installed in)."""


def worker_import_error(exc: BaseException) -> WorkerImportError | None:
    """The error to raise instead of `exc` when `exc` is a Spark task failing to import lakeward, else None."""
    found = _MISSING_MODULE.search(str(exc))
    if found is None:
        return None
    return WorkerImportError(
        f"Spark's Python workers cannot import lakeward (No module named {found.group(1)!r}). Spark starts "
        "them with the PYSPARK_PYTHON environment variable of the driver (SQL and data-source work also "
        f"honours the Spark conf {PYTHON_CONF}), else with python3 on the executors' PATH. Point both at a "
        f"Python that has lakeward installed -- this driver runs {sys.executable} -- e.g. set "
        "os.environ['PYSPARK_PYTHON'] = sys.executable before creating the session in local mode, or "
        "install lakeward into the executors' Python on a cluster. Sessions lakeward creates do so unless "
        "you chose a Python yourself."
    )


class SparkEngine(Engine):
    """Runs work units as Spark tasks of the given (or the active) SparkSession."""

    name = "spark"

    def __init__(self, spark: SparkSession | None = None, after_file_group: AfterFileGroupHook | None = None):
        self.spark = spark if spark is not None else active_session()
        self.after_file_group = after_file_group

    @property
    def default_parallelism(self) -> int:
        return int(self.spark.sparkContext.defaultParallelism)

    def map(self, fn: Callable[[T], R], items: Sequence[T], description: str = "") -> list[R]:
        """One Spark task per item; items and results travel pickled (keep them metadata-sized)."""
        if not items:
            return []
        sc = self.spark.sparkContext
        sc.setJobDescription(f"lakeward: {description or getattr(fn, '__name__', 'tasks')}")
        try:
            return sc.parallelize(list(items), len(items)).map(fn).collect()
        except Exception as exc:
            missing = worker_import_error(exc) if is_spark_task_error(exc) else None
            if missing is not None:
                raise missing from None
            raise
        finally:
            sc.setJobDescription(None)  # type: ignore[arg-type]


def unwrap_task_error(exc: BaseException) -> BaseException:
    """A lakeward error raised inside a Spark task, rebuilt on the driver; else `exc` itself.

    PySpark wraps task failures in a PythonException whose text holds the remote
    traceback; users should see the same specific error as with the local engine.
    """
    missing = worker_import_error(exc)
    if missing is not None:
        return missing
    text = str(exc)
    for line in reversed(text.splitlines()):
        line = line.strip()
        name, sep, message = line.partition(": ")
        cls_name = name.rsplit(".", 1)[-1]
        cls = getattr(exceptions, cls_name, None)
        if sep and isinstance(cls, type) and issubclass(cls, exceptions.LakewardError):
            return cls(message)
    return exc


def session_lost(exc: BaseException) -> exceptions.SparkSessionLostError | None:
    """The error that says the Spark session's JVM is gone, when `exc` (or an error it was raised
    from or while handling) is py4j failing to reach it; None otherwise. A dead JVM surfaced as
    py4j's `Py4JNetworkError` or as a bare `ConnectionError` from py4j's socket calls (often from a
    cleanup call, hiding the first one)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        py4j_network = type(current).__name__ == "Py4JNetworkError" and type(current).__module__.startswith("py4j")
        if py4j_network or (isinstance(current, ConnectionError) and _raised_in_py4j(current)):
            return exceptions.SparkSessionLostError(
                f"the Spark session's JVM cannot be reached (it died or was killed): {type(exc).__name__}: {exc}"
            )
        current = current.__cause__ or current.__context__
    return None


def _raised_in_py4j(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("py4j."):
            return True
        tb = tb.tb_next
    return False


def is_spark_task_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("pyspark.", "py4j."))


__all__ = [
    "PYTHON_CONF",
    "AfterFileGroupHook",
    "SparkEngine",
    "WorkerImportError",
    "active_session",
    "is_spark_task_error",
    "session_lost",
    "python_worker_conf",
    "unwrap_task_error",
    "worker_import_error",
]
