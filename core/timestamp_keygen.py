"""Partition paths of Hudi's `TimestampBasedKeyGenerator`: a time field formatted with a Joda pattern.

As `TimestampBasedAvroKeyGenerator` and its `HoodieDateTimeParser` (Hudi 0.x and 1.x):

* `hoodie.keygen.timebased.timestamp.type`: `UNIX_TIMESTAMP` (seconds), `EPOCHMILLISECONDS`,
  `EPOCHMICROSECONDS`, `SCALAR` (in `hoodie.keygen.timebased.timestamp.scalar.time.unit`,
  a `java.util.concurrent.TimeUnit` name, default seconds) take numbers, truncated to a whole
  number of units and then to milliseconds; `DATE_STRING` and `MIXED` take strings parsed with
  `hoodie.keygen.timebased.input.dateformat` (several patterns split by
  `hoodie.keygen.timebased.input.dateformat.list.delimiter.regex`, default `,`; the first that
  reads the whole value wins).
* Time zones: `hoodie.keygen.timebased.timezone`, when set, is both the input and the output
  zone; else `hoodie.keygen.timebased.input.timezone` and `.output.timezone`. A parsed string
  without an input zone keeps the offset it names, and without an output zone the path is
  formatted in the zone the value was parsed in. Everything else is in UTC (Hudi uses the JVM's
  default zone there; Spark clusters run in UTC).
* A null value is Hudi's default: 1 unit after the epoch (`getDefaultPartitionVal`).
* Patterns are Joda's (`DateTimeFormat`): `y Y M d D H h k K m s S a E Z` and quoted literals;
  other letters (era, week-based fields, zone names) raise ConfigError. Date-times have
  millisecond precision, as Joda's.

Arrow timestamp and date values are taken as the moment they hold (lakeward's own rule: Hudi
reads them through Avro as numbers in the configured unit).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lakeward.core.exceptions import ConfigError, InvalidRecordError

PREFIX = "hoodie.keygen.timebased."
TYPE = PREFIX + "timestamp.type"
INPUT_FORMAT = PREFIX + "input.dateformat"
INPUT_FORMAT_DELIMITER = PREFIX + "input.dateformat.list.delimiter.regex"
OUTPUT_FORMAT = PREFIX + "output.dateformat"
TIMEZONE = PREFIX + "timezone"
INPUT_TIMEZONE = PREFIX + "input.timezone"
OUTPUT_TIMEZONE = PREFIX + "output.timezone"
SCALAR_UNIT = PREFIX + "timestamp.scalar.time.unit"

#: Milliseconds per unit of each numeric timestamp type (`TimeUnit` names for SCALAR).
_TIME_UNITS_MS = {
    "NANOSECONDS": Decimal("0.000001"),
    "MICROSECONDS": Decimal("0.001"),
    "MILLISECONDS": Decimal(1),
    "SECONDS": Decimal(1000),
    "MINUTES": Decimal(60_000),
    "HOURS": Decimal(3_600_000),
    "DAYS": Decimal(86_400_000),
}
_NUMERIC_TYPES = {"UNIX_TIMESTAMP": "SECONDS", "EPOCHMILLISECONDS": "MILLISECONDS", "EPOCHMICROSECONDS": "MICROSECONDS"}
_STRING_TYPES = ("DATE_STRING", "MIXED")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]  # fmt: skip
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_NUMERIC_LETTERS = frozenset("yYMdDHhkKmsS")
_SUPPORTED = _NUMERIC_LETTERS | frozenset("aEZ")


# -- Joda patterns ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Token:
    """A pattern field (`letter` repeated `count` times) or a literal (`letter` empty)."""

    letter: str
    count: int = 0
    text: str = ""

    @property
    def numeric(self) -> bool:
        return self.letter in _NUMERIC_LETTERS and not (self.letter == "M" and self.count >= 3)


def _tokens(pattern: str, key: str) -> list[_Token]:
    out: list[_Token] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            end = i + 1
            text = ""
            while end < len(pattern):
                if pattern[end] == "'":
                    if end + 1 < len(pattern) and pattern[end + 1] == "'":
                        text, end = text + "'", end + 2
                        continue
                    break
                text, end = text + pattern[end], end + 1
            out.append(_Token("", text=text or "'"))
            i = end + 1
        elif c.isascii() and c.isalpha():
            if c not in _SUPPORTED:
                raise ConfigError(
                    f"{key}={pattern!r}: the Joda pattern letter {c!r} is not supported by lakeward "
                    f"(supported: {' '.join(sorted(_SUPPORTED))} and quoted literals)"
                )
            end = i
            while end < len(pattern) and pattern[end] == c:
                end += 1
            out.append(_Token(c, end - i))
            i = end
        else:
            out.append(_Token("", text=c))
            i += 1
    return out


def _offset_text(offset: dt.timedelta, colon: bool) -> str:
    minutes = int(offset.total_seconds() // 60)
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}{':' if colon else ''}{rest:02d}"


def format_joda(moment: dt.datetime, pattern: str, key: str = OUTPUT_FORMAT) -> str:
    """`moment` (aware, in the zone to print) as Joda's `DateTime.toString(pattern)` prints it."""
    out = []
    for t in _tokens(pattern, key):
        n = t.count
        if not t.letter:
            out.append(t.text)
        elif t.letter in "yY":
            out.append(f"{moment.year % 100:02d}" if n == 2 else f"{moment.year:0{n}d}")
        elif t.letter == "M":
            out.append(_MONTHS[moment.month - 1] if n >= 4 else _MONTHS[moment.month - 1][:3] if n == 3 else
                       f"{moment.month:0{n}d}")  # fmt: skip
        elif t.letter == "S":
            out.append(f"{moment.microsecond // 1000:03d}".ljust(n, "0")[:n])
        elif t.letter == "a":
            out.append("AM" if moment.hour < 12 else "PM")
        elif t.letter == "E":
            out.append(_DAYS[moment.weekday()] if n >= 4 else _DAYS[moment.weekday()][:3])
        elif t.letter == "Z":
            offset = moment.utcoffset() or dt.timedelta(0)
            zone = "UTC" if moment.tzinfo is dt.UTC else getattr(moment.tzinfo, "key", None)
            out.append(_offset_text(offset, n == 2) if n < 3 or zone is None else zone)
        else:
            value = {
                "d": moment.day,
                "D": moment.timetuple().tm_yday,
                "H": moment.hour,
                "h": moment.hour % 12 or 12,
                "k": moment.hour or 24,
                "K": moment.hour % 12,
                "m": moment.minute,
                "s": moment.second,
            }[t.letter]
            out.append(f"{value:0{n}d}")
    return "".join(out)


