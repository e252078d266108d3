from __future__ import annotations

import pytest

pytest_plugins = [
    "tests.support.zookeeper",
    "tests.support.seaweedfs",
    "tests.support.fixture_tables",
    "tests.support.spark",
    "tests.support.spark_cluster",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every Spark test is also `slow`: the first one starts a JVM and a session (10-20 s on a loaded
    2-core machine) and each runs Spark jobs. `./test.sh -m "not slow"` (the fast loop) skips them;
    the default run (CI) runs every test."""
    for item in items:
        if item.get_closest_marker("spark") is not None or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
