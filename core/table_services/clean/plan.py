"""Planning a clean: which file slices no reader, savepoint or pending plan needs any more.

Policies (`hoodie.cleaner.policy`), per file group:

- KEEP_LATEST_COMMITS (`hoodie.cleaner.commits.retained` = N): the earliest commit to
  retain, E, is the N-th latest completed write (commit, deltacommit, replacecommit,
  compaction), but never past the last completed write before the earliest write or
  compaction still pending (Hudi's cap). Every slice based at or after E stays, and so does
  the newest slice based before E (a read as of E needs it); older slices go. Nothing is
  cleaned while there are N or fewer completed writes.
- KEEP_LATEST_BY_HOURS (`hoodie.cleaner.hours.retained` = H): E is the oldest completed
  write not older than H hours, capped the same way; then as above. With no write in the
  last H hours nothing is cleaned, as in Hudi.
- KEEP_LATEST_FILE_VERSIONS (`hoodie.cleaner.fileversions.retained` = K): the newest K
  slices of every file group stay (savepointed slices do not count towards K).

File groups replaced by a completed replacecommit (insert overwrite, clustering) lose all
their slices once the replacecommit is older than E (for KEEP_LATEST_FILE_VERSIONS: at
once, as Hudi). Never cleaned: a slice with a file a savepoint lists, the slice a pending
compaction reads and any later one, and every slice of a file group in a pending
clustering plan.

Unlike Hudi, the plan's `earliestInstantToRetain` (and the metadata's
`earliestCommitToRetain`) is recorded for KEEP_LATEST_FILE_VERSIONS too: the oldest
completed write whose snapshot is still whole after the clean (savepointed slices aside),
so that reads as of older instants fail with a clear error. Under every policy the recorded
bound never moves back below an earlier clean's.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakeward.core.file_group.file_group import FileGroup, FileSlice
from lakeward.core.file_group.view import FileSystemView, replaced_file_groups
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.retention import last_clean_retained
from lakeward.core.timeline import Action, Instant, State, Timeline, avro_plans
from lakeward.core.timeline.clustering_plan import pending_clustering_file_groups
from lakeward.core.timeline.compaction_plan import pending_compaction_instants, read_compaction_plan
from lakeward.core.timeline.instant_time import format_instant_time
from lakeward.core.timeline.transitions import create_requested, read_instant

if TYPE_CHECKING:
    from lakeward.core.config.write import WriteConfig
    from lakeward.core.context import HoldsTableContext

log = logging.getLogger(__name__)
PLAN_VERSION = 2
KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


@dataclass(frozen=True)
class CleanPlan:
    """Files to delete per partition (paths relative to the table), and what the clean retains."""

    policy: str
    files: dict[str, tuple[str, ...]]
    earliest_instant_to_retain: Instant | None = None
    last_completed_commit: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def file_count(self) -> int:
        return sum(len(v) for v in self.files.values())

    def to_bytes(self, storage: Storage) -> bytes:
        earliest = self.earliest_instant_to_retain
        record: dict[str, Any] = {
            "earliestInstantToRetain": (
                {"timestamp": earliest.time, "action": earliest.action.value, "state": "COMPLETED"}
                if earliest is not None
                else None
            ),
            "lastCompletedCommitTimestamp": self.last_completed_commit,
            "policy": self.policy,
            "filesToBeDeletedPerPartition": None,
            "version": PLAN_VERSION,
            "filePathsToBeDeletedPerPartition": {
                partition: [{"filePath": storage.full_path(p), "isBootstrapBaseFile": False} for p in paths]
                for partition, paths in sorted(self.files.items())
            },
            "partitionsToBeDeleted": [],
        }
        return avro_plans.serialize(avro_plans.CLEANER_PLAN, record)

    @classmethod
    def from_bytes(cls, data: bytes, storage: Storage, what: str = "cleaner plan") -> CleanPlan:
        record = avro_plans.deserialize(data, what)

        def rel(path: str, partition: str) -> str:
            # Data files live directly in their partition folder: resolve by name, so that a plan
            # still applies to a table that was copied or moved (its paths are absolute).
            name = posixpath.basename(path)
            return posixpath.join(partition, name) if partition else name

        files: dict[str, tuple[str, ...]] = {}
        for partition, infos in (record.get("filePathsToBeDeletedPerPartition") or {}).items():
            files[partition] = tuple(rel(i["filePath"], partition) for i in infos if i.get("filePath"))
        if not files:
            for partition, names in (record.get("filesToBeDeletedPerPartition") or {}).items():
                files[partition] = tuple(rel(n, partition) for n in names)
        earliest = record.get("earliestInstantToRetain")
        instant = None
        if earliest:
            instant = Instant(earliest["timestamp"], Action(earliest["action"]), State.COMPLETED)
        return cls(str(record["policy"]), files, instant, record.get("lastCompletedCommitTimestamp") or "")


def files_pending_cleans_delete(storage: Storage, timeline: Timeline) -> frozenset[str]:
    """Paths (relative to the base path) of the files the pending cleans of `timeline` delete: a clean
    killed midway has deleted some of them while the metadata table still lists them (it learns of
    the clean at completion); the next clean finishes it. Integrity checks do not count them."""
    paths: set[str] = set()
    for pending in timeline.pending(Action.CLEAN):
        requested = Instant(pending.time, Action.CLEAN, State.REQUESTED, layout=timeline.layout)
        plan = CleanPlan.from_bytes(read_instant(storage, requested), storage, requested.file_name)
        paths.update(p for files in plan.files.values() for p in files)
    return frozenset(paths)


# -- what must never be cleaned -------------------------------------------------------------
def pending_compaction_bases(storage: Storage, timeline: Timeline) -> dict[tuple[str, str], str]:
    """(partition, file id) -> the oldest base instant a pending compaction reads in that group."""
    out: dict[tuple[str, str], str] = {}
    for instant in pending_compaction_instants(timeline):
        for op in read_compaction_plan(storage, instant.time, timeline.layout).operations:
            key = (op.partition_path, op.file_id)
            base = op.base_instant_time or instant.time
            out[key] = min(out.get(key, base), base)
    return out


def savepointed_file_names(storage: Storage, timeline: Timeline) -> set[str]:
    names: set[str] = set()
    for instant in timeline.completed(Action.SAVEPOINT):
        record = avro_plans.deserialize(read_instant(storage, instant), instant.file_name)
        for partition in (record.get("partitionMetadata") or {}).values():
            names.update(posixpath.basename(f) for f in partition.get("savepointDataFile") or [])
    return names


def _files_of(file_slice: FileSlice) -> list[str]:
    files = [f.path for f in (*file_slice.log_files, *file_slice.cdc_files)]
    if file_slice.base_file is not None:
        files.insert(0, file_slice.base_file.path)
    return files


@dataclass
class _Protection:
    savepointed: set[str]
    clustering: set[tuple[str, str]]
    compaction: dict[tuple[str, str], str]

    def keeps(self, group: FileGroup, file_slice: FileSlice) -> bool:
        key = (group.partition_path, group.file_id)
        if key in self.clustering:
            return True
        base = self.compaction.get(key)
        if base is not None and file_slice.base_instant_time >= base:
            return True
        return self.savepoints(file_slice)

    def savepoints(self, file_slice: FileSlice) -> bool:
        """Whether a savepoint lists a file of the slice."""
        return any(posixpath.basename(p) in self.savepointed for p in _files_of(file_slice))


def earliest_commit_to_retain(
    timeline: Timeline, wc: WriteConfig, now: dt.datetime | None, timezone: str
) -> Instant | None:
    """E under KEEP_LATEST_COMMITS or KEEP_LATEST_BY_HOURS (None: nothing to clean), never past the
    last completed write before the earliest write or compaction still pending, as Hudi's
    `CleanerUtils.getEarliestCommitToRetain` caps it: once that one completes, reads from before it
    must still find it whole."""
    writes = timeline.completed_writes()
    if wc.cleaner_policy == KEEP_LATEST_COMMITS:
        n = wc.cleaner_commits_retained
        nth = writes[-n] if len(writes) > n else None
    elif wc.cleaner_policy == KEEP_LATEST_BY_HOURS:
        if now is None:
            now = dt.datetime.now(dt.UTC) if timezone == "UTC" else dt.datetime.now()
        cutoff = format_instant_time(now - dt.timedelta(hours=wc.cleaner_hours_retained))
        # no write in the window: nothing is cleaned (Hudi's cleaner finds no partition to clean)
        nth = next((i for i in writes if i.time >= cutoff), None)
    else:
        return None
    pending = [i.time for i in (*timeline.pending_writes(), *timeline.pending(Action.COMPACTION))]
    if nth is None or not pending or nth.time < min(pending):
        return nth
    before = [i for i in writes if i.time < min(pending)]
    return before[-1] if before else nth


def plan_clean(
    storage: Storage,
    timeline: Timeline,
    view: FileSystemView,
    wc: WriteConfig,
    timezone: str = "LOCAL",
    now: dt.datetime | None = None,
) -> CleanPlan:
    """The files a clean under `wc`'s policy deletes now (pure: reads the timeline, writes nothing)."""
    policy = wc.cleaner_policy
    latest = timeline.latest_completed_write()
    last_commit = latest.time if latest else ""
    protection = _Protection(
        savepointed_file_names(storage, timeline),
        set(pending_clustering_file_groups(storage, timeline)),
        pending_compaction_bases(storage, timeline),
    )
    replaced = replaced_file_groups(storage, timeline)
    earliest = earliest_commit_to_retain(timeline, wc, now, timezone)
    by_versions = policy == KEEP_LATEST_FILE_VERSIONS
    if not by_versions and earliest is None:
        return CleanPlan(policy, {}, None, last_commit)
    files: dict[str, list[str]] = defaultdict(list)
    readable_from = ""  # KEEP_LATEST_FILE_VERSIONS: snapshots older than this lost a slice
    for group in view.file_groups():
        key = (group.partition_path, group.file_id)
        slices = sorted(group.slices, key=lambda s: s.base_instant_time)
        replaced_at = replaced.get(key)
        if by_versions:
            doomed = _by_versions(group, slices, replaced_at, wc.cleaner_file_versions_retained, protection)
        else:
            assert earliest is not None
            doomed = _by_commits(group, slices, replaced_at, earliest.time, protection)
        for s in doomed:
            files[group.partition_path].extend(_files_of(s))
        if by_versions and doomed:
            # a savepointed slice stays, but the snapshots after it lost the doomed slices
            kept = [s.base_instant_time for s in slices if s not in doomed and not protection.savepoints(s)]
            bound = min(kept) if kept else (replaced_at or "")
            readable_from = max(readable_from, bound)
    for stray in _stray_cdc_files(timeline, view, None if by_versions else earliest, protection):
        files[posixpath.dirname(stray)].append(stray)
    if by_versions:
        earliest = _first_write_at_or_after(timeline, readable_from) if readable_from else None
    # The recorded bound never moves backwards (a later clean under another policy, or a smaller N,
    # would otherwise promise snapshots an earlier clean made unreadable).
    previous = last_clean_retained(storage, timeline)
    if previous is not None and (earliest is None or previous[0] > earliest.time):
        earliest = _first_write_at_or_after(timeline, previous[0]) or earliest
    return CleanPlan(policy, {p: tuple(sorted(v)) for p, v in files.items() if v}, earliest, last_commit)


