"""The folder-to-package mapping in pyproject.toml lists every package (a wheel would miss others)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "lakeward": "lakeward",
    "core": "lakeward.core",
    "services": "lakeward.services",
    "pyspark_lakeward": "pyspark_lakeward",
}


def test_every_package_folder_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join([package, *rel.parts]) if rel.parts else package)
    assert found == listed


def test_console_script_is_declared():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"lakeward": "lakeward.services.cli:main"}


def test_every_web_ui_file_is_package_data() -> None:
    """The web UI's templates and static files ship in the wheel (they are not Python modules)."""
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "lakeward.services.api"
    ]
    api = ROOT / "services" / "api"
    files = [p for folder in ("templates", "static") for p in (api / folder).rglob("*") if p.is_file()]
    assert files
    missing = [str(p.relative_to(api)) for p in files if not any(p.relative_to(api).match(g) for g in globs)]
    assert missing == []
