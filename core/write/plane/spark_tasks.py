"""How the Spark data plane lays out its tasks: one shuffle partition per file group, and broadcasts.

File-group writes read and rewrite whole base files inside their task, so a task's cost is
its file group's, not the size of the records shuffled to it. Adaptive query execution
sizes tasks by shuffled bytes: a small batch that updates four large file groups would be
coalesced into one task that rewrites all four in turn on one core. A repartition to a
fixed number of partitions is never coalesced; `partition_slots` gives each file group a
value that Spark's hash partitioning sends to a partition of its own (as Apache Hudi's
upsert partitioner gives each file group its own Spark partition).
"""

from __future__ import annotations

import re

_MASK = 0xFFFFFFFF
#: Spark's seed of `Murmur3Hash`, which `HashPartitioning` (repartition by columns) uses.
SPARK_HASH_SEED = 42
#: Above this many file groups, slots are not searched: with that many tasks, a few collisions
#: only make some tasks longer than others.
MAX_EXACT_SLOTS = 4096


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_hash_int(value: int, seed: int = SPARK_HASH_SEED) -> int:
    """Spark's `Murmur3_x86_32.hashInt(value, seed)`: the hash of an INT column (`F.hash`)."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotl((seed & _MASK) ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _MASK
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_slots(n: int) -> list[int]:
    """INT values v_0..v_{n-1} such that `repartition(n, col)` sends v_i to partition i.

    Spark's partition of a row is `pmod(hash(col), n)`; the values are found by trying
    0, 1, 2, ... For more than `MAX_EXACT_SLOTS` partitions the values are 0..n-1 (some
    partitions then get two values, others none).
    """
    if n > MAX_EXACT_SLOTS:
        return list(range(n))
    slots: list[int | None] = [None] * n
    missing, value = n, 0
    while missing:
        partition = spark_hash_int(value) % n  # Python's % is non-negative: Spark's pmod
        if slots[partition] is None:
            slots[partition] = value
            missing -= 1
        value += 1
    return [v for v in slots if v is not None]


_SIZE = re.compile(r"^\s*(-?\d+)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_byte_size(text: str | None, default: int) -> int:
    """A Spark size setting (`10485760b`, `10MB`, `-1`) in bytes; `default` when unset or unreadable."""
    if text is None:
        return default
    found = _SIZE.match(str(text))
    if found is None:
        return default
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


__all__ = ["MAX_EXACT_SLOTS", "SPARK_HASH_SEED", "parse_byte_size", "partition_slots", "spark_hash_int"]