def _stray_cdc_files(
    timeline: Timeline, view: FileSystemView, earliest: Instant | None, protection: _Protection
) -> list[str]:
    """`.cdc` files whose file slice is gone (`FileSystemView.stray_cdc_files`), of a completed instant's
    slice (not a write still writing its files), based before E when the policy has one: no query reads
    them, and one left in a replaced file group would hold archival back for good."""
    completed = timeline.completed_write_times()
    first = timeline.instants[0].time if timeline.instants else ""
    return [
        f.path
        for f in view.stray_cdc_files()
        if (f.base_instant_time in completed or f.base_instant_time < first)
        and (earliest is None or f.base_instant_time < earliest.time)
        and f.name not in protection.savepointed
    ]


def _first_write_at_or_after(timeline: Timeline, time: str) -> Instant | None:
    return next((i for i in timeline.completed_writes() if i.time >= time), timeline.latest_completed_write())


def _by_commits(
    group: FileGroup, slices: list[FileSlice], replaced_at: str | None, earliest: str, protection: _Protection
) -> list[FileSlice]:
    if replaced_at is not None and replaced_at < earliest:
        return [s for s in slices if not protection.keeps(group, s)]
    before = [s for s in slices if s.base_instant_time < earliest]
    # The newest slice based before E is what a read as of E (or later, until the next slice) needs.
    old = before[:-1]
    return [s for s in old if not protection.keeps(group, s)]


