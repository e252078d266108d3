"""Which instants are still readable after cleaning: the earliest instant the last clean retained.

A clean records `earliestCommitToRetain` in its `HoodieCleanMetadata` (and the plan's
`earliestInstantToRetain`), as Apache Hudi does. A read as of an older instant (time
travel) or an incremental read starting before it would need file slices the clean
deleted, so it fails with InstantNotFoundError naming the oldest readable instant.
Savepointed instants stay readable: cleaning keeps every file a savepoint lists.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakeward.core.cdc.extract import changes_still_readable
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.storage import Storage
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.clustering_plan import was_clustering
from lakeward.core.timeline.metadata import rewrites_only
from lakeward.core.timeline.transitions import read_commit_metadata, read_instant


def last_clean_retained(storage: Storage, timeline: Timeline) -> tuple[str, str] | None:
    """(earliest retained instant, which clean) of the latest clean that recorded one.

    A pending clean counts too, by its plan's bound: it may have deleted some of its files already
    (interrupted, or running now), and its next run deletes the rest.
    """
    found: tuple[str, str] | None = None
    for clean in reversed(timeline.completed(Action.CLEAN)):
        metadata = avro_plans.deserialize(read_instant(storage, clean), clean.file_name)
        earliest = metadata.get("earliestCommitToRetain") or ""
        if earliest:
            found = (earliest, clean.time)
            break
    for clean in timeline.pending(Action.CLEAN):
        planned = _planned_bound(storage, clean)
        if planned and (found is None or planned > found[0]):
            found = (planned, f"{clean.time} (pending)")
    return found


def _planned_bound(storage: Storage, clean: Instant) -> str:
    """The earliest instant a pending clean's plan retains ("" when the plan records none)."""
    requested = clean.with_state(State.REQUESTED)
    plan = avro_plans.deserialize(read_instant(storage, requested), requested.file_name)
    return str((plan.get("earliestInstantToRetain") or {}).get("timestamp") or "")


def savepoints(timeline: Timeline) -> list[str]:
    """Instant times of completed savepoints, oldest first (they stay readable after cleaning)."""
    return [i.time for i in timeline.completed(Action.SAVEPOINT)]


def oldest_readable_instant(storage: Storage, timeline: Timeline) -> str | None:
    """The earliest completed write a time-travel read can still use (None: nothing was cleaned)."""
    retained = last_clean_retained(storage, timeline)
    return retained[0] if retained else None


def check_as_of_retained(storage: Storage, timeline: Timeline, instant_time: str, asked: object) -> None:
    """Raise when a read as of `instant_time` needs file slices that a clean deleted."""
    retained = last_clean_retained(storage, timeline)
    if retained is None or instant_time >= retained[0] or instant_time in savepoints(timeline):
        return
    earliest, clean = retained
    raise InstantNotFoundError(
        f"instant {instant_time} (as_of {asked!r}) is no longer retained: clean {clean} deleted the file "
        f"slices needed to read as of it; the oldest readable instant is {earliest}" + _savepoint_hint(timeline)
    )


def check_incremental_retained(
    storage: Storage,
    timeline: Timeline,
    begin: str,
    end: str | None,
    archived: Sequence[str] = (),
    *,
    changes: bool = False,
) -> None:
    """Raise when an incremental range (begin, end] covers completed writes older than the retained window.

    `archived`: the times of completed writes archived off the timeline that the range reaches
    (version 6, whose timeline no longer lists them). `changes`: the range is a CDC query's
    (whose "earliest" begins where the retained writes do)."""
    retained = last_clean_retained(storage, timeline)
    if retained is None:
        return
    earliest, clean = retained
    cleaned = _cleaned_writes(storage, timeline, earliest, archived)
    lost = [t for at, t, i in cleaned if begin < at and (end is None or at <= end) and _changes(storage, timeline, i)]
    if lost:
        first_readable = _last_position(storage, timeline, cleaned) or begin
        read = "CDC query" if changes else "incremental read"
        raise InstantNotFoundError(
            f"{read} from {begin} covers instant {lost[0]}, which is no longer retained: clean {clean} "
            f"keeps the file slices of instants from {earliest} on (older ones it may have deleted); the oldest "
            f"readable instant is {earliest} (begin the range at {first_readable} or later; 'earliest' begins there)"
        )


