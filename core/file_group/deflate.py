"""gzip members of HFile blocks: inflated and deflated through ISA-L where it is installed.

HFile blocks of the metadata table are GZ-compressed (one gzip member a block). The metadata
table's compaction inflates and deflates hundreds of megabytes of them at 2M keys, where zlib was
the largest single cost. ISA-L's igzip (`isal`, a dependency; Intel's hand-optimised deflate)
inflates any deflate stream about 3-4x faster than zlib, and at its fast levels deflates about 5x
faster than zlib's level 1 to no larger output. Its streams are standard deflate, which every
reader (Java's `GZIPInputStream`, hudi-rs, zlib) inflates.

What igzip cannot do is reproduce zlib's bits: blocks deflated at `JAVA_DEFLATE_LEVEL` (6, what
`java.util.zip.GZIPOutputStream` uses) keep going through zlib, so that those files stay byte for
byte what Hudi's writer makes. Without `isal` (a platform with no wheel), zlib does everything.
"""

from __future__ import annotations

import struct
import zlib
from types import ModuleType

_isal: ModuleType | None
try:
    from isal import isal_zlib

    _isal = isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback where it has no wheel
    _isal = None

#: The deflate level of `java.util.zip.GZIPOutputStream` (Hudi's HFile writer): blocks written at it
#: are byte for byte Java's.
JAVA_DEFLATE_LEVEL = 6
#: Levels at or below this deflate with igzip (its levels 1-2: the fast ones) when `isal` is installed.
FAST_LEVEL_MAX = 2
#: A gzip member header as `java.util.zip.GZIPOutputStream` writes it (no mtime, OS 0).
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x00"
#: wbits of a gzip container (inflating) and of a raw deflate stream (deflating).
_GZIP_WBITS = 31
_RAW_WBITS = -15

_inflater: ModuleType = _isal if _isal is not None else zlib
#: What a damaged stream raises (zlib's error, and igzip's where installed).
InflateError: tuple[type[Exception], ...] = (zlib.error,) if _isal is None else (zlib.error, _isal.error)


def uses_isal() -> bool:
    """Whether igzip (`isal`) is installed and used."""
    return _isal is not None


def inflate_gzip(payload: bytes | memoryview) -> bytes:
    """The data of one gzip member (raises one of `InflateError` on a damaged one)."""
    return _inflater.decompress(payload, _GZIP_WBITS)


def gzip_member(raw: bytes | memoryview, level: int = JAVA_DEFLATE_LEVEL) -> bytes:
    """`raw` as one gzip member with Java's header, deflated at `level` (1-9, zlib's scale).

    At `JAVA_DEFLATE_LEVEL` the bytes are Java's (zlib). Levels up to `FAST_LEVEL_MAX` use igzip's
    level of the same number where installed; the other levels use zlib.
    """
    codec: ModuleType = _isal if _isal is not None and level <= FAST_LEVEL_MAX else zlib
    body = codec.compress(raw, level, _RAW_WBITS)
    return _GZIP_HEADER + body + struct.pack("<II", _inflater.crc32(raw), len(raw) & 0xFFFFFFFF)
