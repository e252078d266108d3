"""Orphan files: files under a table that no completed or pending instant references.

Killed writers on storage that lost their markers, manual copies and bugs leave data files
that no reader needs; they waste storage and confuse readers that list files (a base file
named with a completed instant is read as part of it by listing readers). The rules, as
Hudi's repair tooling applies them:

- Never a file under `.hoodie/`, and never a `.hoodie_partition_metadata*` file.
- Never a file modified within `older_than`, and never a data file whose instant (the
  time in its name; for log files also the instants in its block headers) is newer than
  `now - older_than`, is pending (its writer may still run), or is older than the active
  timeline (its archived commit cannot be checked).
- Never a file a completed write (commit, deltacommit, replacecommit, compaction,
  change tracking) lists in its commit metadata, a file a savepoint lists, a file a
  pending instant's marker names, and no `.cdc` file while a change tracking is pending.
- Everything else is an orphan: a data file whose instant is not on the timeline (rolled
  back or never committed), a data file of a completed instant that its commit metadata
  does not list (a stray copy, a failed task attempt), or a file with no Hudi data file
  name at all.

Only the headers of unreferenced log files are read; no other data file is opened.
`remove_orphans` is a dry run unless told otherwise and records every removal.
"""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
from dataclasses import dataclass
from typing import Any, Protocol

from lakeward.core.config.table import TableConfig
from lakeward.core.file_group.log_file import block_instant_times
from lakeward.core.file_group.naming import PARTITION_METADATA_FILE, parse_base_file_name, parse_log_file_name
from lakeward.core.instant_clock import aware, json_ready, moment_instant_time
from lakeward.core.storage import Storage
from lakeward.core.table_services.clean.plan import savepointed_file_names
from lakeward.core.timeline import METAFOLDER, WRITE_ACTIONS, Action, Timeline
from lakeward.core.timeline.transitions import read_commit_metadata
from lakeward.core.write.markers import list_markers

log = logging.getLogger(__name__)

#: The default age below which no file is taken for an orphan (as `lakeward orphans --older-than 24h`).
DEFAULT_OLDER_THAN = dt.timedelta(hours=24)
#: Completed actions whose commit metadata lists the data files they wrote.
_LISTING_ACTIONS = WRITE_ACTIONS | {Action.CHANGE_TRACKING}


@dataclass(frozen=True)
class OrphanFile:
    """A file no instant references; `path` is relative to the table's base path."""

    path: str
    size: int
    modified: dt.datetime
    #: The instant in its name (None: not a Hudi data file name).
    instant_time: str | None
    reason: str


@dataclass(frozen=True)
class OrphanRemoval:
    """What removing one orphan did (`removed` False: a dry run, or `error` says why not)."""

    path: str
    size: int
    removed: bool
    error: str | None = None


@dataclass(frozen=True)
class OrphanReport:
    """One orphan removal run: what was found and, per file, what was done."""

    table_path: str
    dry_run: bool
    older_than: dt.timedelta
    #: Files whose instant is at or after this instant time, or modified after `cutoff`, were kept.
    cutoff_instant_time: str
    cutoff: dt.datetime
    orphans: tuple[OrphanFile, ...]
    removals: tuple[OrphanRemoval, ...]

    def to_json_dict(self) -> dict[str, Any]:
        """The report as plain JSON values (the run's record of what was found and removed)."""
        out = json_ready(self)
        assert isinstance(out, dict)
        return out

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(r.path for r in self.removals if r.removed)

    @property
    def orphan_bytes(self) -> int:
        return sum(o.size for o in self.orphans)


@dataclass(frozen=True)
class _Listed:
    path: str
    size: int
    modified: dt.datetime


def _list_files(storage: Storage) -> list[_Listed]:
    """Every file outside `.hoodie/`, with its modification time."""
    out = []
    for entry in storage.list_dir("", recursive=True):
        path = entry.path
        if entry.is_dir or path.startswith(METAFOLDER + "/") or entry.name.startswith(PARTITION_METADATA_FILE):
            continue
        out.append(_Listed(path, entry.size, entry.modified or dt.datetime.now(dt.UTC)))
    return sorted(out, key=lambda f: f.path)


@dataclass(frozen=True)
class _Rules:
    """What the timeline says about which files are in use."""

    referenced: frozenset[str]
    savepointed: frozenset[str]
    marked: frozenset[str]
    pending: frozenset[str]
    completed: frozenset[str]
    earliest: str | None
    cutoff_time: str
    change_tracking_pending: bool

    @classmethod
    def of(cls, storage: Storage, timeline: Timeline, cutoff_time: str) -> _Rules:
        active = timeline.active()
        referenced: set[str] = set()
        for instant in active:
            if instant.is_completed and instant.action in _LISTING_ACTIONS:
                for stat in read_commit_metadata(storage, instant).write_stats():
                    referenced.update(stat.files())
        pending = [i for i in active if not i.is_completed]
        marked = {m.data_path for i in pending for m in list_markers(storage, i.time)}
        return cls(
            referenced=frozenset(referenced),
            savepointed=frozenset(savepointed_file_names(storage, timeline)),
            marked=frozenset(marked),
            pending=frozenset(i.time for i in pending),
            completed=frozenset(i.time for i in active if i.is_completed),
            earliest=min((i.time for i in active), default=None),
            cutoff_time=cutoff_time,
            change_tracking_pending=any(i.action is Action.CHANGE_TRACKING for i in pending),
        )

    def keeps_instant(self, instant_time: str) -> bool:
        """Pending, newer than the threshold, or older than the active timeline."""
        return (
            instant_time in self.pending
            or instant_time >= self.cutoff_time
            or (self.earliest is not None and instant_time < self.earliest)
        )

    def in_use(self, path: str) -> bool:
        return path in self.referenced or path in self.marked or posixpath.basename(path) in self.savepointed