def _by_versions(
    group: FileGroup, slices: list[FileSlice], replaced_at: str | None, keep: int, protection: _Protection
) -> list[FileSlice]:
    if replaced_at is not None:
        return [s for s in slices if not protection.keeps(group, s)]
    doomed = []
    for s in reversed(slices):
        if protection.savepoints(s):
            continue  # savepointed slices stay and do not count
        if keep > 0:
            keep -= 1
        elif not protection.keeps(group, s):
            doomed.append(s)
    return doomed


# -- scheduling ---------------------------------------------------------------------------
def pending_cleans(timeline: Timeline) -> list[str]:
    return [i.time for i in timeline.pending(Action.CLEAN)]


def schedule_clean(table: HoldsTableContext, now: dt.datetime | None = None) -> str | None:
    """Under the table lock, write `<t>.clean.requested` with the plan; None when nothing is to be cleaned
    or a clean is already pending (run that one first)."""
    ctx = table.table_context
    storage, config = ctx.storage, ctx.config
    with ctx.lock:
        ctx.check_version("schedule a clean")
        timeline = ctx.timeline()
        pending = pending_cleans(timeline)
        if pending:
            log.info("not scheduling a clean: clean %s is pending; run it first", pending[0])
            return None
        view = FileSystemView.load(storage, timeline)
        plan = plan_clean(storage, timeline, view, ctx.write_config, config.timeline_timezone, now)
        if not plan.file_count:
            log.info("nothing to clean under %s", plan.policy)
            return None
        instant_time = ctx.new_instant_time(timeline)
        create_requested(storage, instant_time, Action.CLEAN, plan.to_bytes(storage), ctx.layout)
        log.info("scheduled clean %s of %d file(s) (%s)", instant_time, plan.file_count, plan.policy)
        return instant_time
