"""Which tables exist, and each table's current state, loaded with as few listings as possible.

Tables come from a static list of `TableRef`s and from roots scanned for tables (a folder
holding `.hoodie/`; the scan does not descend into tables nor below `max_depth`).

A table's state costs one listing of its `.hoodie/` folder (names only) when nothing
changed since the previous cycle (two for table versions 8+, whose instants live in
`.hoodie/timeline/`; the table version module tells the layout from the first listing):
`DiscoveryCache` keeps the last state per table and reuses it when the listings are the
same. When they changed, the timeline is rebuilt from those same listings by core's
timeline loader and summarised by core's `service_state` (pending plans, writes since each
service last ran: what `Table.service_state()` returns); `hoodie.properties` is read again
only if its size changed, and a pending replacecommit's plan is read once per instant (to
tell a clustering from an insert-overwrite in flight). Each state carries the table
version, and tables of versions lakeward only reads are marked `read_only`.

A table that cannot be read (deleted, corrupt properties, permission) becomes a
`TableProblem`; the other tables go on.

`assess_health` scores the tables of a cycle (core's `take_snapshot` + `health_report`:
one listing of the table's files, its plans and heartbeats, no data file). Tables are
opened with the options the daemon gives them (so the small-file limit, cleaner retention
and `hoodie.keep.*` it judges by are the configured ones); a snapshot is retaken when the
table's state changed since the last one, else at most every `max_age_s`.
"""

from __future__ import annotations

import datetime as dt
import posixpath
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.metadata_listing import FILES_PARTITION, METADATA_FOLDER, metadata_partitions
from lakeward.core.health import HealthPolicy, HealthReport, HealthSnapshot, health_report, take_snapshot
from lakeward.core.index.secondary.definitions import DEFINITIONS_PATH, load_definitions
from lakeward.core.metadata_table.compaction import (
    DEFAULT_MAX_DELTA_COMMITS,
    MetadataCompactionCheck,
    check_metadata_compaction,
)
from lakeward.core.storage import Storage
from lakeward.core.table import Table
from lakeward.core.table_services.archival import clean_retain_of
from lakeward.core.table_services.state import PendingServicePlan, ServiceState, service_state
from lakeward.core.table_version import TimelineLayout, layout_from_listing
from lakeward.core.timeline import METAFOLDER, WRITE_ACTIONS, Action, Instant, Timeline
from lakeward.core.timeline.clustering_plan import clustering_plan_of
from lakeward.core.timeline.instant_time import not_times
from lakeward.services.model import PendingPlan, ServiceAction, TableProblem, TableRef, root_name, table_location

_T = TypeVar("_T")
_R = TypeVar("_R")

if TYPE_CHECKING:
    from lakeward.core.config.table import TableConfig

PROPERTIES_FILE = "hoodie.properties"

#: Pending timeline actions that are table-service plans, and the service that completes them.
#: A pending replacecommit is a plan only when it holds a clustering plan (else it is a write);
#: on table versions 8+ a pending clustering has its own `clustering` action. A pending Hudi
#: `logcompaction` is none of lakeward's: only Hudi's writer runs it (`_foreign_plans`).
_PLAN_ACTIONS: dict[Action, ServiceAction] = {
    Action.COMPACTION: ServiceAction.COMPACTION,
    Action.CLEAN: ServiceAction.CLEAN,
    Action.ROLLBACK: ServiceAction.ROLLBACK,
    Action.RESTORE: ServiceAction.ROLLBACK,  # a restore is a batch of rollbacks; the model has no RESTORE action
    Action.INDEXING: ServiceAction.INDEX_BUILD,
    Action.CHANGE_TRACKING: ServiceAction.CHANGE_TRACKING,
    Action.CLUSTERING: ServiceAction.CLUSTERING,
}
#: The service of each `PendingServicePlan.action` (a clustering plan is `Action.CLUSTERING`).
_SERVICE_OF: dict[Action, ServiceAction] = _PLAN_ACTIONS


