"""A writer that disables a metadata-table partition drops it under the table lock.

Dropping rewrites `hoodie.properties` (`hoodie.table.metadata.partitions`); done beside a concurrent
writer that rewrites it too, one of the two changes would be lost (a dropped partition listed
again, or a built one forgotten). While another writer holds the table lock the drop waits, and
happens once the lock is free.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.locks import InProcessLockProvider
from tests.support.metadata_tables import table_with_metadata

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.int64())])


def _rows(n: int, ts: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": f"k{i:02d}", "part": f"p{i % 3}", "ts": ts, "val": i} for i in range(n)], schema=SCHEMA
    )


def _listed(path: str) -> set[str]:
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    return set(props["hoodie.table.metadata.partitions"].split(","))


def test_partition_drop_waits_for_the_table_lock(tmp_path: Path):
    path = str(tmp_path / "t")
    table_with_metadata(path, 8, "COPY_ON_WRITE", _rows(9, 1))
    Table.open(path, options={"hoodie.metadata.record.index.enable": "true"}).upsert(_rows(3, 2))
    assert _listed(path) == {"files", "record_index"}
    holder = InProcessLockProvider(path)  # another writer of the table, in another thread
    holder.acquire()
    errors: list[BaseException] = []

    def disabling_writer() -> None:
        try:
            Table.open(path, options={"hoodie.metadata.record.index.enable": "false"}).upsert(_rows(3, 3))
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)

    writer = threading.Thread(target=disabling_writer)
    try:
        writer.start()
        time.sleep(1.5)
        assert writer.is_alive()
        assert _listed(path) == {"files", "record_index"}  # not dropped while the lock is held
        assert (Path(path) / ".hoodie" / "metadata" / "record_index").is_dir()
    finally:
        holder.release()
    writer.join(timeout=60)
    assert not writer.is_alive() and not errors, errors
    assert _listed(path) == {"files"}
    assert not (Path(path) / ".hoodie" / "metadata" / "record_index").exists()
