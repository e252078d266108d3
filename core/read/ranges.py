"""The instants a query reads, resolved against a timeline once, for every read surface.

`resolve_as_of` (snapshot, read-optimized and time-travel queries), `incremental_range`
(incremental queries) and `change_range` (CDC queries) turn the instant times or
timestamps a caller gives into the completed instants a read sees, and refuse what
would not be stable or retained, naming the problem. `Scan` plans with them; `Table`
and the Spark surfaces reach them through `Scan` (or `Table.incremental_range` /
`Table.change_range`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.config.read import BEGIN_INSTANT
from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.read.changes import check_change_range, is_earliest
from lakeward.core.read.incremental import IncrementalRange, stable_end
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean import (
    check_as_of_retained,
    check_incremental_retained,
    first_retained_begin,
)
from lakeward.core.timeline import InstantTime, Timeline, normalize_instant_time
from lakeward.core.timeline.archived import has_archived_timeline, read_archived_entries
from lakeward.core.timeline.instant import WRITE_ACTIONS, State
from lakeward.core.timeline.instant_time import format_instant_time
from lakeward.core.timeline.metadata import rewrites_only


def resolve_as_of(storage: Storage, config: TableConfig, timeline: Timeline, as_of: InstantTime | None) -> str | None:
    """The completed write instant a read as of `as_of` sees (None: the latest).

    Refuses an `as_of` in the future, one with a write still in flight before it, one
    before every completed write, and one whose files a clean removed.
    """
    if as_of is None:
        return None
    wanted = normalize_instant_time(as_of, config.timeline_timezone)
    now = format_instant_time(dt.datetime.now(dt.UTC) if config.timeline_timezone == "UTC" else dt.datetime.now())
    if wanted > now and wanted > (timeline.latest_time() or ""):
        raise InstantNotFoundError(f"as_of {as_of!r} is in the future; a read as of it could change as commits land")
    pending = [i.time for i in timeline.pending_writes() if i.time <= wanted]
    if pending:
        raise InstantNotFoundError(
            f"as_of {as_of!r} is not stable: instant {pending[0]} before it is still in flight; "
            "read as of an earlier instant or retry when it completes"
        )
    instant = timeline.completed_write_as_of(wanted)
    if instant is None:
        first = timeline.completed_writes()[0].time if timeline.completed_writes() else None
        raise InstantNotFoundError(
            f"no completed instant at or before {as_of!r}; the earliest readable instant is {first}"
        )
    check_as_of_retained(storage, timeline, instant.time, as_of)
    return instant.time


def incremental_range(
    storage: Storage, config: TableConfig, timeline: Timeline, begin: InstantTime, end: InstantTime | None = None
) -> IncrementalRange:
    """An incremental range (begin, end]: times normalised in the timeline's time zone, the end
    moved before a write still in flight (an explicit end past one is an InstantNotFoundError),
    the range checked against what cleans retained; on table versions 8+ in completion time.
    `begin` "earliest" (or Hudi's "000") begins where the retained writes do, as a CDC query's."""
    tz = config.timeline_timezone
    from_earliest = _is_earliest(begin)
    start = "0" * 17 if from_earliest else normalize_instant_time(begin, tz)
    stop = normalize_instant_time(end, tz) if end is not None else None
    archived = _archived_write_times(storage, config, timeline, start)
    if from_earliest:
        start = _retained_begin(storage, timeline, start, stop, "incremental", archived)
    stop = stable_end(timeline, start, stop, storage)
    check_incremental_retained(storage, timeline, start, stop, archived)
    return IncrementalRange.resolve(timeline, start, stop)


def _is_earliest(begin: InstantTime) -> bool:
    return isinstance(begin, str) and is_earliest(begin.strip())


def _retained_begin(
    storage: Storage,
    timeline: Timeline,
    start: str,
    stop: str | None,
    read: str,
    archived: Sequence[str] = (),
    changes: SupplementalLoggingMode | None = None,
) -> str:
    """Where a range from "earliest" (resolved to `start`) begins: past the writes the last clean no
    longer retains (`first_retained_begin`; `changes`: a CDC query's range, on a table logging in this
    mode); a range that ends before it holds no retained write."""
    retained_from = first_retained_begin(storage, timeline, start, archived, changes=changes)
    if retained_from != start and stop is not None and stop <= retained_from:
        raise InstantNotFoundError(
            f"{read} range is empty: every change up to end {stop} was cleaned (no longer retained; the retained "
            f"changes begin after {retained_from})"
        )
    return retained_from


def _archived_write_times(storage: Storage, config: TableConfig, timeline: Timeline, begin: str) -> list[str]:
    """Version 6: the completed writes after `begin` that were archived off the active timeline (read
    from the archive), so that a clean that removed their files is seen by the retention check."""
    if not begins_in_version_6_archive(storage, config, timeline, begin):
        return []
    writes = {a.value for a in WRITE_ACTIONS}
    return sorted(
        str(r["commitTime"])
        for r in read_archived_entries(storage, config.archive_folder)
        if r.get("actionState") == State.COMPLETED.name
        and r.get("actionType") in writes
        and str(r["commitTime"]) > begin
        and not _rewrites_only(r)
    )


def _rewrites_only(entry: dict[str, Any]) -> bool:
    """Whether an archived version 6 write is a compaction or a clustering (no record changed: no
    range over it needs the files a clean deleted), as its commit metadata's operation type says."""
    meta = entry.get("hoodieReplaceCommitMetadata") or entry.get("hoodieCommitMetadata") or {}
    operation = meta.get("operationType") if isinstance(meta, dict) else None
    return rewrites_only(operation)


def _has_version_6_archive(storage: Storage, config: TableConfig) -> bool:
    """Whether the table archived instants the way version 6 does: with no way back to their files
    (8+ keeps each archived commit's metadata in the LSM history, which the timeline carries)."""
    return not config.version.lsm_history and has_archived_timeline(storage, config.archive_folder)


def begins_in_version_6_archive(storage: Storage, config: TableConfig, timeline: Timeline, begin: str) -> bool:
    """Whether a range beginning at `begin` reaches archived commits whose write stats are gone."""
    if not timeline.instants or begin >= timeline.instants[0].time:
        return False
    return _has_version_6_archive(storage, config)


def change_range(
    storage: Storage, config: TableConfig, timeline: Timeline, begin: InstantTime | None, end: InstantTime | None
) -> tuple[str, str | None]:
    """A CDC range (begin, end]: `begin` resolved ("earliest"), `end` stopped before writes still
    in flight; raises ConfigError / InstantNotFoundError naming the problem. Instant times on
    version 6, completion times on 8+ (`Timeline.completed_writes_between`)."""
    if begin is None or (isinstance(begin, str) and not begin.strip()):
        raise ConfigError(
            f"a CDC query needs a begin instant ({BEGIN_INSTANT}); use 'earliest' for all retained changes"
        )
    tz = config.timeline_timezone
    if _is_earliest(begin):
        start = str(begin).strip()
    else:
        start = normalize_instant_time(begin, tz)
    stop = normalize_instant_time(end, tz) if end is not None and str(end).strip() else None
    # Version 6's archive keeps no way back to an archived commit's files: a range cannot begin
    # before the active timeline. The LSM history of 8+ holds each archived commit's metadata
    # (the timeline carries those instants), and Hudi 1.x's incremental and CDC queries read
    # into it: there a range may begin in the history, as long as no clean removed its files.
    archived = _has_version_6_archive(storage, config)
    from_earliest = is_earliest(start)
    start, stop = check_change_range(timeline, config, start, stop, archived)
    if from_earliest:  # every retained change
        start = _retained_begin(storage, timeline, start, stop, "CDC", changes=config.cdc_mode)
    stop = stable_end(timeline, start, stop, storage)
    if not from_earliest:  # (from "earliest" the range begins after every cleaned write)
        check_incremental_retained(storage, timeline, start, stop, changes=True)
    return start, stop