def _foreign_plans(plans: Sequence[PendingServicePlan]) -> str | None:
    """What the table's state says about pending plans no lakeward service runs (None: none)."""
    times = [p.instant.time for p in plans if p.action is Action.LOG_COMPACTION]
    if not times:
        return None
    return (
        f"Hudi log compaction {', '.join(times)} pending: lakeward does not run log compaction (a Hudi writer "
        "with hoodie.log.compaction.enable completes it); its file groups are left out of compaction and "
        "clustering plans until then"
    )


@dataclass(frozen=True)
class ProgressMark:
    """Where a table's timeline had got to: the latest position (completion time, else instant time)
    of a completed instant, and the instants then pending. An instant completed since is past the
    latest position, or one of those pending: on version 6, whose instants carry no completion
    time, a write can complete after a later-requested one. Archival and cleans, which only
    remove older instants, are no progress."""

    latest: str
    pending: frozenset[str] = frozenset()

    def __str__(self) -> str:
        return self.latest


@dataclass(frozen=True)
class TableState:
    """What discovery knows about one table this cycle."""

    ref: TableRef
    table_type: str  # "COPY_ON_WRITE" | "MERGE_ON_READ"
    timeline_timezone: str  # "LOCAL" | "UTC": how to read instant times as moments
    timeline: Timeline
    pending_plans: tuple[PendingPlan, ...]
    #: Pending writes (commit, deltacommit, insert-overwrite replacecommit): ingestion in flight, or failed.
    pending_writes: tuple[Instant, ...]
    delta_commits_since_compaction: int
    writes_since_clean: int
    #: completed commits and replacecommits since the last clean: what makes old file slices
    #: (a merge-on-read table's delta commits mostly append logs; there is little to clean until one)
    rewrites_since_clean: int
    writes_since_replace: int
    last_completed: str | None
    last_clean: str | None
    #: Something odd but not fatal (e.g. an unreadable replacecommit plan); the state is still usable.
    error: str | None = None
    #: `hoodie.table.cdc.enabled`: writes persist change data (change tracking applies to MOR).
    cdc_enabled: bool = False
    #: delta commits since the last change-tracking run or compaction (both persist their changes)
    delta_commits_since_change_tracking: int = 0
    #: Columns the table's secondary indexes cover (empty: no index).
    index_columns: frozenset[str] = frozenset()
    #: Completed writes (new base files) since the last completed index build.
    writes_since_index_build: int = 0
    #: `hoodie.table.version` (6, 8, 9).
    table_version: int = 6
    #: Why the daemon only watches this table and never plans or runs anything on it, e.g.
    #: "read-only: table version 9 with a metadata table (...)" whose index partitions lakeward does not
    #: maintain on that version (`TableVersion.read_only_reason`); None: served.
    read_only: str | None = None
    #: The metadata table's compaction decision (every table version, with a `files` partition; None: no
    #: metadata table).
    metadata_compaction: MetadataCompactionCheck | None = None
    #: `hoodie.table.name`: the table lock's key when none is configured, as its writers take it (the
    #: daemon's name of a table found under a root is another one).
    hoodie_name: str = ""
    #: The earliest commit the latest completed clean retained: archival keeps every write from there on.
    clean_retain: str | None = None

    @property
    def is_merge_on_read(self) -> bool:
        return self.table_type == "MERGE_ON_READ"

    @property
    def completed(self) -> list[Instant]:
        return self.timeline.completed()

    @property
    def pending(self) -> list[Instant]:
        return self.timeline.pending()

    @property
    def completed_count(self) -> int:
        return len(self.timeline.completed())

    @property
    def progress_mark(self) -> ProgressMark:
        """Where the table's timeline has got to (see `ProgressMark`)."""
        latest = max((i.ordering_time for i in self.timeline.completed()), default="")
        return ProgressMark(latest, frozenset(i.time for i in self.timeline.pending()))

    def completed_after(self, mark: ProgressMark, rewrites_only: bool = False) -> int:
        """Instants completed since `mark` (a `progress_mark`); `rewrites_only`: only those that
        write new file versions (commits, compactions, replacecommits: not delta commits)."""
        return sum(
            1
            for i in self.timeline.completed()
            if (i.ordering_time > mark.latest or i.time in mark.pending)
            and (not rewrites_only or (i.action in WRITE_ACTIONS and i.action is not Action.DELTA_COMMIT))
        )

    @cached_property
    def service_state(self) -> ServiceState:
        """core's `ServiceState` of this state's timeline (what planning reads the last runs from).

        Pending replacecommits count as clustering plans when `pending_plans` says so.
        """
        clustering = {p.instant for p in self.pending_plans if p.action is ServiceAction.CLUSTERING}
        return service_state(self.timeline, self.table_version, clustering.__contains__)


