"""Two attempts wrote the same base file version: the view keeps the copy the write's commit lists.

A retried task can leave a second base file of one file id and instant (another write token).
The view asks the commit metadata of the write at that instant which copy counts. Other
actions can carry the same instant time (a savepoint always does; a clean or rollback may),
and their metadata lists no data files: only the write's commit metadata is asked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.timeline import Action

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.int64())])


def _timeline_dir(table: Table) -> Path:
    return Path(table.storage.full_path(".hoodie/timeline" if table.version.number >= 8 else ".hoodie"))


@pytest.mark.parametrize("version", [6, 8])
def test_the_view_keeps_the_copy_the_write_lists_when_a_clean_shares_its_instant_time(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "t"
    table = Table.create(
        str(path),
        record_key="id",
        ordering_field="ts",
        table_version=version,
        options={"hoodie.cleaner.commits.retained": "1"},
    )

    def upsert(v: int) -> str:
        return table.upsert(pa.Table.from_pylist([{"id": "k", "ts": v, "v": v}], schema=SCHEMA)).instant_time

    upsert(1)
    older = upsert(2)
    latest = upsert(3)
    cleaned = table.clean()
    assert cleaned is not None
    clean = cleaned.instant_time
    # The clean's instant files take the latest write's instant time (completion time kept).
    folder = _timeline_dir(table)
    for name in os.listdir(folder):
        if name.startswith((f"{clean}.", f"{clean}_")):
            os.rename(folder / name, folder / (latest + name[len(clean) :]))
    timeline = Table.open(str(path)).timeline()
    assert [i.action for i in timeline.find(latest) if i.is_completed] == [Action.CLEAN, Action.COMMIT]

    # A second attempt's copy of the latest base file, holding the older version's rows.
    bases = {parse_base_file_name(p.name): p for p in path.glob("*.parquet")}
    [(committed_name, committed)] = [(b, p) for b, p in bases.items() if b and b.instant_time == latest]
    [older_file] = [p for b, p in bases.items() if b and b.instant_time == older]
    stray = path / committed.name.replace(f"_{committed_name.write_token}_", "_9-9-9_")
    stray.write_bytes(older_file.read_bytes())

    entries = [e for e in table.storage.list_dir("", recursive=True) if not e.path.startswith(".hoodie")]
    stray_first = sorted(entries, key=lambda e: e.path != stray.name)
    for listing in (stray_first, list(reversed(stray_first))):
        view = FileSystemView(timeline, listing, table.storage)
        [latest_slice] = view.latest_file_slices()
        assert latest_slice.base_file is not None and latest_slice.base_file.name == committed.name
    assert table.read(columns=["v"]).to_pylist() == [{"v": 3}]
