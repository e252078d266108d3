"""Once an instant completed, what follows (removing its markers) cannot make it fail.

Found on S3: storage stalled right after a write's completed instant was stored, the marker
clean-up raised, the caller was told the write failed (while its rows were in the table) and
retried it: every row twice. Storage failing under the marker clean-up is injected here (one
storage call), the rest is real.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward.core.storage import Storage
from lakeward.core.table import Table
from lakeward.core.timeline import Timeline
from lakeward.core.write.markers import TEMP_FOLDER


@pytest.fixture
def markers_undeletable(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every removal of a marker folder fails as a stalled S3 call does; returns the folders tried."""
    tried: list[str] = []
    real = Storage.delete_dir

    def delete_dir(self: Storage, rel: str) -> None:
        if rel.startswith(TEMP_FOLDER + "/"):
            tried.append(rel)
            raise OSError(f"When deleting {rel!r}: AWS Error NETWORK_CONNECTION (injected)")
        real(self, rel)

    monkeypatch.setattr(Storage, "delete_dir", delete_dir)
    return tried


def _rows(path: Path) -> list[tuple[str, int]]:
    table = Table.open(str(path)).read(columns=["id", "v"])
    return sorted(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_completed_write_returns_when_its_markers_cannot_be_removed(
    tmp_path: Path, table_type: str, markers_undeletable: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", ordering_field="v", table_type=table_type)
    with caplog.at_level(logging.WARNING):
        first = table.insert(pa.table({"id": ["a", "b"], "v": [1, 1]}))
        second = table.upsert(pa.table({"id": ["b", "c"], "v": [2, 2]}))
    assert markers_undeletable, "the write removed no markers: the injection missed"
    assert _rows(path) == [("a", 1), ("b", 2), ("c", 2)]
    completed = [i.time for i in Timeline.load(Table.open(str(path)).storage).completed_writes()]
    assert completed == [first.instant_time, second.instant_time]  # no rollback: both writes stand
    assert any("markers" in r.getMessage() and first.instant_time in r.getMessage() for r in caplog.records)


def test_a_completed_compaction_and_rollback_report_success_when_markers_cannot_be_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", ordering_field="v", table_type="MERGE_ON_READ")
    table.insert(pa.table({"id": ["a", "b"], "v": [1, 1]}))
    table.upsert(pa.table({"id": ["b"], "v": [2]}))
    last = table.upsert(pa.table({"id": ["a"], "v": [3]})).instant_time
    tried: list[str] = []
    real = Storage.delete_dir

    def delete_dir(self: Storage, rel: str) -> None:
        if rel.startswith(TEMP_FOLDER + "/"):
            tried.append(rel)
            raise OSError("AWS Error NETWORK_CONNECTION (injected)")
        real(self, rel)

    monkeypatch.setattr(Storage, "delete_dir", delete_dir)
    table.rollback(last)
    assert _rows(path) == [("a", 1), ("b", 2)]
    planned = table.schedule_compaction(force=True)
    assert planned is not None
    compaction = table.run_compaction(planned)
    assert len(tried) >= 2, tried
    timeline = Timeline.load(Table.open(str(path)).storage)
    assert timeline.latest_completed_write().time == compaction.instant_time  # type: ignore[union-attr]
    assert _rows(path) == [("a", 1), ("b", 2)]


@pytest.mark.parametrize("service", ["hoodie.clean.automatic", "hoodie.compact.inline"])
def test_a_completed_write_returns_when_its_inline_service_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, service: str
) -> None:
    """The inline clean or compaction that runs after a write completed failed (storage stalling): the write
    raised while its rows stood, and a caller retrying it wrote them twice. The service's failure is logged;
    the next write (or the daemon) runs it again."""
    from lakeward.core.exceptions import StorageError
    from lakeward.core.table_services.clean import execute as clean_execute
    from lakeward.core.table_services.compaction import execute as compaction_execute

    path = tmp_path / "t"
    if service == "hoodie.clean.automatic":  # copy-on-write: each upsert leaves a file version to clean
        table_type, options = "COPY_ON_WRITE", {service: "true", "hoodie.cleaner.commits.retained": "1"}
    else:  # updates in log files, compacted after every delta commit
        table_type = "MERGE_ON_READ"
        options = {
            service: "true",
            "hoodie.compact.inline.max.delta.commits": "1",
            "hoodie.parquet.small.file.limit": "0",
        }
    table = Table.create(str(path), record_key="id", ordering_field="v", table_type=table_type, options=options)
    table.insert(pa.table({"id": ["a"], "v": [1]}))
    table.upsert(pa.table({"id": ["a"], "v": [1]}))

    def stalled(*args: object, **kwargs: object) -> None:
        raise StorageError("cannot create .hoodie/x: Read timeout (injected)")

    target = clean_execute.CleanService if service == "hoodie.clean.automatic" else compaction_execute.CompactionService
    monkeypatch.setattr(target, "run", stalled)
    with caplog.at_level(logging.ERROR):
        result = Table.open(str(path), options=options).upsert(pa.table({"id": ["a", "b"], "v": [2, 2]}))
    assert result.num_inserts == 1
    assert _rows(path) == [("a", 2), ("b", 2)]
    assert any(result.instant_time in r.getMessage() and "Read timeout" in r.getMessage() for r in caplog.records)