@dataclass
class _Entry:
    names: frozenset[str]
    properties_size: int
    config: TableConfig
    state: TableState


@dataclass
class DiscoveryCache:
    """Per-table memory between cycles; one instance per daemon, reused by every `discover` call.

    Safe to share between the worker threads of one `discover` call (a lock guards updates).
    """

    entries: dict[str, _Entry] = field(default_factory=dict)
    #: time -> is a clustering plan; a requested replacecommit's content never changes.
    replace_kind: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: (table, completed clean's time) -> its earliestCommitToRetain; a completed clean never changes.
    clean_retain: dict[tuple[str, str], str | None] = field(default_factory=dict)
    #: table folders found under roots, so that known tables are not listed twice per cycle
    known_tables: set[str] = field(default_factory=set)
    #: table path -> (the state, its health snapshot): reused while the state is the same object
    health: dict[str, tuple[TableState, HealthSnapshot]] = field(default_factory=dict)
    #: what is read ("state PATH", "health PATH") -> (its read that outlived a cycle's timeout, when it started)
    hung: dict[str, tuple[Future[Any], float]] = field(default_factory=dict)
    listings: int = 0
    hits: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def forget(self, path: str) -> None:
        with self._lock:
            self.entries.pop(path, None)
            self.health.pop(path, None)
            self.known_tables.discard(path)


@dataclass(frozen=True)
class DiscoveryResult:
    states: list[TableState]
    problems: list[TableProblem]
    seconds: float
    #: Table name -> the root it was found under (tables of the static list are not in it).
    found_under: dict[str, str] = field(default_factory=dict)


# -- which tables ------------------------------------------------------------------------
def table_name_for(root: str, rel: str) -> str:
    """A discovered table's name: the root folder's last segment, then the table's folders below
    the root, joined by dots (`/lake/ingest` + `eu/orders` -> `ingest.eu.orders`)."""
    base = root_name(root)
    return f"{base}.{rel.replace('/', '.')}" if rel else base


def _known_below(root: str, storage: Storage, rel: str, cache: DiscoveryCache | None) -> list[TableRef]:
    """Tables the cache found below the folder `rel` of `root` in earlier scans."""
    if cache is None:
        return []
    base = storage.uri_of("").rstrip("/") + "/"
    below = storage.uri_of(rel).rstrip("/") + "/"
    with cache._lock:
        known = sorted(t for t in cache.known_tables if t.startswith(below))
    return [TableRef(table_name_for(root, t[len(base) :].strip("/")), t) for t in known]


def scan_root(root: str, max_depth: int = 3, cache: DiscoveryCache | None = None) -> tuple[list[TableRef], list[str]]:
    """Tables under `root`: (refs, errors). A folder with `.hoodie/` is a table; the scan does
    not descend into tables, hidden folders (`.x`, `_x`) or below `max_depth` levels.

    With a cache, a folder that was a table last time is taken as one without listing it
    (loading its state lists its `.hoodie/` anyway and notices when it is gone).
    """
    refs: list[TableRef] = []
    errors: list[str] = []
    try:
        storage = Storage.for_uri(root)
    except Exception as exc:  # bad URI, unreachable filesystem
        return [], [f"cannot open discovery root {root}: {exc}"]
    frontier: list[tuple[str, int]] = [("", 0)]
    while frontier:
        rel, depth = frontier.pop()
        full = storage.uri_of(rel)
        if rel and cache is not None and full in cache.known_tables:
            refs.append(TableRef(table_name_for(root, rel), full))
            continue
        try:
            entries = storage.list_dir(rel)
        except Exception as exc:
            errors.append(f"cannot list {full}: {exc}")
            # the tables known below stay the daemon's (each then a problem of its own, its alerts and
            # pause kept) rather than vanish while storage is down
            refs.extend(_known_below(root, storage, rel, cache))
            continue
        if cache is not None:
            cache.listings += 1
        if not rel and not entries and not storage.exists(""):
            errors.append(f"discovery root {root} does not exist")
            continue
        if rel and any(e.is_dir and e.name == METAFOLDER for e in entries):
            refs.append(TableRef(table_name_for(root, rel), full))
            if cache is not None:
                with cache._lock:
                    cache.known_tables.add(full)
            continue
        if depth >= max_depth:
            continue
        for e in entries:
            if e.is_dir and not e.name.startswith((".", "_")):
                frontier.append((e.path, depth + 1))
    refs.sort(key=lambda r: r.path)
    return refs, errors


# -- one table's state -------------------------------------------------------------------
def _is_clustering(storage: Storage, instant_time: str, cache: DiscoveryCache) -> bool:
    key = (storage.uri, instant_time)
    known = cache.replace_kind.get(key)
    if known is None:
        known = clustering_plan_of(storage, instant_time) is not None
        with cache._lock:
            cache.replace_kind[key] = known
    return known


def _clean_retain(storage: Storage, timeline: Timeline, cache: DiscoveryCache) -> str | None:
    cleans = timeline.completed(Action.CLEAN)
    if not cleans:
        return None
    key = (storage.uri, cleans[-1].time)
    if key not in cache.clean_retain:
        retain = clean_retain_of(storage, cleans[-1])
        with cache._lock:
            cache.clean_retain[key] = retain
    return cache.clean_retain[key]


def _index_columns(storage: Storage) -> frozenset[str]:
    """Columns of the table's secondary index definitions (read only when `.hoodie/.index/` exists)."""
    return frozenset(c for d in load_definitions(storage) for c in d.columns)


def _build_state(
    ref: TableRef,
    config: TableConfig,
    storage: Storage,
    timeline: Timeline,
    cache: DiscoveryCache,
    has_index_folder: bool = False,
    mdt_names: frozenset[str] | None = None,
) -> TableState:
    odd = not_times(i.time for i in timeline.instants)
    if odd:  # the planner places instants in time (ages, retention): say which, and plan nothing here
        raise CorruptTableError(
            f"instant file(s) named with a time that is no date-time: {', '.join(sorted(set(odd)))}; "
            "move them out of the timeline folder (they are no instants of any writer)"
        )
    service = service_state(timeline, config.version.number, lambda t: _is_clustering(storage, t, cache))
    error = "; ".join(filter(None, (service.error, _foreign_plans(service.pending_plans)))) or None
    index_columns: frozenset[str] = frozenset()
    if has_index_folder:
        try:
            index_columns = _index_columns(storage)
        except Exception as exc:  # a corrupt definitions file: report, keep the rest of the state
            error = f"cannot read secondary index definitions: {exc}"
    version = config.version
    mdt_check = _metadata_compaction(storage, config, timeline, mdt_names)
    mdt_plans = tuple(
        PendingPlan(ref, ServiceAction.METADATA_COMPACTION, t, "requested")
        for t in (mdt_check.pending if mdt_check else ())
    )
    return TableState(
        ref=ref,
        table_version=version.number,
        read_only=version.read_only_reason(metadata_partitions(config.to_properties())),
        table_type=config.table_type.value,
        timeline_timezone=config.timeline_timezone,
        timeline=timeline,
        pending_plans=tuple(
            PendingPlan(ref, _SERVICE_OF[p.action], p.instant.time, p.instant.state.value)
            for p in service.pending_plans
            if p.action in _SERVICE_OF
        )
        + mdt_plans,
        pending_writes=service.pending_writes,
        delta_commits_since_compaction=service.delta_commits_since_compaction,
        writes_since_clean=service.writes_since_clean,
        rewrites_since_clean=service.rewrites_since_clean,
        writes_since_replace=service.writes_since_replace,
        last_completed=service.last_completed,
        last_clean=service.last_clean,
        error=error,
        cdc_enabled=config.cdc_enabled,
        delta_commits_since_change_tracking=service.delta_commits_since_change_tracking,
        index_columns=index_columns,
        writes_since_index_build=service.writes_since_index_build,
        metadata_compaction=mdt_check,
        hoodie_name=config.name,
        clean_retain=_clean_retain(storage, timeline, cache),
    )


def _metadata_compaction(
    storage: Storage, config: TableConfig, timeline: Timeline, mdt_names: frozenset[str] | None
) -> MetadataCompactionCheck | None:
    """The metadata table's compaction decision (at Hudi's default threshold), from the metadata
    timeline's file names (listed by `load_state`); None for tables without a `files` partition."""
    if FILES_PARTITION not in metadata_partitions(config.to_properties()):
        return None
    mdt = Timeline.from_file_names(mdt_names or (), config.version.timeline_layout)
    return check_metadata_compaction(storage, timeline, DEFAULT_MAX_DELTA_COMMITS, mdt)


def _definitions_size(storage: Storage) -> int:
    try:
        return storage.size(DEFINITIONS_PATH)
    except FileNotFoundError:
        return -1


class _Gone(Exception):
    """A root-discovered table that no longer exists: dropped silently."""


def load_state(ref: TableRef, cache: DiscoveryCache, *, from_root: bool = False) -> TableState:
    """One table's state; raises on a table that cannot be read (the caller makes it a TableProblem)."""
    storage = Storage.for_uri(ref.path)
    entries = storage.list_dir(METAFOLDER)  # the one listing (two on timeline layout 2); missing folder -> []
    layout = layout_from_listing({e.name for e in entries if e.is_dir})
    timeline_names: frozenset[str] = frozenset()
    if layout is TimelineLayout.V2:  # table versions 8+: instants live in `.hoodie/timeline/`
        timeline_names = frozenset(e.name for e in storage.list_dir(layout.timeline_folder) if not e.is_dir)
    with cache._lock:
        cache.listings += 1 if layout is TimelineLayout.V1 else 2
    has_index_folder = any(e.is_dir and e.name == ".index" for e in entries)
    # a metadata table (every version): its timeline's names too, so that its compactions show
    mdt_names: frozenset[str] | None = None
    if any(e.is_dir and e.name == "metadata" for e in entries):
        mdt_folder = posixpath.join(METADATA_FOLDER, layout.timeline_folder)
        mdt_names = frozenset(e.name for e in storage.list_dir(mdt_folder) if not e.is_dir)
    # The definitions file's size tells a changed set of indexes apart (it lives in `.index/`).
    names = (
        frozenset(e.name for e in entries if not e.is_dir)
        | ({f".index/{_definitions_size(storage)}"} if has_index_folder else set())
        | {f"timeline/{n}" for n in timeline_names}
        | {f"metadata/{n}" for n in mdt_names or ()}
    )
    props = [e for e in entries if e.name == PROPERTIES_FILE and not e.is_dir]
    if not props:
        cache.forget(storage.uri)
        if from_root and not entries:
            raise _Gone(ref.path)
        bucket = storage.missing_bucket() if not entries else None
        if bucket is not None:
            raise FileNotFoundError(f"{ref.path} is not a table: its bucket {bucket!r} does not exist")
        raise FileNotFoundError(f"{ref.path} is not a table: {METAFOLDER}/{PROPERTIES_FILE} does not exist")
    entry = cache.entries.get(storage.uri)
    if entry is not None and entry.names == names and entry.properties_size == props[0].size and entry.state.ref == ref:
        with cache._lock:
            cache.hits += 1
        return entry.state
    if entry is not None and entry.properties_size == props[0].size:
        config = entry.config
    else:
        config = Table.open(ref.path).config
    # The table's version decides the layout; the listing only guesses it. They differ while an upgrade
    # is under way: `.hoodie/timeline/` is written before `hoodie.properties` switches to version 8+.
    if config.version.timeline_layout is TimelineLayout.V1:
        timeline = Timeline.from_file_names(e.name for e in entries if not e.is_dir)
    else:
        if layout is TimelineLayout.V1:
            timeline_names = frozenset(e.name for e in storage.list_dir(config.version.timeline_folder) if not e.is_dir)
        timeline = Timeline.from_file_names(timeline_names, TimelineLayout.V2)
    state = _build_state(ref, config, storage, timeline, cache, has_index_folder, mdt_names)
    with cache._lock:
        cache.entries[storage.uri] = _Entry(names, props[0].size, config, state)
    return state


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def discover(
    refs: Sequence[TableRef],
    roots: Iterable[str] = (),
    cache: DiscoveryCache | None = None,
    *,
    max_depth: int = 3,
    workers: int = 8,
    pool: Executor | None = None,
    load_timeout_s: float | None = None,
) -> DiscoveryResult:
    """One discovery cycle: the static `refs` plus tables found under `roots`, each table's state.

    Tables are loaded by `workers` threads (listings on object stores are slow; local ones
    release the GIL too), or on `pool`, a long-lived executor (the daemon's: no threads
    started and stopped every cycle). Problems never stop the cycle. With `pool` and
    `load_timeout_s`, a table whose load runs longer is a problem of the cycle, and is not
    loaded again until that load returns (`_within`): hung storage holds up its tables only.
    """
    started = time.perf_counter()
    cache = cache if cache is not None else DiscoveryCache()
    problems: list[TableProblem] = []
    tables: list[tuple[TableRef, bool]] = []
    seen_paths: set[str] = set()
    used_names: set[str] = set()
    found_under: dict[str, str] = {}

    def add(ref: TableRef, root: str | None) -> None:
        path = table_location(ref.path)  # one table in two spellings (/x/t, file:///x/t) is served once
        if path in seen_paths:
            return
        name, n = ref.name, 2
        while name in used_names:
            name, n = f"{ref.name}-{n}", n + 1
        seen_paths.add(path)
        used_names.add(name)
        tables.append((TableRef(name, ref.path), root is not None))
        if root is not None:
            found_under[name] = root

    for ref in refs:
        add(ref, None)
    for root in roots:
        found, errors = scan_root(root, max_depth, cache)
        problems.extend(TableProblem(TableRef(table_name_for(root, ""), root), e) for e in errors)
        for ref in found:
            add(ref, root)

    def one(item: tuple[TableRef, bool]) -> TableState | TableProblem | None:
        ref, from_root = item
        try:
            return load_state(ref, cache, from_root=from_root)
        except _Gone:
            return None
        except Exception as exc:
            return TableProblem(ref, _describe(exc))

    if pool is not None and load_timeout_s is not None:

        def late(item: tuple[TableRef, bool], why: str) -> TableProblem:
            return TableProblem(item[0], f"reading its state: {why}")

        results = _within(one, tables, pool, load_timeout_s, cache, _state_key, late)
    else:
        results = _map(one, tables, pool, workers, "discovery")
    states = [r for r in results if isinstance(r, TableState)]
    problems.extend(r for r in results if isinstance(r, TableProblem))
    return DiscoveryResult(states, problems, time.perf_counter() - started, found_under)


def _state_key(item: tuple[TableRef, bool]) -> str:
    """What `DiscoveryCache.hung` knows a table's state read by."""
    return f"state {table_location(item[0].path)}"


class HungReadError(Exception):
    """A table's storage does not answer: a read of its state outlived the timeout, or an earlier one still hangs."""


class RenewingPool(Executor):
    """A thread pool that reads of hung storage cannot use up.

    A read that never returns keeps its thread: Python cannot stop it. With as many hung reads as the
    pool has threads, every later task would queue behind them for good. `renew()`, called once a
    read is found hung, sends later tasks to a fresh pool of the same size; the former one ends its
    idle threads, and its hung ones when their reads return. Threads grow by the hung reads only.
    """

    def __init__(self, workers: int, name: str):
        self._workers, self._name = workers, name
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)

    def submit(self, fn: Callable[..., _R], /, *args: Any, **kwargs: Any) -> Future[_R]:
        with self._lock:
            return self._pool.submit(fn, *args, **kwargs)

    def renew(self) -> None:
        """Later tasks run on fresh threads; the current pool keeps (and then ends) what it runs."""
        with self._lock:
            retired, self._pool = self._pool, ThreadPoolExecutor(self._workers, thread_name_prefix=self._name)
        retired.shutdown(wait=False)  # (what it queued still runs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut the current pool down (a renewed one's threads end with their hung reads)."""
        with self._lock:
            pool = self._pool
        pool.shutdown(wait=wait, cancel_futures=cancel_futures)