def _orphan_reason(storage: Storage, f: _Listed, rules: _Rules) -> tuple[str | None, str] | None:
    """(instant in the name, why it is an orphan), or None when the file is kept."""
    name = posixpath.basename(f.path)
    base = parse_base_file_name(name)
    if base is not None:
        if rules.keeps_instant(base.instant_time):
            return None
        if base.instant_time in rules.completed:
            return base.instant_time, f"completed instant {base.instant_time} does not list it"
        return base.instant_time, f"instant {base.instant_time} is not on the timeline"
    parsed = parse_log_file_name(name)
    if parsed is None:
        return None, "not a Hudi data file name"
    if parsed.is_cdc and rules.change_tracking_pending:
        return None
    blocks = block_instant_times(storage, f.path)
    if blocks is None:
        return None  # gone since the listing
    instants = {t for t in blocks if t} or {parsed.base_instant_time}
    if any(rules.keeps_instant(t) for t in instants | {parsed.base_instant_time}):
        return None
    listed = ", ".join(sorted(instants))
    return parsed.base_instant_time, f"log file of instant(s) {listed} that do not list it"


class TableLike(Protocol):
    """What orphan finding reads: a `Table`, or a table service's `TableContext`."""

    @property
    def storage(self) -> Storage: ...

    @property
    def config(self) -> TableConfig: ...

    def timeline(self) -> Timeline: ...


def _cutoff(table: TableLike, now: dt.datetime | None, older_than: dt.timedelta) -> tuple[dt.datetime, str]:
    """The cutoff moment (UTC) and the same moment as an instant time in the timeline's zone."""
    if older_than < dt.timedelta(0):
        raise ValueError(f"older_than must not be negative, got {older_than}")
    moment = aware(now) - older_than
    return moment.astimezone(dt.UTC), moment_instant_time(moment, table.config.timeline_timezone)


def _find(
    table: TableLike, older_than: dt.timedelta, now: dt.datetime | None
) -> tuple[list[OrphanFile], dt.datetime, str]:
    cutoff, cutoff_time = _cutoff(table, now, older_than)
    storage = table.storage
    rules = _Rules.of(storage, table.timeline(), cutoff_time)
    orphans = []
    for f in _list_files(storage):
        if f.modified > cutoff or rules.in_use(f.path):
            continue
        found = _orphan_reason(storage, f, rules)
        if found is not None:
            orphans.append(OrphanFile(f.path, f.size, f.modified, found[0], found[1]))
    return orphans, cutoff, cutoff_time


def find_orphans(
    table: TableLike, older_than: dt.timedelta = DEFAULT_OLDER_THAN, *, now: dt.datetime | None = None
) -> list[OrphanFile]:
    """The table's orphan files (see the module doc for the rules), by path; changes nothing.

    `now` (default: the current time; naive means local time) minus `older_than` is the
    cutoff: nothing modified or instant-timed after it is an orphan.
    """
    return _find(table, older_than, now)[0]


def remove_orphans(
    table: TableLike,
    older_than: dt.timedelta = DEFAULT_OLDER_THAN,
    *,
    dry_run: bool = True,
    now: dt.datetime | None = None,
) -> OrphanReport:
    """Find the orphan files and, unless `dry_run` (the default), delete them; every removal is recorded.

    Deleting needs a table version lakeward removes orphan files on (6; ReadOnlyTableVersionError
    on 8 and 9, where it runs every other service); a dry run works on every version. A file that
    cannot be deleted is recorded with its error and the others are still removed.
    """
    if not dry_run:
        table.config.version.check_writable("remove orphan files")
    orphans, cutoff, cutoff_time = _find(table, older_than, now)
    path = table.storage.uri
    removals = []
    for orphan in orphans:
        if dry_run:
            removals.append(OrphanRemoval(orphan.path, orphan.size, removed=False))
            continue
        try:
            table.storage.delete_file(orphan.path, missing_ok=True)
        except OSError as exc:
            log.warning("could not remove orphan %s of %s: %s", orphan.path, path, exc)
            removals.append(OrphanRemoval(orphan.path, orphan.size, removed=False, error=str(exc)))
            continue
        log.info("removed orphan %s (%d bytes) of %s: %s", orphan.path, orphan.size, path, orphan.reason)
        removals.append(OrphanRemoval(orphan.path, orphan.size, removed=True))
    return OrphanReport(path, dry_run, older_than, cutoff_time, cutoff, tuple(orphans), tuple(removals))
