"""The metadata table's own clean, as Hudi's metadata writer runs it (`cleanIfNecessary`).

After a metadata compaction the older file slices of the `files` file group (the previous base
HFile and the log files folded into the new one) are read by nobody once readers moved on. The
metadata clean deletes them with Hudi's metadata-table policy, KEEP_LATEST_COMMITS retaining
`hoodie.metadata.cleaner.commits.retained` (default 20) completed metadata commits: every slice
a read as of one of those commits needs stays (the same planner as the data table's clean,
`table_services.clean.plan`, over the metadata table's own timeline and file-system view).

As in Hudi, a clean is considered only once a metadata compaction completed and at least
`MIN_INSTANTS_AFTER_COMPACTION` (3) metadata instants completed after it, so that a reader that
opened the old slice's files just before the compaction can finish. The clean is an instant of
the metadata table (`<t>.clean.requested` with the `HoodieCleanerPlan`, `.inflight`, then
`<t>_<c>.clean` with the `HoodieCleanMetadata`); it has no record in the `files` partition (the
metadata table has no metadata table); on version 6 the clean's instant time is the latest
metadata delta commit's plus `002`, as Hudi 0.x names it. Killed at any point, the pending plan
is run again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lakeward.core.config.write import WriteConfig
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.metadata_table.compaction import last_metadata_compaction, mdt_timeline
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.execute import clean_metadata, delete_files
from lakeward.core.table_services.clean.plan import KEEP_LATEST_COMMITS, CleanPlan, pending_cleans, plan_clean
from lakeward.core.table_version import rules_for_layout
from lakeward.core.timeline import Action, Instant, State, Timeline
from lakeward.core.timeline.instant_time import new_instant_time
from lakeward.core.timeline.transitions import complete, create_requested, read_instant, transition_to_inflight

#: Hudi's option and its default for the metadata table's clean.
COMMITS_RETAINED_KEY = "hoodie.metadata.cleaner.commits.retained"
DEFAULT_COMMITS_RETAINED = 20
#: Metadata instants that must complete after the last metadata compaction before a clean (Hudi: 3).
MIN_INSTANTS_AFTER_COMPACTION = 3


@dataclass(frozen=True)
class MetadataCleanResult:
    """What one metadata clean deleted (paths relative to the metadata table's base path)."""

    instant_time: str
    files: tuple[str, ...]


def clean_is_due(mdt: Timeline) -> bool:
    """Hudi's gate: a metadata compaction completed and at least 3 metadata instants completed after it."""
    last = last_metadata_compaction(mdt)
    if last is None:
        return False
    return sum(1 for i in mdt.completed() if i.time > last.time) >= MIN_INSTANTS_AFTER_COMPACTION


def plan_metadata_clean(storage: Storage, mdt: Timeline, retained: int, timezone: str) -> CleanPlan:
    """The files a metadata clean would delete now (pure)."""
    config = WriteConfig.model_validate(
        {"hoodie.cleaner.policy": KEEP_LATEST_COMMITS, "hoodie.cleaner.commits.retained": retained}
    )
    mdt_storage = metadata_storage(storage)
    return plan_clean(mdt_storage, mdt, FileSystemView.load(mdt_storage, mdt), config, timezone)


def schedule_metadata_clean(
    storage: Storage, retained: int = DEFAULT_COMMITS_RETAINED, timezone: str = "LOCAL"
) -> str | None:
    """Write a metadata clean plan when due and there is something to delete; its instant time or None.
    Call under the data table's lock."""
    mdt = mdt_timeline(storage)
    if pending_cleans(mdt) or not clean_is_due(mdt):
        return None
    plan = plan_metadata_clean(storage, mdt, retained, timezone)
    if not plan.file_count:
        return None
    mdt_storage = metadata_storage(storage)
    instant_time = _clean_instant(mdt, timezone)
    if instant_time in {i.time for i in mdt.instants}:
        return None  # v6: a clean after this delta commit exists already
    create_requested(mdt_storage, instant_time, Action.CLEAN, plan.to_bytes(mdt_storage), mdt.layout)
    return instant_time


def _clean_instant(mdt: Timeline, timezone: str) -> str:
    """A new instant time (v8+), or the latest metadata delta commit's plus `002` (v6, as Hudi 0.x)."""
    suffix = rules_for_layout(mdt.layout).metadata_table.clean_suffix
    deltas = mdt.completed(Action.DELTA_COMMIT)
    if suffix is None or not deltas:
        return new_instant_time(mdt.latest_time(), timezone)
    return max(i.time for i in deltas) + suffix


def execute_metadata_clean(storage: Storage, instant_time: str, timezone: str = "LOCAL") -> MetadataCleanResult:
    """Run the metadata clean planned at `instant_time` (again, if a run died): delete, then complete."""
    started = time.monotonic()
    mdt_storage = metadata_storage(storage)
    mdt = mdt_timeline(storage)
    requested = Instant(instant_time, Action.CLEAN, State.REQUESTED, layout=mdt.layout)
    data = read_instant(mdt_storage, requested)
    plan = CleanPlan.from_bytes(data, mdt_storage, requested.file_name)
    files = tuple(p for paths in plan.files.values() for p in paths)
    state = mdt.state_of(instant_time, Action.CLEAN)
    if state is State.COMPLETED:
        return MetadataCleanResult(instant_time, files)
    inflight = (
        transition_to_inflight(mdt_storage, requested, data)
        if state is State.REQUESTED
        else requested.with_state(State.INFLIGHT)
    )
    delete_files(mdt_storage, list(files))
    complete(mdt_storage, inflight, clean_metadata(plan, instant_time, started), timezone)
    return MetadataCleanResult(instant_time, files)


def run_pending_metadata_cleans(storage: Storage, timezone: str = "LOCAL") -> list[MetadataCleanResult]:
    """Finish every metadata clean a run left pending, oldest first."""
    return [execute_metadata_clean(storage, t, timezone) for t in pending_cleans(mdt_timeline(storage))]


__all__ = [
    "COMMITS_RETAINED_KEY",
    "DEFAULT_COMMITS_RETAINED",
    "MIN_INSTANTS_AFTER_COMPACTION",
    "MetadataCleanResult",
    "clean_is_due",
    "execute_metadata_clean",
    "plan_metadata_clean",
    "run_pending_metadata_cleans",
    "schedule_metadata_clean",
]