def _renew(pool: Executor) -> None:
    """A read on `pool` hangs: renew it (`RenewingPool`) so that it does not take a thread for good."""
    if isinstance(pool, RenewingPool):
        pool.renew()


def read_within(cache: DiscoveryCache, ref: TableRef, read: Callable[[], _R], pool: Executor, timeout_s: float) -> _R:
    """`read()` of the table `ref` on `pool`, for callers that must answer (the API): HungReadError when it
    does not return within `timeout_s` (it is then remembered as hung, as discovery remembers its loads),
    or at once while an earlier read of the table hangs."""
    key = _state_key((ref, False))
    now = time.monotonic()
    with cache._lock:
        earlier = cache.hung.get(key)
        if earlier is not None and earlier[0].done():
            del cache.hung[key]
            earlier = None
    if earlier is not None:
        raise HungReadError(f"a read of its state started {now - earlier[1]:.0f}s ago has not returned (hung storage?)")
    future = pool.submit(read)
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError:
        if future.done():
            raise  # the read itself timed out (a socket): its own error
        with cache._lock:
            cache.hung.setdefault(key, (future, now))
        _renew(pool)
        raise HungReadError(f"no answer within {timeout_s:g}s reading its state (hung storage?)") from None


def _within(
    fn: Callable[[_T], _R],
    items: Sequence[_T],
    pool: Executor,
    timeout_s: float,
    cache: DiscoveryCache,
    key: Callable[[_T], str],
    late: Callable[[_T, str], _R],
) -> list[_R]:
    """`fn` over `items` on `pool`, giving up on a call once it has run `timeout_s`: its result is then
    `late(item, why)`. Its thread stays blocked (Python cannot stop it) and the item (by `key`) is given
    `late` at once until that call returns, so hung reads never pile up. A call still queued behind
    others is waited for, up to twice the timeout in all."""
    results: dict[int, _R] = {}
    started: dict[int, float] = {}
    futures: dict[int, Future[_R]] = {}

    def timed(i: int, item: _T) -> _R:
        started[i] = time.monotonic()
        return fn(item)

    now = time.monotonic()
    for i, item in enumerate(items):
        with cache._lock:
            earlier = cache.hung.get(key(item))
            if earlier is not None and earlier[0].done():
                del cache.hung[key(item)]
                earlier = None
        if earlier is not None:
            results[i] = late(
                item,
                f"a read started {now - earlier[1]:.0f}s ago has not returned (hung storage?); "
                "not read again until it does",
            )
        else:
            futures[i] = pool.submit(timed, i, item)
    give_up = now + 2 * timeout_s
    while True:
        waiting = [i for i, f in futures.items() if not f.done()]
        clock = time.monotonic()
        overdue = [i for i in waiting if i in started and clock - started[i] >= timeout_s]
        if len(overdue) == len(waiting) or clock >= give_up:
            break
        wait([futures[i] for i in waiting if i not in overdue], timeout=0.2, return_when=FIRST_COMPLETED)
    hung = False
    for i, future in futures.items():
        if future.done():
            results[i] = future.result()
            continue
        future.cancel()  # one still queued never starts; a running one goes on and is remembered
        if i in started:
            with cache._lock:
                cache.hung[key(items[i])] = (future, started[i])
            hung = True
        results[i] = late(items[i], f"no answer within {timeout_s:g}s (hung storage?)")
    if hung:
        _renew(pool)
    return [results[i] for i in range(len(items))]


