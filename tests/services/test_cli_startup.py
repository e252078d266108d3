"""`lakeward` starts without loading the library, the HTTP client or the daemon; --version; help shows
flags as flags; listings print their empty result the same way."""

from __future__ import annotations

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


def test_table_commands_leave_the_dataframe_libraries_and_option_validators_unloaded(tmp_path) -> None:
    """`show` and `timeline` open a table: that imports neither pandas (pyarrow.dataset pulls it in) nor
    polars, and with no options given builds no pydantic validator (each costs start-up time)."""
    table = Table.create(str(tmp_path / "t"), record_key="id")
    table.upsert(pa.table({"id": [1]}))
    code = (
        "import sys\nfrom lakeward.services.cli import main\n"
        "try:\n    main()\nfinally:\n"
        "    write = sys.modules['lakeward.core.config.write']\n"
        "    lazy = ['pandas', 'polars', 'pyarrow.dataset']\n"
        "    print('LOADED', [m for m in lazy if m in sys.modules], write.WriteConfig.__pydantic_complete__)"
    )
    for command in ("show", "timeline"):
        done = subprocess.run(
            [sys.executable, "-c", code, command, table.path], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "LOADED [] False", done.stdout


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
