"""The timeline: instants, their states and metadata under `.hoodie/`."""

from lakeward.core.timeline.instant import WRITE_ACTIONS, Action, Instant, State
from lakeward.core.timeline.instant_time import InstantTime, instant_time_of, new_instant_time, normalize_instant_time
from lakeward.core.timeline.metadata import CommitMetadata, WriteStat
from lakeward.core.timeline.timeline import METAFOLDER, Timeline

__all__ = [
    "METAFOLDER",
    "WRITE_ACTIONS",
    "Action",
    "CommitMetadata",
    "Instant",
    "State",
    "Timeline",
    "WriteStat",
    "new_instant_time",
    "normalize_instant_time",
    "InstantTime",
    "instant_time_of",
]