# -- health ------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableHealth:
    """One table's health this cycle: its report, or why it could not be computed."""

    table: TableRef
    report: HealthReport | None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the API shows it: the report's numbers without the per-file-group lists (they grow with
        the table), findings worst first, the oldest pending plan per action."""
        out: dict[str, Any] = {"table": self.table.name, "score": None, "error": self.error}
        if self.report is None:
            return out
        full = self.report.to_json_dict()
        snapshot = {
            k: v
            for k, v in full.pop("snapshot").items()
            if k not in ("log_files_per_group", "log_bytes_per_group", "base_file_sizes", "pending_plans")
        }
        return {**out, **snapshot, **full}


def _snapshot(
    state: TableState, options: Mapping[str, str], cache: DiscoveryCache, now: dt.datetime, max_age_s: float
) -> HealthSnapshot:
    """The table's health snapshot: the cached one while its state is unchanged and young enough."""
    cached = cache.health.get(state.ref.path)
    if cached is not None and cached[0] is state and (now - cached[1].taken_at).total_seconds() < max_age_s:
        return cached[1].aged_to(now)  # the table did not change: its ages still grow
    snapshot = take_snapshot(Table.open(state.ref.path, options=dict(options)), now)
    with cache._lock:
        cache.health[state.ref.path] = (state, snapshot)
    return snapshot