def _regex(tokens: list[_Token]) -> re.Pattern[str]:
    parts = []
    for i, t in enumerate(tokens):
        group = f"f{i}"
        adjacent = i + 1 < len(tokens) and tokens[i + 1].numeric
        if not t.letter:
            parts.append(re.escape(t.text))
        elif t.numeric:
            most = 9 if t.letter in "yYS" else 3 if t.letter == "D" else 2
            digits = f"\\d{{{t.count}}}" if adjacent else f"\\d{{1,{max(most, t.count)}}}"
            parts.append(f"(?P<{group}>{digits})")
        elif t.letter == "M":
            names = "|".join(m if t.count >= 4 else m[:3] for m in _MONTHS)
            parts.append(f"(?P<{group}>{names})")
        elif t.letter == "E":
            names = "|".join(d if t.count >= 4 else d[:3] for d in _DAYS)
            parts.append(f"(?P<{group}>{names})")
        elif t.letter == "a":
            parts.append(f"(?P<{group}>AM|PM)")
        elif t.count >= 3:  # ZZZ: a zone id
            parts.append(f"(?P<{group}>[A-Za-z][A-Za-z0-9_/+-]*)")
        else:
            parts.append(f"(?P<{group}>Z|[+-]\\d{{2}}(?::?\\d{{2}})?)")
    return re.compile("".join(parts), re.IGNORECASE)


