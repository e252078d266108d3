"""The hashed ids Hudi builds metadata-index keys from (`org.apache.hudi.common.util.hash.HashID`).

`bloom_filters` keys are `partition id + file id`, `column_stats` keys `column id + partition id
+ file id` (format reference 7.6, 7.8a): a partition or column id is the 8 bytes (big-endian) of
XXHash64 of the name's UTF-8 bytes with seed `0xdabadaba` (a Java int, so sign-extended to
`0xFFFFFFFFDABADABA`), a file id the 16 bytes of MD5 of the file name; each id is written as
standard base64 with padding. The table's root partition is named `.` (non-partitioned tables).
XXHash64 is computed here in pure Python: the inputs are short names, hashed once per file.
"""

from __future__ import annotations

import base64
import hashlib

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
#: Hudi's `HashID.HASH_SEED` (int 0xdabadaba) as the long the hash receives.
HASH_SEED = 0xFFFFFFFFDABADABA
#: The partition identifier of the table's root (Hudi's `NON_PARTITIONED_NAME`).
ROOT_PARTITION = "."


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data: bytes, seed: int = HASH_SEED) -> int:
    """XXHash64 of `data` (the reference algorithm, as lz4-java's `XXHash64.hash`)."""
    n, pos = len(data), 0
    if n >= 32:
        lanes = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK, (seed - _P1) & _MASK]
        while pos + 32 <= n:
            for i in range(4):
                lanes[i] = _round(lanes[i], int.from_bytes(data[pos : pos + 8], "little"))
                pos += 8
        acc = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _MASK
        for lane in lanes:
            acc = ((acc ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        acc = (seed + _P5) & _MASK
    acc = (acc + n) & _MASK
    while pos + 8 <= n:
        acc ^= _round(0, int.from_bytes(data[pos : pos + 8], "little"))
        acc = (_rotl(acc, 27) * _P1 + _P4) & _MASK
        pos += 8
    if pos + 4 <= n:
        acc ^= (int.from_bytes(data[pos : pos + 4], "little") * _P1) & _MASK
        acc = (_rotl(acc, 23) * _P2 + _P3) & _MASK
        pos += 4
    for byte in data[pos:]:
        acc ^= (byte * _P5) & _MASK
        acc = (_rotl(acc, 11) * _P1) & _MASK
    acc ^= acc >> 33
    acc = (acc * _P2) & _MASK
    acc ^= acc >> 29
    acc = (acc * _P3) & _MASK
    return acc ^ (acc >> 32)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def name_id(name: str) -> str:
    """The base64 XXHash64 id of a partition identifier or column name (`PartitionIndexID`, `ColumnIndexID`)."""
    return _b64(xxh64(name.encode("utf-8")).to_bytes(8, "big"))


def partition_id(partition_path: str) -> str:
    """The id of a data partition (`""`, the table's root, is identified as `.`)."""
    return name_id(partition_path or ROOT_PARTITION)


def file_id(file_name: str) -> str:
    """The base64 MD5 id of a data file's name (`FileIndexID`)."""
    return _b64(hashlib.md5(file_name.encode("utf-8"), usedforsecurity=False).digest())


__all__ = ["HASH_SEED", "ROOT_PARTITION", "file_id", "name_id", "partition_id", "xxh64"]
