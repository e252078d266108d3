"""`Table.poll_changes`: a consumer that polls while writers commit gets every commit once.

On versions 8+ ranges are in completion time, so the next poll cannot begin at the last change's
`ts_ms` (an instant time: the range would hold that commit again), and a write that began before
the last poll but completed after it must still come. The position a poll returns is where the
next one begins.
"""

from __future__ import annotations

import threading
from collections import Counter

import pyarrow as pa
import pytest

from lakeward import Table
from lakeward.core.exceptions import ConcurrentWriteError

WRITES = 24


@pytest.mark.parametrize(("version", "table_type"), [(6, "COPY_ON_WRITE"), (9, "MERGE_ON_READ"), (9, "COPY_ON_WRITE")])
def test_polling_beside_writers_delivers_every_commit_once(tmp_path, version, table_type):
    path = str(tmp_path / "t")
    options = {"hoodie.table.cdc.enabled": "true"}
    Table.create(
        path, record_key="id", ordering_field="ts", table_version=version, table_type=table_type, options=options
    )
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        table = Table.open(path)
        try:
            for i in range(WRITES // 2):  # each write: one new key, and the shared key again
                batch = pa.table({"id": [f"w{writer}-{i:02d}", "shared"], "ts": [i, 100 * writer + i], "v": [i, i]})
                while True:
                    try:
                        table.upsert(batch)
                        break
                    except ConcurrentWriteError:
                        continue  # the other writer completed first on the same file group: again
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(n,)) for n in (1, 2)]
    for thread in writers:
        thread.start()
    consumer = Table.open(path)
    position, seen = "earliest", Counter[tuple[object, ...]]()

    def poll() -> int:
        nonlocal position
        changes, position = consumer.poll_changes(position)
        seen.update(_rows(changes))
        return changes.num_rows

    while any(thread.is_alive() for thread in writers):
        poll()
    for thread in writers:
        thread.join()
    assert not errors, errors[0]
    poll()  # whatever completed after the last poll of the loop
    assert poll() == 0  # and nothing twice

    assert seen == Counter(_rows(Table.open(path).read_changes("earliest")))
    commits = {i.time for i in Table.open(path).timeline().completed_writes()}
    assert {row[1] for row in seen} == commits and len(commits) == WRITES


def _rows(changes: pa.Table) -> list[tuple[object, ...]]:
    return list(zip(*(changes.column(c).to_pylist() for c in ("op", "ts_ms", "before", "after")), strict=True))
