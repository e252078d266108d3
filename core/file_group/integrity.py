"""Integrity of a table's data files against the commit metadata of its completed instants.

A completed instant vouches, in its write stats, for the files it wrote (`path`, with
its size in `fileSizeInBytes`). Three checks rest on that, from cheap to deep:

- `verify_listing` (reads and writes, no extra I/O per file): every file a completed
  instant wrote that is still live - its file group not replaced, its slice not older
  than the group's latest slice (the cleaner only removes older slices) - must be in the
  listing the file-system view was built from, at its recorded size (a base file
  exactly, a log file at least: a later failed append may have grown it). Commit
  metadata is read once per instant per process: completed instant files never change.
- `log_damage` (reads of log files, only when a log file has corrupt stretches): a torn
  or damaged stretch is an error when it belongs to a completed instant - its surviving
  header names one, or a completed instant that wrote the file has no sound block in it,
  or the stretch lies within the bytes that instant recorded. Otherwise it is the torn
  tail of a write that never completed, skipped as Hudi does.
- `check_table` (`Table.check()`, `lakeward show --check`): the listing check plus every
  base file read through and every log file scanned and decoded, reporting every problem
  in one pass and changing nothing.

Instants archived out of the active timeline are not checked (their metadata is not
read); their files are still read and their blocks still count as completed.
"""

from __future__ import annotations

import logging
import posixpath
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field

from lakeward.core.engine.local import LocalEngine
from lakeward.core.exceptions import CorruptFileError, LakewardError, MissingFileError
from lakeward.core.file_group.base_file import check_base_file
from lakeward.core.file_group.file_group import FileGroup, FileSlice
from lakeward.core.file_group.log_file import CorruptBlock, LogFileReader, RawBlock, decode_block
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.storage import Storage, is_storage_failure
from lakeward.core.timeline import Instant, Timeline
from lakeward.core.timeline.transitions import read_commit_metadata

log = logging.getLogger(__name__)

#: Said in every error of a damaged table: where to see the whole picture.
CHECK_HINT = "run `lakeward show --check PATH` for every problem"


@dataclass(frozen=True)
class WrittenFile:
    """A data file a completed instant wrote, as its write stat records it."""

    path: str
    partition: str
    file_id: str
    instant: str
    #: `fileSizeInBytes` (0: not recorded).
    size: int
    is_log: bool
    #: Base instant of the file slice the file belongs to (from its name).
    slice_base: str
    #: Where the instant's blocks start in a log file (`logOffset`; Hudi appends to a log).
    log_offset: int = 0


@dataclass(frozen=True)
class Problem:
    """One damaged or missing file. `kind`: missing, size, base, log."""

    kind: str
    path: str
    instant: str | None
    detail: str

    def __str__(self) -> str:
        of = f" (instant {self.instant})" if self.instant else ""
        return f"{self.kind}: {self.path}{of}: {self.detail}"

    def error(self) -> CorruptFileError:
        """The error a read or write raises for this problem."""
        cls = MissingFileError if self.kind == "missing" else CorruptFileError
        return cls(str(self), self.path, self.instant)


@dataclass
class IntegrityReport:
    """What `check_table` found: every problem, and how many data files it read."""

    path: str
    problems: list[Problem] = field(default_factory=list)
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = f"check of {self.path}: {self.files_checked} data file(s) read, "
        if self.ok:
            return head + "no problems"
        return "\n".join([head + f"{len(self.problems)} problem(s):", *(f"  {p}" for p in self.problems)])


# -- what completed instants wrote -------------------------------------------------------------

#: Threads reading commit metadata not cached yet (I/O bound: more than the cores).
_METADATA_READERS = 8
_written_cache: dict[tuple[str, str], tuple[WrittenFile, ...]] = {}
_written_lock = threading.Lock()


