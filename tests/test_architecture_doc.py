"""docs/architecture.md names what the tree holds: every core package in its layers picture, and
every module of the packages its "Where things live" section maps."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_import_graph import CORE_LAYERS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text()
#: The packages whose modules the section "Where things live" lists one by one.
MAPPED = ("core/metadata_table", "core/read", "core/cdc", "services")


def _section(title: str) -> str:
    start = DOC.index(f"## {title}")
    end = DOC.find("\n## ", start + 1)
    return DOC[start : end if end > 0 else len(DOC)]


def test_layers_picture_names_every_core_package():
    picture = re.search(r"## Layers.*?```\n(.*?)```", DOC, re.S)
    assert picture is not None
    words = set(re.findall(r"[a-z_]+", picture.group(1)))
    missing = sorted(name for layer in CORE_LAYERS for name in layer if name not in words)
    assert not missing, f"docs/architecture.md's layers picture lacks {missing} (CORE_LAYERS of test_import_graph.py)"


def test_module_map_lists_every_module():
    where = _section("Where things live")
    missing = [
        f"{package}/{module.name}"
        for package in MAPPED
        for module in sorted((ROOT / package).glob("*.py"))
        if module.name != "__init__.py" and f"`{module.name}`" not in where and f"{module.name}`" not in where
    ]
    missing += [
        f"{package}/{sub.name}/"
        for package in MAPPED
        for sub in sorted((ROOT / package).iterdir())
        if (sub / "__init__.py").exists() and f"`{sub.name}/`" not in where
    ]
    assert not missing, f"docs/architecture.md (Where things live) does not list {missing}"
