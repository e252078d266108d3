"""HFile blocks' gzip members: igzip for speed, zlib where Java's bytes are wanted, any reader inflates both."""

from __future__ import annotations

import gzip
import os
import zlib

import pytest

from lakeward.core.file_group.deflate import (
    JAVA_DEFLATE_LEVEL,
    InflateError,
    gzip_member,
    inflate_gzip,
    uses_isal,
)

#: Cells-like data: repeated structure with varying numbers (compressible, not trivially).
RAW = b"".join(
    b"\x00\x00\x00\x2c\x00\x00\x00\x3akey-%08d\x00\x02&record-index-0001-0_0-0-0_%d.hfile" % (i, i % 7)
    for i in range(20000)
) + os.urandom(3000)


def test_isal_is_installed_with_the_package():
    assert uses_isal()  # a dependency in pyproject.toml: without it every block goes through zlib


@pytest.mark.parametrize("level", [1, 2, 3, JAVA_DEFLATE_LEVEL, 9])
def test_every_level_is_a_gzip_member_that_stdlib_gzip_and_zlib_inflate(level: int):
    member = gzip_member(RAW, level)
    assert member[:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"  # Java's header: no mtime, OS 0
    assert gzip.decompress(member) == RAW
    assert zlib.decompress(member, wbits=31) == RAW
    assert inflate_gzip(member) == RAW
    assert inflate_gzip(memoryview(member)) == RAW


def test_the_java_level_is_zlibs_bitstream_and_the_fast_levels_are_not_larger_than_zlibs():
    java = zlib.compressobj(JAVA_DEFLATE_LEVEL, zlib.DEFLATED, -15, 8)
    assert gzip_member(RAW)[10:-8] == java.compress(RAW) + java.flush()  # byte for byte what Java writes
    zlib_fast = zlib.compress(RAW, 1, -15)
    assert len(gzip_member(RAW, 1)) - 18 <= len(zlib_fast) * 1.05


def test_a_damaged_member_raises_the_inflate_error():
    member = bytearray(gzip_member(RAW, 1))
    member[40:60] = b"\xff" * 20
    with pytest.raises(InflateError):
        inflate_gzip(bytes(member))
