from __future__ import annotations

import os

import pytest

pytest_plugins = [
    "tests.support.zookeeper",
    "tests.support.seaweedfs",
    "tests.support.fixture_tables",
    "tests.support.spark",
    "tests.support.spark_cluster",
]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every Spark test is also `slow`: the first one starts a JVM and a session (10-20 s on a loaded
    2-core machine) and each runs Spark jobs. `./test.sh -m "not slow"` (the fast loop) skips them;
    the default run (CI) runs every test.

    `soak` tests (30 minutes by default) are deselected, not skipped, unless asked for: a marker
    expression naming `soak` (`-m soak`) or LAKEWARD_SOAK=1 (`-m slow` alone does not run them)."""
    for item in items:
        if item.get_closest_marker("spark") is not None or "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if "soak" in (config.getoption("markexpr") or "") or os.environ.get("LAKEWARD_SOAK") == "1":
        return
    soaks = [item for item in items if item.get_closest_marker("soak") is not None]
    if soaks:
        config.hook.pytest_deselected(items=soaks)
        items[:] = [item for item in items if item.get_closest_marker("soak") is None]


#: Seconds (setup + call + teardown) and tests per test file, for the summary's slowest files.
_FILE_SECONDS: dict[str, list[float]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    spent = _FILE_SECONDS.setdefault(report.nodeid.split("::", 1)[0], [0.0, 0.0])
    spent[0] += report.duration
    if report.when == "call":
        spent[1] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The 25 test files that took longest (the suite's time budget is spent per file as much as per test)."""
    if not _FILE_SECONDS:
        return
    slowest = sorted(_FILE_SECONDS.items(), key=lambda item: item[1][0], reverse=True)[:25]
    terminalreporter.section("slowest 25 test files")
    for path, (seconds, tests) in slowest:
        terminalreporter.write_line(f"{seconds:8.1f}s {int(tests):4d} tests  {path}")


@pytest.fixture(autouse=True)
def _fresh_instant_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with lakeward's instant clock unset: it issues times after the last one it
    issued in this process, so a test that wrote instants in the far future (2099...) would
    otherwise push every later test's instants there (and their "newer than" rules with them)."""
    from lakeward.core.timeline import instant_time

    monkeypatch.setattr(instant_time, "_last_issued", "")
