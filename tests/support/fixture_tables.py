"""Hudi tables made by Apache Hudi (Spark), zipped next to the SQL that made them.

The zips live in the shared folder, `<repo>/../shared/fixtures/hudi-tables/<kind>/<name>.zip`
(override the shared folder with the environment variable LAKEWARD_SHARED_DIR), where
`<kind>` is `cow`, `mor/avro` or `mor/parquet`. The fixture `fixture_table` is a factory:
`fixture_table("cow", "v6_nonpartitioned")` unzips a fresh copy into the test's tmp_path
and returns the table's base path.
"""

from __future__ import annotations

import os
import posixpath
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from lakeward import Table
from lakeward.core.config.table import update_table_properties
from lakeward.core.file_group.metadata_listing import read_table_properties

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """The shared folder: $LAKEWARD_SHARED_DIR, else `shared` next to the repository."""
    override = os.environ.get("LAKEWARD_SHARED_DIR")
    return Path(override).resolve() if override else REPO_ROOT.parent / "shared"


def fixture_tables_dir() -> Path:
    """Table version 6 fixtures (Hudi 0.14/0.15)."""
    return shared_dir() / "fixtures" / "hudi-tables"


def v8_v9_fixture_tables_dir() -> Path:
    """Table version 8 (Hudi 1.0.x) and 9 (Hudi 1.1.x) fixtures."""
    return shared_dir() / "fixtures" / "hudi-tables-v8-v9"


def _names(kind: str, root: Path | None = None) -> list[str]:
    folder = (root or fixture_tables_dir()) / kind
    return sorted(p.stem for p in folder.glob("*.zip")) if folder.is_dir() else []


#: The `_meta` fixtures of hudi-tables-v8-v9 (kind, name): Hudi 1.1 tables with a metadata table.
META_FIXTURES = [
    ("cow", "v9_txns_complex_meta"),
    ("cow", "v9_txns_nonpart_meta"),
    ("cow", "v9_txns_simple_meta"),
    ("mor/avro", "v9_txns_complex_meta"),
    ("mor/avro", "v9_txns_simple_meta"),
]

#: Names of the copy-on-write fixture tables found on disk, e.g. "v6_nonpartitioned".
COW_FIXTURES: list[str] = _names("cow")

FIXTURE_KINDS = ("cow", "mor/avro", "mor/parquet")


def all_fixtures() -> list[tuple[str, str]]:
    """(kind, name) of every fixture table of every table version (v6, v8, v9), for one test matrix.

    Names are unique across the two folders (they start with their version), so `unzip_table`
    finds a table by kind and name alone.
    """
    return [
        (kind, name)
        for root in (fixture_tables_dir(), v8_v9_fixture_tables_dir())
        for kind in FIXTURE_KINDS
        for name in _names(kind, root)
    ]


def _archive(kind: str, name: str) -> Path:
    """The zip of a fixture: the v6 folder first, then the v8/v9 one."""
    for root in (fixture_tables_dir(), v8_v9_fixture_tables_dir()):
        candidate = root / kind / f"{name}.zip"
        if candidate.is_file():
            return candidate
    return fixture_tables_dir() / kind / f"{name}.zip"


def _skipped(member: str) -> bool:
    parts = member.split("/")
    return parts[0] == "__MACOSX" or parts[-1] == ".DS_Store"


def unzip_table(kind: str, name: str, dest: Path) -> Path:
    """Unzip `<kind>/<name>.zip` under `dest`; return the table's base path (holds .hoodie)."""
    archive = _archive(kind, name)
    if not archive.is_file():
        available = _names(kind)
        pytest.fail(
            f"fixture table {kind}/{name} not found at {archive} "
            f"(available in {kind}: {available}; set LAKEWARD_SHARED_DIR to the shared folder)",
            pytrace=False,
        )
    with zipfile.ZipFile(archive) as zf:
        members = [
            m
            for m in zf.infolist()
            if not _skipped(m.filename) and not posixpath.normpath(m.filename).startswith(("/", ".."))
        ]
        tops = {m.filename.split("/", 1)[0] for m in members}
        # Zips hold one folder named after the table; a zip of the table's content
        # (.hoodie/ at the top) is unpacked into a folder named `name`.
        folder = tops.pop() if len(tops) == 1 and ".hoodie" not in tops else None
        # dest/<kind>/<folder>/; a second copy of the same table goes to dest/<kind>-2/...
        slug = kind.replace("/", "-")
        parent, copy = dest / slug, 1
        while (parent / (folder or name)).exists():
            copy += 1
            parent = dest / f"{slug}-{copy}"
        root = parent if folder else parent / name
        root.mkdir(parents=True, exist_ok=True)
        for member in members:
            zf.extract(member, root)
    base = parent / (folder or name)
    if not (base / ".hoodie").is_dir():
        pytest.fail(f"{archive} holds no table folder with a .hoodie/ inside", pytrace=False)
    return base


@pytest.fixture
def fixture_table(tmp_path: Path) -> Callable[[str, str], str]:
    """Factory: `fixture_table(kind, name)` -> base path (str) of a fresh unzipped copy."""

    def make(kind: str, name: str) -> str:
        return str(unzip_table(kind.strip("/"), name, tmp_path / "fixture-tables"))

    return make


#: A metadata-table partition lakeward neither keeps nor drops yet (one of Hudi 1.x's expression indexes).
UNMAINTAINED_PARTITION = "expression_index_amount_idx"


def with_unmaintained_index(path: str | Path) -> Path:
    """Give a `_meta` fixture copy a metadata partition lakeward cannot maintain nor drops by itself
    (`UNMAINTAINED_PARTITION`, listed in `hoodie.table.metadata.partitions`, an empty folder), so that
    it stays read-only for lakeward's table services; its base path. (Its secondary indexes alone no
    longer do: lakeward drops them before its first write or service.)"""
    storage = Table.open(str(path)).storage
    listed = read_table_properties(storage)["hoodie.table.metadata.partitions"].split(",")
    partitions = ",".join(sorted([*listed, UNMAINTAINED_PARTITION]))
    update_table_properties(storage, {"hoodie.table.metadata.partitions": partitions})
    (Path(path) / ".hoodie" / "metadata" / UNMAINTAINED_PARTITION).mkdir()
    return Path(path)