def first_retained_begin(
    storage: Storage,
    timeline: Timeline,
    begin: str,
    archived: Sequence[str] = (),
    *,
    changes: SupplementalLoggingMode | None = None,
) -> str:
    """The earliest exclusive begin, at or after `begin`, of a range whose writes the last clean retains:
    the position (instant time; completion time on layout 2) of the last write before its earliest
    commit to retain (compactions, clusterings and savepointed writes aside), whose files it may have
    deleted (Hudi's rule: a write's files are not checked one by one). Where a range from "earliest" begins.
    `archived`: as for `check_incremental_retained`. `changes`: the range is a CDC query's, on a table
    logging in this mode: a savepointed write counts as kept only while its changes can be read (the
    savepoint keeps its files, not the earlier versions its images may come from)."""
    retained = last_clean_retained(storage, timeline)
    if retained is None:
        return begin
    return max(
        begin,
        _last_position(storage, timeline, _cleaned_writes(storage, timeline, retained[0], archived, changes)) or "",
    )


def _cleaned_writes(
    storage: Storage,
    timeline: Timeline,
    earliest: str,
    archived: Sequence[str] = (),
    changes: SupplementalLoggingMode | None = None,
) -> list[tuple[str, str, Instant | None]]:
    """(position in a range, instant time, the instant) of the completed writes before the retained
    bound `earliest`, by position, that may have lost their file slices to a clean: on layout 2 a range
    is of completion times, and a write whose instant time is at or before a range's begin may complete
    inside it; the retained window is by instant time (the clean's earliest commit to retain). `archived`
    (version 6's archived writes, by time) carry no instant.

    A compaction changes no record: a range over one whose slice is older than the bound still reads
    the data writes after it from the compacted slice, which the clean kept. Nor does a clustering (its
    rows keep their commit times; its files are the live ones), planned before the bound and completed
    inside ranges that begin after it. A savepointed instant's slices stay (for a CDC query's range,
    `changes`, only while its changes can be read: `changes_still_readable`). Compactions and clusterings
    named by their plan files are left out here; those archived into the LSM history (plan files gone)
    are told by `_changes`, which reads their commit metadata, only for the writes a caller asks about."""
    kept = set(savepoints(timeline))
    found = {(t, t): None for t in archived if t < earliest and t not in kept}
    for i in timeline.completed_writes():
        if i.time >= earliest or timeline.was_compaction(i.time):
            continue
        if i.time not in kept or (changes is not None and not changes_still_readable(storage, timeline, i, changes)):
            found[(i.ordering_time, i.time)] = i
    return sorted(((at, t, i) for (at, t), i in found.items()), key=lambda w: (w[0], w[1]))


def _changes(storage: Storage, timeline: Timeline, instant: Instant | None) -> bool:
    """Whether a cleaned write (`_cleaned_writes`) changed records: not a clustering, nor a compaction
    archived into the LSM history (whose `compaction.requested` went with it)."""
    if instant is None:
        return True
    if instant.action is Action.REPLACE_COMMIT:
        return not was_clustering(storage, timeline, instant.time)
    if instant.action is Action.COMMIT and instant.archive_file is not None:
        return not rewrites_only(read_commit_metadata(storage, instant).operationType)
    return True


def _last_position(
    storage: Storage, timeline: Timeline, cleaned: Sequence[tuple[str, str, Instant | None]]
) -> str | None:
    """The position of the last of `cleaned` that changed records (None: none did)."""
    return next((at for at, _, i in reversed(cleaned) if _changes(storage, timeline, i)), None)


def _savepoint_hint(timeline: Timeline) -> str:
    saved = savepoints(timeline)
    return f" (savepointed instants, readable too: {', '.join(saved)})" if saved else ""