def _two_digit_year(text: str) -> int:
    """Joda's lenient two-digit year: two digits fall in the century around now - 30 years."""
    value = int(text)
    if len(text) != 2:
        return value
    pivot = dt.datetime.now(dt.UTC).year - 30
    low = pivot - 50
    year = low - low % 100 + value
    return year + 100 if year < low else year


def parse_joda(text: str, pattern: str, zone: dt.tzinfo | None, key: str = INPUT_FORMAT) -> dt.datetime | None:
    """`text` read with the Joda `pattern` (the whole text), as Hudi's input formatter reads it:
    in `zone` when given (an offset in the text still fixes the instant), else at the offset the
    text names (UTC without one). None when the pattern does not read the whole text."""
    tokens = _tokens(pattern, key)
    match = _regex(tokens).fullmatch(text)
    if match is None:
        return None
    f = {"y": 1970, "M": 1, "d": 1, "H": 0, "m": 0, "s": 0, "ms": 0}
    day_of_year = None
    pm = None
    twelve = None
    offset: dt.tzinfo | None = None
    for i, t in enumerate(tokens):
        value = match.group(f"f{i}") if t.letter else None
        if value is None:
            continue
        if t.letter in "yY":
            f["y"] = _two_digit_year(value) if t.count == 2 else int(value)
        elif t.letter == "M":
            f["M"] = int(value) if t.numeric else [m[:3].lower() for m in _MONTHS].index(value[:3].lower()) + 1
        elif t.letter == "S":
            f["ms"] = int(value[:3].ljust(3, "0"))
        elif t.letter == "D":
            day_of_year = int(value)
        elif t.letter in "hK":
            twelve = int(value) % 12
        elif t.letter == "k":
            f["H"] = int(value) % 24
        elif t.letter == "a":
            pm = value.upper() == "PM"
        elif t.letter == "Z":
            offset = _zone(value, key) if t.count >= 3 else _offset(value)
        elif t.letter in "dHms":
            f[t.letter] = int(value)
    if twelve is not None:
        f["H"] = twelve + (12 if pm else 0)
    elif pm and f["H"] < 12:
        f["H"] += 12
    try:
        local = dt.datetime(f["y"], f["M"], f["d"], f["H"], f["m"], f["s"], f["ms"] * 1000)
        if day_of_year is not None:
            local = local.replace(month=1, day=1) + dt.timedelta(days=day_of_year - 1)
    except ValueError:
        return None
    moment = local.replace(tzinfo=offset or zone or dt.UTC)
    return moment.astimezone(zone) if zone is not None and offset is not None else moment


def _offset(text: str) -> dt.tzinfo:
    if text.upper() == "Z":
        return dt.UTC
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
    return dt.timezone(sign * dt.timedelta(minutes=minutes))


