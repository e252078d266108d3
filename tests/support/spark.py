"""One local SparkSession for the whole test session (starting Spark takes seconds)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lakeward.core.engine.spark import python_worker_conf


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Local Spark: 2 cores, a task may fail and be retried (local[2,4]), UI off, few shuffle partitions.

    Tolerant of a loaded machine: the Python runners of streaming sources and of data-source planning
    wait `spark.python.authenticate.socketTimeout` for their worker to connect (15 s by default; the
    streaming checkpoint test once failed on it under load): 120 s here. A crashing worker dumps its
    traceback. One session for the whole run, 4 shuffle partitions.
    Workers run this interpreter (lakeward's own session set-up: `python_worker_conf`).
    """
    from pyspark.sql import SparkSession

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    builder = SparkSession.builder
    for key, value in python_worker_conf({}).items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2,4]")
        .appName("lakeward-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def spark_jobs(spark: Any, group: str, fn: Callable[[], Any]) -> tuple[Any, list[int]]:
    """Run fn under the Spark job group `group`; its result and the ids of the Spark jobs it started."""
    sc = spark.sparkContext
    sc.setJobGroup(group, group)
    try:
        result = fn()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    return result, sorted(sc.statusTracker().getJobIdsForGroup(group))


@pytest.fixture
def planes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the data planes (`LocalDataPlane`, `SparkDataPlane`) the write client picks, in call order."""
    from lakeward.core.write.client import WriteClient

    used: list[str] = []
    original = WriteClient._data_plane

    def spy(self: WriteClient, engine: Any) -> Any:
        plane = original(self, engine)
        used.append(type(plane).__name__)
        return plane

    monkeypatch.setattr(WriteClient, "_data_plane", spy)
    return used
