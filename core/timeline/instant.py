"""Instants: one action at one instant time in one state, parsed from and formatted to file names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


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
    #: lakeward's change-tracking service (persists CDC data of merge-on-read delta
    #: commits). Not a Hudi action: Hudi and hudi-rs skip timeline files they do not know.
    CHANGE_TRACKING = "changetracking"

    @property
    def completed_action(self) -> Action:
        """The action a completed instant of this action is recorded under."""
        return {Action.COMPACTION: Action.COMMIT, Action.LOG_COMPACTION: Action.DELTA_COMMIT}.get(self, self)


#: Completed actions that define a table's data (what snapshot readers look at).
WRITE_ACTIONS = frozenset({Action.COMMIT, Action.DELTA_COMMIT, Action.REPLACE_COMMIT})

INSTANT_TIME_RE = re.compile(r"^(\d{14}|\d{17})$")
_FILE_RE = re.compile(r"^(\d{14}|\d{17})\.([a-z]+)(?:\.(requested|inflight))?$")


@dataclass(frozen=True, order=False)
class Instant:
    """One timeline entry. A completed compaction is `Instant(t, COMMIT, COMPLETED)`."""

    time: str
    action: Action
    state: State

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def file_name(self) -> str:
        if self.state is State.COMPLETED:
            return f"{self.time}.{self.action.completed_action.value}"
        if self.state is State.INFLIGHT and self.action is Action.COMMIT:
            return f"{self.time}.inflight"  # Hudi's legacy name, still written by 0.14/0.15
        return f"{self.time}.{self.action.value}.{self.state.value}"

    def with_state(self, state: State) -> Instant:
        return Instant(self.time, self.action, state)

    def sort_key(self) -> tuple[str, int]:
        return (self.time, self.state.rank)

    @classmethod
    def parse(cls, file_name: str) -> Instant | None:
        """Parse a timeline file name; None for files that are not instants."""
        if file_name.endswith(".inflight") and INSTANT_TIME_RE.match(file_name[: -len(".inflight")]):
            return cls(file_name[: -len(".inflight")], Action.COMMIT, State.INFLIGHT)
        m = _FILE_RE.match(file_name)
        if not m:
            return None
        time, action_name, state_name = m.groups()
        try:
            action = Action(action_name)
        except ValueError:
            return None
        state = State(state_name) if state_name else State.COMPLETED
        if state is State.COMPLETED and action in (Action.COMPACTION, Action.LOG_COMPACTION):
            return None
        return cls(time, action, state)

    def __str__(self) -> str:
        return f"{self.time}.{self.action.value}[{self.state.value}]"
