"""The active timeline: every instant under `.hoodie/`, at its most advanced state, and queries."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TypeAlias

from lakeward.core.storage import Storage
from lakeward.core.table_version import METAFOLDER, TimelineLayout, layout_from_listing
from lakeward.core.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from lakeward.core.timeline.lsm_history import load_archived_instants

__all__ = ["METAFOLDER", "ActionFilter", "Timeline"]

#: Which actions a timeline query selects: one action (or its on-disk name), or a set of them.
ActionFilter: TypeAlias = Action | str | Iterable[Action | str]


def _actions(action: ActionFilter) -> frozenset[Action]:
    if isinstance(action, str):  # an Action is a str too
        return frozenset({Action(action)})
    return frozenset(Action(a) for a in action)


@dataclass(frozen=True)
class Timeline:
    """Instants ordered by time; one entry per (time, action family) at its latest state.

    `files` keeps every timeline file seen, so callers can tell e.g. that a completed
    `commit` was a compaction (`<t>.compaction.requested` exists). `layout` is the
    timeline layout (1: `.hoodie/`, table version 6; 2: `.hoodie/timeline/`, versions 8+).
    """

    instants: tuple[Instant, ...]
    files: frozenset[str] = frozenset()
    layout: TimelineLayout = TimelineLayout.V1

    @classmethod
    def from_file_names(cls, names: Iterable[str], layout: TimelineLayout = TimelineLayout.V1) -> Timeline:
        latest: dict[tuple[str, Action], Instant] = {}
        files = set()
        for name in names:
            instant = Instant.parse(name, layout)
            if instant is None:
                continue
            files.add(name)
            family = instant.action.completed_action
            key = (instant.time, family)
            current = latest.get(key)
            if current is None or instant.state.rank > current.state.rank:
                latest[key] = instant
            elif instant.state.rank == current.state.rank and instant.action is not family:
                latest[key] = instant  # prefer the plan's own action name for pending states
        ordered = sorted(latest.values(), key=Instant.sort_key)
        return cls(tuple(ordered), frozenset(files), layout)

    @classmethod
    def load(cls, storage: Storage, layout: TimelineLayout | None = None) -> Timeline:
        """List the active timeline folder once and build the timeline.

        `layout` comes from the table's version (`TableVersion.timeline_layout`); without
        it the layout is told from the `.hoodie/` listing (layout 2 has `.hoodie/timeline/`).
        """
        if layout is None:
            entries = storage.list_dir(METAFOLDER)
            layout = layout_from_listing({e.name for e in entries if e.is_dir})
            if layout is TimelineLayout.V1:
                return cls.from_file_names(e.name for e in entries if not e.is_dir)
        entries = storage.list_dir(layout.timeline_folder)
        names = (e.name for e in entries if not e.is_dir)
        return cls.from_file_names(names) if layout is TimelineLayout.V1 else cls.from_file_names(names, layout)

    def with_history(self, storage: Storage, history_folder: str) -> Timeline:
        """This timeline plus the instants archived into the LSM history in `history_folder`.

        Layout 2 only (table versions 8+): time travel and incremental reads that reach
        before the active timeline, and the completion times of archived delta commits
        whose log files still sit in live file slices, come from there. Archived instants
        carry `archive_file`; their content is read from the history, not from `files`.
        An instant on both (an archival interrupted before it removed the active files)
        is taken from the active timeline.
        """
        if self.layout is not TimelineLayout.V2:
            return self
        archived = load_archived_instants(storage, history_folder)
        if not archived:
            return self
        active = {(i.time, i.action.completed_action) for i in self.instants}
        extra = [i for i in archived if (i.time, i.action) not in active]
        merged = sorted([*extra, *self.instants], key=Instant.sort_key)
        return Timeline(tuple(merged), self.files, self.layout)

    def active(self) -> list[Instant]:
        """The instants of the active timeline (not those read from the archived history)."""
        return [i for i in self.instants if i.archive_file is None]

    # -- queries -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Instant]:
        return iter(self.instants)

    def __len__(self) -> int:
        return len(self.instants)

    def completed(self, action: ActionFilter | None = None) -> list[Instant]:
        """Completed instants, oldest first; with `action`, only those of that action (or set of actions).

        A completed instant is recorded under its completed action: a finished compaction is
        a `commit`, a finished clustering a `replacecommit` (use `was_compaction` to tell).
        """
        wanted = None if action is None else _actions(action)
        return [i for i in self.instants if i.is_completed and (wanted is None or i.action in wanted)]

    def pending(self, action: ActionFilter | None = None, state: State | None = None) -> list[Instant]:
        """Requested and inflight instants, oldest first, optionally of `action` and in `state`.

        A pending plan keeps its own action (`compaction`, `logcompaction`, `clean`, ...).
        """
        wanted = None if action is None else _actions(action)
        return [
            i
            for i in self.instants
            if not i.is_completed and (wanted is None or i.action in wanted) and (state is None or i.state is state)
        ]

    def completed_writes(self) -> list[Instant]:
        """Completed commit, deltacommit and replacecommit instants: they define the data."""
        return self.completed(WRITE_ACTIONS)

    def completed_write_times(self) -> frozenset[str]:
        return frozenset(i.time for i in self.completed_writes())

    def latest_completed_write(self) -> Instant | None:
        writes = self.completed_writes()
        return writes[-1] if writes else None

    def latest_time(self) -> str | None:
        """The largest instant or completion time on the timeline, in any state.

        New instant times must exceed it: on layout 2 a requested time below a completion
        time already on the timeline would break slicing by completion time.
        """
        return max((t for i in self.instants for t in (i.time, i.completion_time) if t is not None), default=None)

    def pending_writes(self) -> list[Instant]:
        return self.pending(WRITE_ACTIONS)

    def find(self, time: str) -> list[Instant]:
        return [i for i in self.instants if i.time == time]

    def completion_times(self) -> dict[str, str]:
        """Instant time -> completion time of completed writes that record one (layout 2).

        Writes only: a savepoint has the instant time of the write it saves and completes
        later, and the write's own completion time is what places its log files in a file
        slice (a savepoint's would move them past a compaction that completed in between).
        """
        return {i.time: i.completion_time for i in self.completed_writes() if i.completion_time is not None}

    def was_compaction(self, time: str) -> bool:
        return f"{time}.compaction.requested" in self.files

    def completed_write_as_of(self, time: str) -> Instant | None:
        """The latest completed write instant whose time is not after `time`."""
        found = None
        for instant in self.completed_writes():
            if instant.time <= time:
                found = instant
        return found

    def completed_writes_between(self, begin: str | None, end: str | None) -> list[Instant]:
        """Completed writes in the half-open range (begin, end].

        Compared by completion time where the timeline records it (layout 2), as Hudi 1.x
        incremental queries do: a write belongs to the range in which it became visible.
        """
        return [
            i
            for i in self.completed_writes()
            if (begin is None or i.ordering_time > begin) and (end is None or i.ordering_time <= end)
        ]

    def state_of(self, time: str, action: Action) -> State | None:
        for i in self.instants:
            if i.time == time and i.action.completed_action == action.completed_action:
                return i.state
        return None