def assess_health(
    states: Sequence[TableState],
    options_for: Callable[[TableRef], Mapping[str, str]],
    policy_for: Callable[[str], HealthPolicy],
    cache: DiscoveryCache,
    *,
    now: dt.datetime | None = None,
    max_age_s: float = 300.0,
    workers: int = 4,
    pool: Executor | None = None,
    timeout_s: float | None = None,
) -> dict[str, TableHealth]:
    """The health of each table of a cycle, by table name (module doc); errors never stop the others.

    `pool`: a long-lived executor to score the tables on (the daemon's: no threads started and
    stopped every cycle); without one, a pool of `workers` threads for this call. With `pool` and
    `timeout_s`, a table whose listing hangs gets an error instead of holding up the others (`_within`).
    """
    moment = now if now is not None else dt.datetime.now(dt.UTC)

    def one(state: TableState) -> TableHealth:
        try:
            snapshot = _snapshot(state, options_for(state.ref), cache, moment, max_age_s)
            return TableHealth(state.ref, health_report(snapshot, policy_for(state.ref.name)))
        except Exception as exc:  # a table that lists badly this cycle: report it, score the others
            return TableHealth(state.ref, None, _describe(exc))

    if pool is not None and timeout_s is not None:

        def late(state: TableState, why: str) -> TableHealth:
            return TableHealth(state.ref, None, f"listing its files: {why}")

        scored = _within(one, states, pool, timeout_s, cache, lambda s: f"health {s.ref.path}", late)
    else:
        scored = _map(one, states, pool, workers, "health")
    return {h.table.name: h for h in scored}


def _map(fn: Callable[[_T], _R], items: Sequence[_T], pool: Executor | None, workers: int, name: str) -> list[_R]:
    """`fn` over `items` in order: on `pool` when given, else on `workers` threads of a pool for this
    call (named `name`), serially when there is one item or one worker."""
    if len(items) <= 1 or (pool is None and workers <= 1):
        return [fn(item) for item in items]
    if pool is not None:
        return list(pool.map(fn, items))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name) as own:
        return list(own.map(fn, items))


__all__ = [
    "DiscoveryCache",
    "DiscoveryResult",
    "HungReadError",
    "TableHealth",
    "TableState",
    "assess_health",
    "discover",
    "load_state",
    "read_within",
    "scan_root",
]
