"""Instant times as moments: between the timeline's zone (UTC or the machine's local zone) and aware datetimes;
and report dataclasses as JSON-ready values.

Kept apart from `timeline/instant_time.py` while that package is being reshaped; it
belongs there (health ages and orphan cutoffs are its only users so far).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum

from lakeward.core.timeline.instant_time import format_instant_time, parse_instant_time


def aware(moment: dt.datetime | None) -> dt.datetime:
    """`moment` as an aware datetime (None: now; naive: local time)."""
    if moment is None:
        return dt.datetime.now(dt.UTC)
    return moment if moment.tzinfo is not None else moment.astimezone()


def instant_moment(instant_time: str, timezone: str) -> dt.datetime:
    """The moment an instant time names, as an aware datetime (in the timeline's zone: UTC or local)."""
    moment = parse_instant_time(instant_time)
    return moment.replace(tzinfo=dt.UTC) if timezone.upper() == "UTC" else moment.astimezone()


def in_timeline_zone(moment: dt.datetime, timezone: str) -> dt.datetime:
    """An aware moment as the naive wall-clock time of the timeline's zone (what instant times are made of)."""
    return moment.astimezone(dt.UTC if timezone.upper() == "UTC" else None).replace(tzinfo=None)


def moment_instant_time(moment: dt.datetime, timezone: str) -> str:
    """The instant time of an aware moment in the timeline's zone."""
    return format_instant_time(in_timeline_zone(moment, timezone))


def json_ready(value: object) -> object:
    """A dataclass tree (enums, datetimes, timedeltas, tuples) as JSON-ready plain values.

    Datetimes become ISO strings, timedeltas seconds, enums their values; used by the
    health and orphan reports for the API and the CLI's `--json`.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_ready(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value
