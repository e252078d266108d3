"""Partition paths of the timestamp-based key generator, as Hudi's `TimestampBasedAvroKeyGenerator`
formats them (Joda patterns, the input/output time zone rules, Hudi's value for nulls).

Expected paths are worked out from Hudi's source and Joda's pattern rules; the v8 fixture written
by Hudi 1.x (`v8_timebasedkeygen_nonhivestyle`: `yyyy-MM-dd'T'HH:mm:ss.SSSZ` -> `yyyy/MM/dd/HH`)
is written to in tests/interop/test_hudi_rs_v8_v9_fixture_model.py.
"""

from __future__ import annotations

import datetime as dt

import pytest

from lakeward.core.exceptions import ConfigError, InvalidRecordError
from lakeward.core.timestamp_keygen import TimestampPartitioner, format_joda, parse_joda

P = "hoodie.keygen.timebased."


def paths(options: dict[str, str], *values: object) -> list[str]:
    generator = TimestampPartitioner.from_options({f"{P}{k}": v for k, v in options.items()})
    return [generator.partition_path(v) for v in values]


def test_the_hudi_1x_fixture_format_reads_millis_and_a_zulu_offset() -> None:
    options = {"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy-MM-dd'T'HH:mm:ss.SSSZ",
               "output.dateformat": "yyyy/MM/dd/HH"}  # fmt: skip
    assert paths(options, "2023-04-01T12:01:00.123Z", "2023-04-04T13:01:00.123Z") == ["2023/04/01/12", "2023/04/04/13"]
    # no output zone: the path is in the zone the value names (Joda's withOffsetParsed)
    assert paths(options, "2023-04-04T23:30:00.000+0530") == ["2023/04/04/23"]
    # an output zone moves it
    assert paths({**options, "output.timezone": "UTC"}, "2023-04-04T23:30:00.000+0530") == ["2023/04/04/18"]
    # `timezone` is both zones: the value's offset fixes the instant, the path is in that zone
    assert paths({**options, "timezone": "Asia/Kolkata"}, "2023-04-04T20:00:00.000Z") == ["2023/04/05/01"]


def test_input_zone_without_an_offset_in_the_value() -> None:
    options = {"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy-MM-dd HH:mm",
               "output.dateformat": "yyyyMMddHH", "input.timezone": "America/New_York",
               "output.timezone": "GMT"}  # fmt: skip
    assert paths(options, "2024-01-15 22:00") == ["2024011603"]  # EST is UTC-5
    assert paths({**options, "input.timezone": "GMT+05:30"}, "2024-01-15 22:00") == ["2024011516"]


def test_several_input_formats_the_first_that_reads_the_whole_value() -> None:
    options = {"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy-MM-dd,dd/MM/yyyy HH:mm;yyyyMMdd",
               "input.dateformat.list.delimiter.regex": "[,;]", "output.dateformat": "yyyy-MM-dd"}  # fmt: skip
    assert paths(options, "2024-02-29", "01/03/2024 10:00", "20240302") == ["2024-02-29", "2024-03-01", "2024-03-02"]
    with pytest.raises(InvalidRecordError, match="does not match"):
        paths(options, "2024-02-30")


def test_joda_text_fields_and_literals() -> None:
    moment = dt.datetime(2024, 3, 5, 15, 4, 9, 123456, tzinfo=dt.UTC)
    assert format_joda(moment, "yy/MMM/d 'at' h:mm a, EEEE (D) SS") == "24/Mar/5 at 3:04 PM, Tuesday (65) 12"
    assert format_joda(moment, "MMMM yyyy-'W''s' ZZ Z ZZZ") == "March 2024-W's +00:00 +0000 UTC"
    parsed = parse_joda("Tue, 5 mar 2024 03:04:09 pm +0100", "EEE, d MMM yyyy hh:mm:ss a Z", None)
    assert parsed == dt.datetime(2024, 3, 5, 14, 4, 9, tzinfo=dt.UTC)


def test_numeric_types_truncate_to_whole_units_then_millis() -> None:
    out = "yyyy-MM-dd HH:mm:ss.SSS"
    assert paths({"timestamp.type": "UNIX_TIMESTAMP", "output.dateformat": out}, 1_700_000_000.9) == [
        "2023-11-14 22:13:20.000"
    ]
    assert paths({"timestamp.type": "EPOCHMICROSECONDS", "output.dateformat": out}, 1_700_000_000_123_999) == [
        "2023-11-14 22:13:20.123"
    ]
    scalar = {"timestamp.type": "SCALAR", "timestamp.scalar.time.unit": "days", "output.dateformat": "yyyy/MM/dd"}
    assert paths(scalar, 19_700) == ["2023/12/09"]
    assert paths({**scalar, "timestamp.scalar.time.unit": "HOURS"}, 48) == ["1970/01/03"]


def test_a_null_value_takes_hudis_default_one_unit_after_the_epoch() -> None:
    assert paths({"timestamp.type": "UNIX_TIMESTAMP", "output.dateformat": "yyyy/MM/dd/HH:mm:ss"}, None) == [
        "1970/01/01/00:00:01"
    ]
    options = {"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy-MM-dd", "output.dateformat": "yyyy/MM/dd",
               "timezone": "America/Los_Angeles"}  # fmt: skip
    assert paths(options, None) == ["1969/12/31"]  # the epoch is Dec 31 in Los Angeles


BAD = [
    ({"timestamp.type": "EPOCH", "output.dateformat": "yyyy"}, "timestamp.type"),
    ({"timestamp.type": "DATE_STRING", "output.dateformat": "yyyy"}, "input.dateformat is required"),
    ({"timestamp.type": "UNIX_TIMESTAMP", "output.dateformat": "yyyy/ww"}, "letter 'w'"),
    ({"timestamp.type": "SCALAR", "timestamp.scalar.time.unit": "WEEKS", "output.dateformat": "yyyy"}, "WEEKS"),
    ({"timestamp.type": "UNIX_TIMESTAMP", "output.dateformat": "yyyy", "timezone": "Mars/Base"}, "time zone"),
]


@pytest.mark.parametrize(("options", "needle"), BAD, ids=[b[1] for b in BAD])
def test_bad_options_fail_naming_the_option(options: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        paths(options)


def test_a_value_of_the_wrong_kind_fails_naming_the_type() -> None:
    with pytest.raises(InvalidRecordError, match="reads numbers"):
        paths({"timestamp.type": "EPOCHMILLISECONDS", "output.dateformat": "yyyy"}, "2024")
    with pytest.raises(InvalidRecordError, match="reads strings"):
        paths({"timestamp.type": "DATE_STRING", "input.dateformat": "yyyy", "output.dateformat": "yyyy"}, 2024)
