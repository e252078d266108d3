"""Instant times: `yyyyMMddHHmmssSSS`, strictly increasing, in the table's timeline time zone."""

from __future__ import annotations

import datetime as dt
import re
import threading
from collections.abc import Iterable
from typing import TypeAlias

from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.timeline.instant import INSTANT_TIME_RE, Instant

#: What users pass as an instant time: `yyyyMMddHHmmssSSS`, a date-time (string or datetime), or an
#: `Instant` (e.g. from `Table.completed_instants()`).
InstantTime: TypeAlias = str | dt.datetime | Instant

#: `str(Instant)`: `20261121094737855.commit[completed]` (what Spark options hold when given an Instant).
_INSTANT_STR_RE = re.compile(r"^(\d{14}|\d{17})\.[a-z_]+\[[a-z]+\]$")

_FORMAT = "%Y%m%d%H%M%S"
_lock = threading.Lock()
_last_issued = ""


def format_instant_time(moment: dt.datetime) -> str:
    return moment.strftime(_FORMAT) + f"{moment.microsecond // 1000:03d}"


def _now(timezone: str) -> dt.datetime:
    if timezone.upper() == "UTC":
        return dt.datetime.now(dt.UTC)
    return dt.datetime.now()


def parse_instant_time(instant_time: str) -> dt.datetime:
    """The naive date-time of an instant time `yyyyMMddHHmmss[SSS]` (in the timeline's time zone)."""
    return dt.datetime.strptime(instant_time[:14], _FORMAT).replace(microsecond=int(instant_time[14:17] or "0") * 1000)


def not_times(instant_times: Iterable[str]) -> list[str]:
    """The instant times among `instant_times` that name no date-time (month 13, hour 25): Hudi's
    timeline takes any digits, but nothing can place such an instant in time (ages, retention)."""
    out = []
    for t in instant_times:
        try:
            parse_instant_time(t)
        except ValueError:
            out.append(t)
    return out


def next_instant_time(instant_time: str) -> str:
    """The instant time one millisecond after `instant_time`."""
    return format_instant_time(parse_instant_time(instant_time) + dt.timedelta(milliseconds=1))


def previous_instant_time(instant_time: str) -> str:
    """The instant time one millisecond before `instant_time` (Hudi's `instantTimeMinusMillis(t, 1)`)."""
    return format_instant_time(parse_instant_time(instant_time) - dt.timedelta(milliseconds=1))


def new_instant_time(after: str | None = None, timezone: str = "LOCAL") -> str:
    """A fresh instant time, later than every time issued in this process and than `after`."""
    global _last_issued
    with _lock:
        candidate = format_instant_time(_now(timezone))
        floor = max(_last_issued, after or "")
        if floor and candidate <= floor:
            candidate = next_instant_time(floor.ljust(17, "9") if len(floor) == 14 else floor)
        _last_issued = candidate
        return candidate


def instant_time_of(value: str | Instant) -> str:
    """The instant time of an argument naming one instant exactly: a time string, or an `Instant`."""
    if isinstance(value, Instant):
        return value.time
    text = value.strip()
    shown = _INSTANT_STR_RE.match(text)
    return shown.group(1) if shown else text


def normalize_instant_time(value: InstantTime, timezone: str = "LOCAL") -> str:
    """Turn an instant time, an `Instant`, a date-time string or a datetime into a 17-digit comparable time.

    Strings of 14 or 17 digits are instant times; other strings are parsed as ISO
    date-times (`2024-04-18 17:32:13.674`). Aware datetimes are converted to the
    timeline's zone (the machine's local zone unless the table says UTC).
    """
    if isinstance(value, Instant):
        value = value.time
    if isinstance(value, str):
        text = instant_time_of(value)
        if INSTANT_TIME_RE.match(text):
            return text if len(text) == 17 else text + "999"
        if text.isdigit() and len(text) < 8:
            return text.rjust(17, "0")  # e.g. "0": before every instant, as Hudi accepts
        if text.isdigit() and len(text) < 17:
            return text.ljust(17, "9")
        try:
            value = dt.datetime.fromisoformat(text)
        except ValueError:
            raise InstantNotFoundError(
                f"{value!r} is neither an instant time (yyyyMMddHHmmssSSS) nor an ISO date-time"
            ) from None
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC if timezone.upper() == "UTC" else None)
        value = value.replace(tzinfo=None)
    return format_instant_time(value)
