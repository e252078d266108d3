"""Instants: one action at one instant time in one state, parsed from and formatted to file names."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum

from lakeward.core.table_version import INSTANT_TIME_PATTERN, TimelineLayout


class State(str, Enum):
    REQUESTED = "requested"
    INFLIGHT = "inflight"
    COMPLETED = "completed"

    @property
    def rank(self) -> int:
        return _STATE_RANK[self]


_STATE_RANK = {State.REQUESTED: 0, State.INFLIGHT: 1, State.COMPLETED: 2}


class Action(str, Enum):
    """Timeline actions of table version 6, by their on-disk names."""

    COMMIT = "commit"
    DELTA_COMMIT = "deltacommit"
    REPLACE_COMMIT = "replacecommit"
    COMPACTION = "compaction"
    LOG_COMPACTION = "logcompaction"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    INDEXING = "indexing"
    #: Pending clustering on layout 2 (table versions 8+); completes as a replacecommit.
    CLUSTERING = "clustering"
    #: lakeward's change-tracking service (persists CDC data of merge-on-read delta
    #: commits). Not a Hudi action: Hudi and hudi-rs skip timeline files they do not know.
    CHANGE_TRACKING = "changetracking"

    @property
    def completed_action(self) -> Action:
        """The action a completed instant of this action is recorded under."""
        return _COMPLETED_AS.get(self, self)


_COMPLETED_AS = {
    Action.COMPACTION: Action.COMMIT,
    Action.LOG_COMPACTION: Action.DELTA_COMMIT,
    Action.CLUSTERING: Action.REPLACE_COMMIT,
}

#: Completed actions that define a table's data (what snapshot readers look at).
WRITE_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})

INSTANT_TIME_RE = re.compile(rf"^({INSTANT_TIME_PATTERN})$")
_FILE_RE = re.compile(rf"^({INSTANT_TIME_PATTERN})(?:_(\d{{14}}|\d{{17}}))?\.([a-z]+)(?:\.(requested|inflight))?$")


@dataclass(frozen=True, order=False)
class Instant:
    """One timeline entry. A completed compaction is `Instant(t, COMMIT, COMPLETED)`.

    `completion_time`: when a completed instant completed, from its file name
    `<t>_<completion>.<action>` (timeline layout 2, table versions 8+); None on layout 1
    (table version 6), which does not record it. `layout` says which timeline folder the
    instant's file is in. `archive_file`: for an instant archived into the LSM history
    (layout 2), the parquet file holding its content, relative to the base path; None for
    an instant of the active timeline. None of these take part in equality: an instant is
    its time, action and state.
    """

    time: str
    action: Action
    state: State
    completion_time: str | None = field(default=None, compare=False)
    layout: TimelineLayout = field(default=TimelineLayout.V1, compare=False)
    archive_file: str | None = field(default=None, compare=False)

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_archived(self) -> bool:
        """Read from the LSM archived timeline, not from a file of the active timeline."""
        return self.archive_file is not None

    @property
    def file_name(self) -> str:
        if self.state is State.COMPLETED:
            if self.completion_time is not None:
                return f"{self.time}_{self.completion_time}.{self.action.completed_action.value}"
            return f"{self.time}.{self.action.completed_action.value}"
        if self.state is State.INFLIGHT and self.action is Action.COMMIT:
            return f"{self.time}.inflight"  # Hudi's legacy name, still written by 0.14/0.15
        return f"{self.time}.{self.action.value}.{self.state.value}"

    def with_state(self, state: State, completion_time: str | None = None) -> Instant:
        return Instant(self.time, self.action, state, completion_time, self.layout)

    @property
    def ordering_time(self) -> str:
        """The time this instant's writes became visible: its completion time when known."""
        return self.completion_time or self.time

    def sort_key(self) -> tuple[str, int, str]:
        """Timeline order: by instant time, then state, then action name, so that instants of
        one time (a write and its savepoint) keep one order whatever the folder listing order."""
        return (self.time, self.state.rank, self.action.value)

    @classmethod
    def parse(cls, file_name: str, layout: TimelineLayout = TimelineLayout.V1) -> Instant | None:
        """Parse a timeline file name; None for files that are not instants.

        `<t>_<c>.<action>` (a completion time in the name) is accepted on layout 2 only.
        """
        if file_name.endswith(".inflight") and INSTANT_TIME_RE.match(file_name[: -len(".inflight")]):
            return cls(file_name[: -len(".inflight")], Action.COMMIT, State.INFLIGHT, layout=layout)
        m = _FILE_RE.match(file_name)
        if not m:
            return None
        time, completion, action_name, state_name = m.groups()
        if completion is not None and (state_name or not layout.completion_time_in_name):
            return None
        try:
            action = Action(action_name)
        except ValueError:
            return None
        state = State(state_name) if state_name else State.COMPLETED
        if state is State.COMPLETED and action is not action.completed_action:
            return None
        return cls(time, action, state, completion, layout)

    def __str__(self) -> str:
        return f"{self.time}.{self.action.value}[{self.state.value}]"