_CUSTOM_ZONE = re.compile(r"^(?:GMT|UTC)([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


def _zone(name: str, key: str) -> dt.tzinfo:
    """A Java time zone id: UTC/GMT, `GMT+8`/`GMT+05:30`, or a region (`Asia/Kolkata`)."""
    if name.upper() in ("UTC", "GMT", "Z"):
        return dt.UTC
    custom = _CUSTOM_ZONE.match(name)
    if custom:
        sign = -1 if custom.group(1) == "-" else 1
        return dt.timezone(sign * dt.timedelta(hours=int(custom.group(2)), minutes=int(custom.group(3) or 0)))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{key}={name!r} is not a known time zone") from None


# -- the key generator -----------------------------------------------------------------------------
@dataclass(frozen=True)
class TimestampPartitioner:
    """The partition path (before hive style and URL encoding) of a timestamp-based key generator."""

    kind: str
    output_format: str
    input_formats: tuple[str, ...]
    input_zone: dt.tzinfo | None
    output_zone: dt.tzinfo | None
    unit_ms: Decimal | None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TimestampPartitioner:
        """The generator `hoodie.keygen.timebased.*` options describe; ConfigError names a bad one."""
        kind = options.get(TYPE, "").strip().upper()
        if kind not in (*_NUMERIC_TYPES, "SCALAR", *_STRING_TYPES):
            raise ConfigError(
                f"{TYPE}={kind or None!r}: use UNIX_TIMESTAMP, EPOCHMILLISECONDS, EPOCHMICROSECONDS, SCALAR, "
                "DATE_STRING or MIXED"
            )
        unit_ms = None
        if kind == "SCALAR":
            unit = options.get(SCALAR_UNIT, "SECONDS").strip().upper()
            if unit not in _TIME_UNITS_MS:
                raise ConfigError(f"{SCALAR_UNIT}={unit!r} is not one of {', '.join(_TIME_UNITS_MS)}")
            unit_ms = _TIME_UNITS_MS[unit]
        elif kind in _NUMERIC_TYPES:
            unit_ms = _TIME_UNITS_MS[_NUMERIC_TYPES[kind]]
        inputs: tuple[str, ...] = ()
        if kind in _STRING_TYPES:
            listed = options.get(INPUT_FORMAT, "")
            if not listed.strip():
                raise ConfigError(f"{INPUT_FORMAT} is required when {TYPE}={kind}")
            inputs = tuple(p.strip() for p in re.split(options.get(INPUT_FORMAT_DELIMITER) or ",", listed))
            for p in inputs:
                _tokens(p, INPUT_FORMAT)
        output = options.get(OUTPUT_FORMAT, "yyyy-MM-dd")
        _tokens(output, OUTPUT_FORMAT)

        def zone(key: str) -> dt.tzinfo | None:
            name = (options[TIMEZONE] if TIMEZONE in options else options.get(key, "")).strip()
            return _zone(name, TIMEZONE if TIMEZONE in options else key) if name else None

        return cls(kind, output, inputs, zone(INPUT_TIMEZONE), zone(OUTPUT_TIMEZONE), unit_ms)

    def _default_value(self) -> object:
        """Hudi's value for a null field: 1 (a unit after the epoch), or that moment as a string."""
        if self.kind not in _STRING_TYPES:
            return 1
        moment = _EPOCH + dt.timedelta(milliseconds=1)
        return format_joda(moment.astimezone(self.input_zone or self.output_zone or dt.UTC), self.input_formats[0])

    def partition_path(self, value: object) -> str:
        """The formatted path of one field value; InvalidRecordError when it cannot be read."""
        if value is None:
            value = self._default_value()
        if isinstance(value, dt.datetime):
            moment = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        elif isinstance(value, dt.date):
            moment = dt.datetime(value.year, value.month, value.day, tzinfo=dt.UTC)
        elif isinstance(value, str):
            if self.kind not in _STRING_TYPES:
                raise InvalidRecordError(
                    f"the partition field value {value!r} is a string; {TYPE}={self.kind} reads numbers "
                    f"(DATE_STRING reads strings with {INPUT_FORMAT})"
                )
            parsed = next((m for p in self.input_formats if (m := parse_joda(value, p, self.input_zone))), None)
            if parsed is None:
                raise InvalidRecordError(
                    f"the partition field value {value!r} does not match "
                    f"{INPUT_FORMAT}={', '.join(self.input_formats)!r}"
                )
            moment = parsed
        elif isinstance(value, int | float | Decimal) and not isinstance(value, bool):
            if self.unit_ms is None:
                raise InvalidRecordError(
                    f"the partition field value {value!r} is a number; {TYPE}={self.kind} reads strings"
                )
            whole = int(value)  # Java's longValue(): toward zero
            millis = int(Decimal(whole) * self.unit_ms)  # TimeUnit.convert: toward zero
            moment = _EPOCH + dt.timedelta(milliseconds=millis)
        else:
            raise InvalidRecordError(f"the partition field value {value!r} ({type(value).__name__}) is not a time")
        zone = self.output_zone or (moment.tzinfo if isinstance(value, str) else dt.UTC) or dt.UTC
        return format_joda(moment.astimezone(zone), self.output_format)
