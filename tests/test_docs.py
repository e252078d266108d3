"""The docs: the site builds strictly, generated reference pages match the code, and the README's
quick start runs as pasted (its Python blocks are examples/*.py verbatim, and those run)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _mkdocs(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(project / "mkdocs.yml"), "-d", str(site)],
        cwd=project,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_generated_reference_pages_match_the_code() -> None:
    gen = _gen_docs()
    for name, generate in gen.PAGES.items():
        assert (ROOT / name).read_text() == generate(), f"{name} is stale: run scripts/gen_docs.py"


def test_every_option_has_a_description() -> None:
    from lakeward.core.config.write import TABLE_CREATE_KEYS, WriteConfig
    from lakeward.core.locks import LockConfig
    from lakeward.core.spark.datasource import READ_KEYS

    keys = {str(f.alias) for model in (WriteConfig, LockConfig) for f in model.model_fields.values()}
    keys |= set(TABLE_CREATE_KEYS) | set(READ_KEYS)
    assert sorted(k for k in keys if not _gen_docs().DESCRIPTIONS.get(k)) == []
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert [k for k in sorted(keys) if f"`{k}`" not in page] == []
    for env in ("LAKEWARD_ZOOKEEPER__HOSTS", "LAKEWARD_HTTP__API_TOKENS", "LAKEWARD_REPLICA_ID"):
        assert env in page


def test_site_builds_strictly_and_a_broken_link_fails_it(tmp_path: Path) -> None:
    built = _mkdocs(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "configuration" / "index.html").exists()

    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copytree(ROOT / "examples", copy / "examples")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    with (copy / "docs" / "cli.md").open("a") as page:
        page.write("\nSee [the missing page](no-such-page.md).\n")
    broken = _mkdocs(copy, tmp_path / "broken-site")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr


def test_readme_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(((?:docs|examples)/[^)#]+)", readme)
    assert targets
    assert [t for t in targets if not (ROOT / t).exists()] == []


def test_readme_python_blocks_are_the_examples() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert sorted(blocks) == sorted(p.read_text() for p in EXAMPLES)


EXPECTED = {
    "quickstart.py": "1 1\n"
    "[{'trip_id': 't1', 'fare': 19.1}, {'trip_id': 't2', 'fare': 30.0}, {'trip_id': 't3', 'fare': 8.5}]\n"
    "2\n3\n['t2', 't3']\n2\n['t2', 't3']\n",
    "merge_on_read.py": "['B', 'a']\n['a', 'b']\n['B', 'a']\n",
}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_run_as_pasted(example: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(example)],
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == EXPECTED[example.name]
