"""Timeline selectors: `completed(action=...)` and `pending(action=..., state=...)`."""

from __future__ import annotations

import pytest

from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import WRITE_ACTIONS, Action, State, Timeline

FILES = [
    "20260101000001000.commit",
    "20260101000002000.deltacommit",
    "20260101000003000.compaction.requested",
    "20260101000003000.commit",  # a completed compaction
    "20260101000004000.clean.requested",
    "20260101000004000.clean.inflight",
    "20260101000004000.clean",
    "20260101000005000.compaction.requested",
    "20260101000006000.clean.requested",
    "20260101000007000.deltacommit.requested",
    "20260101000007000.deltacommit.inflight",
    "20260101000008000.replacecommit.requested",
]


def _times(instants: list) -> list[str]:  # type: ignore[type-arg]
    return [i.time[-4:-3] for i in instants]


def test_completed_by_action_name_enum_or_set() -> None:
    tl = Timeline.from_file_names(FILES)
    assert _times(tl.completed()) == ["1", "2", "3", "4"]
    assert _times(tl.completed(Action.COMMIT)) == ["1", "3"]  # a completed compaction is a commit
    assert _times(tl.completed("commit")) == ["1", "3"]
    assert _times(tl.completed({Action.CLEAN, "deltacommit"})) == ["2", "4"]
    assert tl.completed(WRITE_ACTIONS) == tl.completed_writes()
    assert tl.completed(Action.COMPACTION) == []  # a pending-only action name selects no completed instant


def test_pending_by_action_and_state() -> None:
    tl = Timeline.from_file_names(FILES)
    assert _times(tl.pending()) == ["5", "6", "7", "8"]
    assert _times(tl.pending(Action.COMPACTION)) == ["5"]
    assert _times(tl.pending(["clean", Action.REPLACE_COMMIT])) == ["6", "8"]
    assert _times(tl.pending(state=State.INFLIGHT)) == ["7"]
    assert _times(tl.pending(WRITE_ACTIONS, state=State.REQUESTED)) == ["8"]
    assert tl.pending(WRITE_ACTIONS) == tl.pending_writes()


def test_unknown_action_name_is_an_error() -> None:
    with pytest.raises(ValueError):
        Timeline.from_file_names(FILES).completed("comit")


@pytest.mark.parametrize("savepoint_listed_last", [False, True])
def test_completion_times_are_the_writes_not_a_savepoint_of_the_same_time(savepoint_listed_last: bool) -> None:
    """A savepoint has the instant time of the write it saves and completes later; on layout 2 the
    write's completion time places its log files, whatever order the folder lists the files in."""
    names = [
        "20260101000001000.deltacommit.requested",
        "20260101000001000.deltacommit.inflight",
        "20260101000001000_20260101000001500.deltacommit",
        "20260101000001000.savepoint.inflight",
        "20260101000001000_20260101000003000.savepoint",
        "20260101000002000_20260101000002500.commit",
    ]
    if not savepoint_listed_last:
        names.reverse()
    tl = Timeline.from_file_names(names, TimelineLayout.V2)
    assert [(i.time[-4:-3], i.action) for i in tl] == [
        ("1", Action.DELTA_COMMIT),
        ("1", Action.SAVEPOINT),
        ("2", Action.COMMIT),
    ]
    assert tl.completion_times() == {
        "20260101000001000": "20260101000001500",
        "20260101000002000": "20260101000002500",
    }
