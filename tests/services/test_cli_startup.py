"""`lakeward` starts without loading the library, the HTTP client or the daemon; --version; help shows
flags as flags; listings print their empty result the same way."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pyarrow as pa
from typer.testing import CliRunner

from lakeward import Table
from lakeward.services.cli import _pause_cell, app

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ["pyarrow", "polars", "numpy", "fastapi", "httpx", "pydantic_settings", "pyspark", "lakeward.core.table"]
runner = CliRunner()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from lakeward.services.cli import main; sys.argv = ['lakeward', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_importing_the_cli_loads_none_of_the_heavy_modules() -> None:
    code = f"import sys, lakeward.services.cli; print([m for m in {HEAVY!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


#: What a table command (`show`, `timeline`, `plans`, `savepoints` on a path) leaves unimported: pandas
#: (`pyarrow.dataset` pulls it in) and polars; Arrow compute and Parquet, Avro (a version 6 table's
#: timeline is JSON) and kazoo (no lock is taken); and the parts of lakeward a listing does not use: the
#: write path, table services, reads, indexes, CDC, the metadata-table bootstrap, the v6 archive and log
#: block decoding, health and Spark. Each costs start-up time (issue 23: under 0.5 s).
NOT_FOR_TABLE_COMMANDS = [
    "pandas",
    "polars",
    "pyarrow.dataset",
    "pyarrow.compute",
    "pyarrow.parquet",
    "fastavro",
    "kazoo",
    "lakeward.core.locks.zookeeper",
    "lakeward.core.write.client",
    "lakeward.core.write.plane.local",
    "lakeward.core.table_services.namespace",
    "lakeward.core.table_services.registry",
    "lakeward.core.read.scan",
    "lakeward.core.read.ranges",
    "lakeward.core.read.changes",
    "lakeward.core.read.spark",
    "lakeward.core.index.secondary.api",
    "lakeward.core.cdc",
    "lakeward.core.metadata_table.bootstrap",
    "lakeward.core.file_group.integrity",
    "lakeward.core.file_group.log_file.content",
    "lakeward.core.timeline.archived",
    "lakeward.core.health",
    "lakeward.core.spark",
]


def test_table_commands_leave_the_dataframe_libraries_and_option_validators_unloaded(tmp_path) -> None:
    """Table commands import none of NOT_FOR_TABLE_COMMANDS, and with no options given build no pydantic
    validator (each costs start-up time)."""
    assert all(importlib.util.find_spec(m) for m in NOT_FOR_TABLE_COMMANDS)  # no misspelt name passes vacuously
    table = Table.create(str(tmp_path / "t"), record_key="id")
    table.upsert(pa.table({"id": [1]}))
    code = (
        "import sys\nfrom lakeward.services.cli import main\n"
        "try:\n    main()\nfinally:\n"
        "    write = sys.modules.get('lakeward.core.config.write')\n"
        f"    lazy = {NOT_FOR_TABLE_COMMANDS!r}\n"
        "    complete = write is not None and write.WriteConfig.__pydantic_complete__\n"
        "    print('LOADED', [m for m in lazy if m in sys.modules], complete)"
    )
    for command in ("show", "timeline", "plans", "savepoints"):
        done = subprocess.run(
            [sys.executable, "-c", code, command, table.path], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "LOADED [] False", (command, done.stdout)


def test_version_is_the_package_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    done = _cli("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"lakeward {version}"


def test_help_shows_flags_without_a_type() -> None:
    for args in (["--help"], ["show", "--help"], ["index", "show", "--help"]):
        done = _cli(*args)
        assert done.returncode == 0, done.stderr
        assert "<bool>" not in done.stdout
    assert "--json" in _cli("show", "--help").stdout


def test_empty_listings_print_alike(tmp_path) -> None:
    table = Table.create(str(tmp_path / "t"), record_key="id")
    table.upsert(pa.table({"id": [1]}))
    plans = runner.invoke(app, ["plans", table.path])
    savepoints = runner.invoke(app, ["savepoints", table.path])
    assert plans.exit_code == savepoints.exit_code == 0
    assert plans.output == "no pending plans\n"
    assert savepoints.output == "no savepoints\n"
    assert json.loads(runner.invoke(app, ["plans", table.path, "--json"]).output) == []
    assert json.loads(runner.invoke(app, ["savepoints", table.path, "--json"]).output) == []


def test_pause_cell_names_reason_and_replica() -> None:
    on_call = {"paused": True, "paused_by": "on-call", "pause_reason": "incident 42", "paused_via": "r-1"}
    assert _pause_cell(on_call).startswith("by on-call: incident 42 (via r-1")
    assert _pause_cell({"paused": True, "paused_by": "policy"}) == "by policy (settings)"
    assert _pause_cell({"paused": False}) == "no"