def _written_by(storage: Storage, instant: Instant) -> tuple[WrittenFile, ...]:
    """The data files one completed write instant vouches for (cached: the file never changes)."""
    key = (storage.uri, instant.file_name)
    with _written_lock:
        cached = _written_cache.get(key)
    if cached is not None:
        return cached
    out: list[WrittenFile] = []
    try:
        metadata = read_commit_metadata(storage, instant)
    except FileNotFoundError:
        return ()  # archived or rolled back since the timeline was loaded: vouches for nothing now
    for stat in metadata.write_stats():
        files = [(stat.path, stat.fileSizeInBytes)] if stat.path else []
        files += list((stat.cdcStats or {}).items())
        for path, size in files:
            name = posixpath.basename(path)
            partition = stat.partitionPath if stat.partitionPath is not None else posixpath.dirname(path)
            base = parse_base_file_name(name)
            if base is not None:
                out.append(WrittenFile(path, partition, stat.fileId, instant.time, size or 0, False, base.instant_time))
                continue
            log = parse_log_file_name(name)
            if log is not None:
                written = WrittenFile(
                    path,
                    partition,
                    log.file_id,
                    instant.time,
                    size or 0,
                    True,
                    log.base_instant_time,
                    stat.logOffset or 0,
                )
                out.append(written)
    result = tuple(out)
    with _written_lock:
        if len(_written_cache) > 4096:
            _written_cache.clear()
        _written_cache[key] = result
    return result


def written_files(storage: Storage, timeline: Timeline, as_of: str | None = None) -> list[WrittenFile]:
    """Files written by the completed write instants of the active timeline (none after `as_of`).

    Instants read from the LSM history are not checked: the cleaner may have removed
    their files long ago, and reading all archived metadata on every read is what
    archival exists to avoid.

    Commit metadata not cached yet is read in parallel (one small GET each on object stores).
    """
    instants = [i for i in timeline.completed_writes() if not i.is_archived and (as_of is None or i.time <= as_of)]
    with _written_lock:
        missing = [i for i in instants if (storage.uri, i.file_name) not in _written_cache]
    # a pool only pays off on a cold cache; a steady reader finds one or two new commits per load
    if len(missing) > _METADATA_READERS:
        LocalEngine(_METADATA_READERS).map(lambda i: _written_by(storage, i), missing, "read commit metadata")
    return [f for instant in instants for f in _written_by(storage, instant)]


# -- the listing against the commit metadata -------------------------------------------------


def _listed(groups: Iterable[FileGroup]) -> dict[str, int]:
    """Path -> size of every data file the view holds."""
    out: dict[str, int] = {}
    for group in groups:
        for s in group.slices:
            if s.base_file is not None:
                out[s.base_file.path] = s.base_file.size
            for f in (*s.log_files, *s.cdc_files):
                out[f.path] = f.size
    return out


def listing_problems(
    storage: Storage, timeline: Timeline, view: FileSystemView, as_of: str | None = None
) -> list[Problem]:
    """Live files of completed instants (up to `as_of`) missing from the view's listing, or cut short.

    No I/O beyond the (cached) commit metadata: the view's listing carries the sizes.
    """
    groups = {(g.partition_path, g.file_id): g for g in view.file_groups()}
    listed = _listed(groups.values())
    problems: list[Problem] = []
    scope = view.partition_scope
    for written in written_files(storage, timeline, as_of):
        if view.is_replaced(written.partition, written.file_id, as_of):
            continue
        if scope is not None and written.partition not in scope:
            continue  # the view did not list that partition
        group = groups.get((written.partition, written.file_id))
        latest = group.latest_slice(as_of) if group is not None else None
        if latest is not None and written.slice_base < latest.base_instant_time:
            continue  # an older slice: the cleaner may have removed it
        uri = storage.uri_of(written.path)
        size = listed.get(written.path)
        if size is None:
            if view.from_metadata_table:
                # the metadata table is what readers list (Java, hudi-rs): a file it does not
                # list is not part of the table for them either (a stale metadata table)
                continue
            problems.append(Problem("missing", uri, written.instant, "written by a completed instant, not found"))
        elif written.size and (size < written.size or (size != written.size and not written.is_log)):
            problems.append(
                Problem("size", uri, written.instant, f"{size} bytes, but the commit recorded {written.size}")
            )
    return problems


