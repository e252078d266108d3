"""hudi-rs against lakeward on every state of a table that both can still read.

`tests/interop/compare.all_mismatches` compares the snapshot, time travel to every
completed write and the incremental ranges between them. Model tests that clean and
archive need the same over what is still readable:

- time travel to an instant a clean left behind its retained window is refused by
  lakeward (InstantNotFoundError, which model tests check on their own): left out;
- incremental ranges over cleaned instants likewise;
- hudi-rs 0.5.0 does not read the LSM history of table versions 8 and 9 (format
  reference §2.6): incremental ranges start at the first active instant there, and
  ranges reaching into the history are compared by model tests against lakeward alone.
  Time travel to an archived instant is compared (its files are older than the first
  active instant, which hudi-rs treats as completed).
"""

from __future__ import annotations

from lakeward.core.table import Table
from lakeward.core.table_services.clean.retention import oldest_readable_instant
from tests.interop.compare import (
    EPOCH_INSTANT,
    incremental_mismatches,
    incremental_ranges,
    snapshot_mismatches,
    write_instants,
)


def readable_states(path: str) -> tuple[list[str], list[tuple[str, str | None]]]:
    """(instants to time travel to, incremental ranges) that cleaning and archival left readable
    by both readers (see the module docstring)."""
    table = Table.open(path)
    timeline = table.timeline()
    floor = oldest_readable_instant(table.storage, timeline) or ""
    instants = [t for t in write_instants(table) if t >= floor]
    archived = {i.time for i in timeline.completed() if i.is_archived}
    lsm = table.version.lsm_history and bool(archived)
    active = [t for t in instants if not (lsm and t in archived)]
    ranges = incremental_ranges(active)
    if floor or lsm:  # (epoch, first] reaches cleaned or archived instants
        ranges = [(b, e) for b, e in ranges if b != EPOCH_INSTANT]
    return instants, ranges


def readable_mismatches(path: str, *, time_travel: bool = True) -> list[str]:
    """Where lakeward and hudi-rs disagree on the snapshot, time travel and incremental reads
    that cleaning and archival left readable (`readable_states`).

    `time_travel=False`: the incremental reads only (for model tests that compare time
    travel to the model's rows themselves)."""
    instants, ranges = readable_states(path)
    snapshots = snapshot_mismatches(path, [None, *instants]) if time_travel else []
    return snapshots + incremental_mismatches(path, ranges)
