"""`timeline/archived.py`: the version-6 archived timeline read back after archival."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from lakeward.core.table import Table
from lakeward.core.timeline.archived import (
    has_archived_timeline,
    latest_archive_version,
    parse_archive_version,
    read_archived_entries,
)


def test_parse_archive_version_reads_only_archive_file_names() -> None:
    assert parse_archive_version(".commits_.archive.12_1-0-1") == 12
    assert parse_archive_version(".commits_.archive.x_1-0-1") is None
    assert parse_archive_version("20260101000000000.commit") is None


def test_archived_instants_read_back_after_each_archival(tmp_path: Path) -> None:
    options = {"hoodie.keep.min.commits": 2, "hoodie.keep.max.commits": 3}
    table = Table.create(str(tmp_path / "t"), record_key="id", ordering_field="ts", options=options)
    assert not has_archived_timeline(table.storage)
    assert latest_archive_version(table.storage) == 0
    assert read_archived_entries(table.storage) == []
    times = [table.upsert(pa.table({"id": [i], "ts": [i]})).instant_time for i in range(4)]
    result = table.archive()
    assert has_archived_timeline(table.storage)
    assert latest_archive_version(table.storage) == 1
    archived = {(r["commitTime"], r["actionState"]) for r in read_archived_entries(table.storage)}
    assert {t for t, _ in archived} == set(times[:2]) == {a.split(".")[0] for a in result.archived}
    assert {s for _, s in archived} == {"REQUESTED", "INFLIGHT", "COMPLETED"}
    for i in range(4, 6):
        table.upsert(pa.table({"id": [i], "ts": [i]}))
    table.archive()
    assert latest_archive_version(table.storage) == 2
