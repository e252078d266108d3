"""A table written without meta fields (`hoodie.populate.meta.fields=false`, Hudi's virtual keys):
lakeward reads it, but refuses to write it or run a table service on it, with an error that names
the option, before anything is written; the daemon sees it as read-only."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import ConfigError, Table

FIXTURE = ("cow", "v8_simplekeygen_hivestyle_no_metafields")


def _hashes(path: str) -> dict[str, str]:
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_writes_and_services_are_refused_naming_the_option(fixture_table: Callable[[str, str], str]) -> None:
    path = fixture_table(*FIXTURE)
    table = Table.open(path)
    rows = table.read()
    assert rows.num_rows > 0  # readable
    before = _hashes(path)

    with pytest.raises(ConfigError, match=r"hoodie\.populate\.meta\.fields=false") as err:
        table.upsert(rows.slice(0, 1))
    assert "Nothing was written" in str(err.value)
    with pytest.raises(ConfigError, match=r"hoodie\.populate\.meta\.fields=false"):
        table.delete(pa.table({c: rows.column(c).slice(0, 1) for c in rows.column_names}))
    with pytest.raises(ConfigError, match=r"hoodie\.populate\.meta\.fields=false"):
        table.clean()

    assert _hashes(path) == before
    assert Table.open(path).read().num_rows == rows.num_rows
    reason = Table.open(path).read_only_reason()
    assert reason is not None and "hoodie.populate.meta.fields=false" in reason