def _raise_first(problems: Sequence[Problem], doing: str | None = None) -> None:
    """Raise the error of the first problem, if any, saying how many more there are."""
    if problems:
        first = problems[0]
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        error = first.error()
        error.args = (f"{doing + ': ' if doing else ''}{first}{more}; {CHECK_HINT}",)
        raise error


def verify_listing(storage: Storage, timeline: Timeline, view: FileSystemView, as_of: str | None = None) -> None:
    """Raise MissingFileError / CorruptFileError for the first of `listing_problems`, if any."""
    _raise_first(listing_problems(storage, timeline, view, as_of))


def verify_before_write(storage: Storage, timeline: Timeline) -> None:
    """Refuse to build on a table whose completed instants' files are missing or cut short.

    Called by the write client before an instant exists, so the table stays unchanged.
    """
    _raise_first(
        listing_problems(storage, timeline, FileSystemView.load(storage, timeline)),
        "refusing to write on a damaged table",
    )


def verify_before_planning(
    storage: Storage, timeline: Timeline, view: FileSystemView, slices: Sequence[FileSlice]
) -> None:
    """Refuse to plan a compaction or clustering of `slices` when a file of the table is lost or cut short.

    A plan rewrites its slices from the files it names: a lost log file left out of a storage
    listing, or named by a metadata table that outlived it, would be rewritten without its rows,
    and the clean after it would make the loss final. Beyond `listing_problems`, when the view
    lists from the metadata table the planned slices' files are looked for in one storage listing
    per partition. Called under the table lock before the plan exists, so the table stays unchanged.
    """
    problems = listing_problems(storage, timeline, view)
    if view.from_metadata_table:
        problems += absent_files(storage, slices, "listed by the metadata table, not found in storage")
    _raise_first(problems, "refusing to plan on a damaged table")


def verify_planned_files(storage: Storage, slices: Sequence[FileSlice], what: str) -> None:
    """Refuse to run `what` (a plan) when a file of its `slices` is gone since it was planned; before
    the plan is claimed, so the table stays unchanged."""
    problems = absent_files(storage, slices, "named by the plan, not found in storage")
    _raise_first(problems, f"refusing to run {what}")


def absent_files(storage: Storage, slices: Sequence[FileSlice], detail: str) -> list[Problem]:
    """Base and log files of `slices` that a storage listing of their partitions does not find."""
    wanted: dict[str, list[tuple[str, str]]] = {}
    for s in slices:
        if s.base_file is not None:
            wanted.setdefault(s.partition_path, []).append((s.base_file.path, s.base_file.instant_time))
        for f in s.log_files:
            wanted.setdefault(s.partition_path, []).append((f.path, f.base_instant_time))
    problems: list[Problem] = []
    for partition, files in sorted(wanted.items()):
        present = {e.path for e in storage.list_dir(partition) if not e.is_dir}
        problems += [
            Problem("missing", storage.uri_of(path), instant, detail) for path, instant in files if path not in present
        ]
    return problems


# -- damaged log blocks ---------------------------------------------------------------------------


def log_damage(
    storage: Storage,
    path: str,
    corrupt: Sequence[CorruptBlock],
    sound: Sequence[RawBlock],
    is_completed: Callable[[str], bool],
    writers: Sequence[WrittenFile],
) -> list[Problem]:
    """Which corrupt stretches of one log file are damage to completed instants' blocks.

    `sound`: the file's sound blocks; `is_completed`: whether an instant completed (the
    blocks of one that did not may be torn: a failed write); `writers`: what completed
    instants recorded writing this file (may be empty, e.g. when they were archived).
    A stretch whose header names a completed instant is damage unless a later sound block
    of that instant and block type follows it: then it is an attempt that died midway and
    was made again (a retried Spark task appends its block anew), which every Hudi reader
    skips. A stretch whose header names no instant is blamed on a completed writer only
    when that writer's blocks are absent or the stretch overlaps the bytes it recorded.
    """
    uri = storage.uri_of(path)
    sound_instants = {r.instant_time for r in sound if r.instant_time is not None}
    problems: list[Problem] = []
    blamed: set[str] = set()
    for block in corrupt:
        where = f"{block.length} bytes at offset {block.offset} do not form a sound block ({block.reason})"
        if block.instant_time is not None:
            made_again = any(
                r.offset > block.offset and r.instant_time == block.instant_time and r.block_type is block.block_type
                for r in sound
            )
            if made_again:
                log.warning("%s: %s; a sound block of instant %s follows it: skipped", uri, where, block.instant_time)
            elif is_completed(block.instant_time) and block.instant_time not in blamed:
                blamed.add(block.instant_time)
                problems.append(Problem("log", uri, block.instant_time, where))
            continue
        for writer in writers:
            if writer.instant in blamed or not is_completed(writer.instant):
                continue
            recorded_end = writer.size or block.offset + block.length
            overlaps = block.offset < recorded_end and block.offset + block.length > writer.log_offset
            if writer.instant not in sound_instants or overlaps:
                blamed.add(writer.instant)
                problems.append(Problem("log", uri, writer.instant, where))
    return problems


