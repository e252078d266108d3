"""The change log a sequence of writes implies, worked out from the input batches alone.

A plain dict model of a table with one record key and one partition column: each write
applies to it and records the changes Hudi's CDC defines (insert `i`, update `u` with both
images, delete `d`), tagged with the commit it belongs to. Tests compare CDC queries with
slices of this log. It knows nothing of lakeward.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

Row = dict[str, Any]


@dataclass
class Change:
    instant: str
    op: str
    key: str
    before: Row | None
    after: Row | None

    def as_tuple(self) -> tuple[Any, ...]:
        def frozen(row: Row | None) -> Any:
            return None if row is None else tuple(sorted(row.items()))

        return (self.instant, self.op, self.key, frozen(self.before), frozen(self.after))


@dataclass
class ChangeModel:
    key: str
    partition: str
    rows: dict[str, Row] = field(default_factory=dict)
    log: list[Change] = field(default_factory=list)

    def upsert(self, instant: str, batch: Iterable[Row]) -> None:
        for row in batch:
            k = str(row[self.key])
            old = self.rows.get(k)
            self.rows[k] = dict(row)
            self.log.append(Change(instant, "u" if old is not None else "i", k, old, dict(row)))

    def delete(self, instant: str, keys: Iterable[str]) -> None:
        for k in keys:
            old = self.rows.pop(k, None)
            if old is not None:
                self.log.append(Change(instant, "d", k, old, None))

    def delete_partitions(self, instant: str, partitions: Sequence[str]) -> None:
        self.delete(instant, [k for k, r in list(self.rows.items()) if str(r[self.partition]) in partitions])

    def insert_overwrite(self, instant: str, batch: Sequence[Row]) -> None:
        self.delete_partitions(instant, sorted({str(r[self.partition]) for r in batch}))
        self.upsert(instant, batch)

    def changes(self, begin: str, end: str | None) -> list[tuple[Any, ...]]:
        """The changes of commits in (begin, end], as comparable tuples (order-free within a commit)."""
        return sorted(c.as_tuple() for c in self.log if c.instant > begin and (end is None or c.instant <= end))


def read_as_changes(table: Any, rows: Iterable[Row], key: str) -> list[tuple[Any, ...]]:
    """CDC query rows (`images="struct"`) as the model's comparable tuples."""
    out = []
    for r in rows:
        image = r["after"] if r["after"] is not None else r["before"]
        out.append(Change(r["ts_ms"], r["op"], str(image[key]), r["before"], r["after"]).as_tuple())
    return sorted(out)
