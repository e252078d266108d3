"""One local SparkSession for the whole test session (starting Spark takes seconds)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Local Spark: 2 cores, a task may fail and be retried (local[2,4]), UI off, few shuffle partitions."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("lakeward-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4")
        .config("spark.sql.warehouse.dir", str(warehouse))
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


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