def writers_of(storage: Storage, timeline: Timeline | None, path: str) -> list[WrittenFile]:
    """The completed instants' records of writing the log file `path` (none without a timeline)."""
    if timeline is None:
        return []
    return [f for f in written_files(storage, timeline) if f.path == path]


# -- the deep check -------------------------------------------------------------------------------


def _check_log(
    storage: Storage, timeline: Timeline, path: str, completed: set[str], earliest: str | None
) -> list[Problem]:
    def is_completed(instant: str) -> bool:
        return instant in completed or (earliest is not None and instant < earliest)

    reader = LogFileReader(storage, path)
    try:
        raws = list(reader.raw_blocks())
    except (OSError, LakewardError) as exc:
        if is_storage_failure(exc):
            raise  # storage failing says nothing about the file
        return [Problem("log", storage.uri_of(path), None, f"cannot be read: {exc}")]
    writers = writers_of(storage, timeline, path)
    sound = {r.instant_time for r in raws if r.instant_time is not None}
    problems = log_damage(storage, path, reader.corrupt_blocks, raws, is_completed, writers)
    blamed = {p.instant for p in problems}
    for writer in writers:
        if writer.instant not in sound and writer.instant not in blamed:
            blamed.add(writer.instant)
            problems.append(Problem("log", storage.uri_of(path), writer.instant, "holds no block of its instant"))
    for raw in raws:
        instant = raw.instant_time
        if instant is None or not is_completed(instant) or instant in blamed:
            continue
        try:
            decode_block(raw)
        except LakewardError as exc:
            blamed.add(instant)
            problems.append(Problem("log", storage.uri_of(path), instant, f"block cannot be decoded: {exc}"))
    return problems


def check_table(
    storage: Storage, timeline: Timeline | None = None, being_deleted: Collection[str] = ()
) -> IntegrityReport:
    """Every problem of the table's data files in one pass; nothing is modified.

    The listing against the commit metadata of completed instants (missing files, files
    cut short), then every file of the view read: base files through every row group,
    log files scanned and their completed blocks decoded. `being_deleted`: files (relative to the
    base path) a pending clean deletes, not checked (the metadata table still lists them).
    """
    timeline = timeline if timeline is not None else Timeline.load(storage)
    view = FileSystemView.load(storage, timeline)
    cleaning = {storage.uri_of(p) for p in being_deleted}
    problems = [p for p in listing_problems(storage, timeline, view) if p.path not in cleaning]
    report = IntegrityReport(storage.uri, problems)
    reported = {p.path for p in report.problems} | cleaning
    completed = {i.time for i in timeline.completed()}
    earliest = timeline.instants[0].time if timeline.instants else None
    for group in view.file_groups():
        for s in group.slices:
            if s.base_file is not None:
                report.files_checked += 1
                uri = storage.uri_of(s.base_file.path)
                if uri in reported:
                    continue
                try:
                    check_base_file(storage, s.base_file.path)
                except CorruptFileError as exc:
                    report.problems.append(Problem("base", uri, exc.instant, str(exc)))
            for log in s.log_files:
                report.files_checked += 1
                if storage.uri_of(log.path) in reported:
                    continue
                report.problems.extend(_check_log(storage, timeline, log.path, completed, earliest))
    return report
