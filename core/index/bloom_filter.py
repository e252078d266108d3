"""Hudi's record-key bloom filter (`DYNAMIC_V0` and `SIMPLE`), bit-exact with Apache Hudi.

Every base file footer carries a serialized filter of its `_hoodie_record_key` values; Java's
bloom index probes it before opening the file, so a writer must produce exactly the bytes
Hudi would. Hashing is Hadoop's 32-bit MurmurHash2 with its Java quirks (seed XOR length,
sign-extended tail bytes in reversed order) chained k times; it runs as numpy array
passes over keys grouped by byte length, never as a Python loop per key.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from collections.abc import Iterator, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from lakeward.core.exceptions import ConfigError, CorruptTableError, InvalidRecordError

BLOOM_FILTER_FOOTER_KEY = "org.apache.hudi.bloomfilter"
BLOOM_TYPE_CODE_FOOTER_KEY = "hoodie_bloom_filter_type_code"
MIN_RECORD_KEY_FOOTER_KEY = "hoodie_min_record_key"
MAX_RECORD_KEY_FOOTER_KEY = "hoodie_max_record_key"

DYNAMIC_V0 = "DYNAMIC_V0"
SIMPLE = "SIMPLE"
MURMUR_HASH = 1  # Hadoop hash type code; 0 (Jenkins) only appears in ancient filters
_VERSION = -1  # format marker heading every serialized row
_M = np.uint32(0x5BD1E995)
_ROW_HEADER = struct.Struct(">iibi")  # version, hash count, hash type, vector size
_DYNAMIC_HEADER = struct.Struct(">iii")  # row capacity, keys in active row, row count
_CHUNK = 1 << 17  # keys hashed per batch: keeps the working set in cache

Keys: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[str]


def _key_buffers(keys: Keys) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes of all keys (plus 4 zero bytes of padding) and their int64 offsets."""
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
            raise TypeError(f"record keys must be strings, not {keys.type}")
        arr = keys.cast(pa.large_string())
        arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    elif isinstance(keys, str):
        raise TypeError("pass a sequence of record keys, not a single str")
    else:
        arr = pa.array(list(keys), type=pa.large_string())
    if arr.null_count:
        raise InvalidRecordError("record keys must not be null")
    n = len(arr)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64)[arr.offset : arr.offset + n + 1]
    data = np.zeros(int(offsets[-1]) + 4 if n else 4, np.uint8)
    if n and data_buf is not None:
        data[: offsets[-1]] = np.frombuffer(data_buf, np.uint8, count=int(offsets[-1]))
    if n and (offsets[1:] == offsets[:-1]).any():
        raise InvalidRecordError("record keys must not be empty")
    return data, offsets


def _mix_block(word: np.ndarray) -> np.ndarray:
    """MurmurHash2's per-block scramble; seed independent, so computed once per key."""
    word *= _M
    word ^= word >> 24
    word *= _M
    return word


def _length_groups(offsets: np.ndarray) -> list[np.ndarray | None]:
    """Indices of the keys of each byte length (None: all keys share one length)."""
    if len(offsets) < 2:
        return []
    lengths = np.diff(offsets)
    present = np.flatnonzero(np.bincount(lengths)) if lengths.max() < 1 << 16 else np.unique(lengths)
    if len(present) == 1:
        return [None]
    if len(present) <= 16:  # few lengths (the usual keys): one comparison pass per length
        return [np.flatnonzero(lengths == length) for length in present]
    order = np.argsort(lengths, kind="stable")
    return list(np.split(order, np.flatnonzero(np.diff(lengths[order])) + 1))


def _hash_chain(
    data: np.ndarray,
    offsets: np.ndarray,
    k: int,
    size: int,
    row_offsets: np.ndarray | None = None,
    dtype: type[np.integer] = np.intp,
) -> Iterator[tuple[np.ndarray | None, np.ndarray]]:
    """(key indices, bit positions of shape (k, len(indices))) per group of equally long keys
    delimited by `offsets` within `data`; indices None: all the keys, in order.

    `row_offsets` (intp per key) is added to each key's positions: flat indices into the rows
    of a filter laid out one after the other. intp positions index without a conversion.
    """
    # Little-endian 4-byte words starting at every byte (unaligned strided view, no copy).
    words = np.ndarray((len(data) - 3,), "<u4", buffer=data, strides=(1,))
    signed = data.view(np.int8)
    divisor = np.uint32(size)
    for idx in _length_groups(offsets):
        first = offsets[:-1] if idx is None else offsets[:-1][idx]
        length = int(offsets[1] - offsets[0]) if idx is None else int(offsets[idx[0] + 1] - offsets[idx[0]])
        count = len(first)
        # Seed-independent work, once per key: the scrambled blocks, and the tail (Java XORs
        # data[len-3] << 16, data[len-2] << 8, data[len-1], sign-extended) folded into the
        # last XOR of the chain (blocks' XOR and the tail's XOR are adjacent), or, for keys
        # shorter than a block, into the XOR with the length that opens each pass.
        blocks = [_mix_block(words[first + 4 * j]) for j in range(length // 4)]
        opening: np.ndarray | np.uint32 = np.uint32(length)
        if length % 4:
            tail = np.zeros(count, np.uint32)
            for back in range(1, length % 4 + 1):
                byte = signed[first + (length - back)].astype(np.int32).view(np.uint32)
                tail ^= byte << np.uint32(8 * (back - 1))
            if blocks:
                blocks[-1] ^= tail
            else:
                opening = tail ^ opening
        offset = None if row_offsets is None else (row_offsets if idx is None else row_offsets[idx])
        out = np.empty((k, count), dtype)
        h = np.zeros(count, np.uint32)  # h_0 = 0 seeds the chain
        tmp = np.empty_like(h)
        quotient = np.empty_like(h)
        for i in range(k):
            h ^= opening
            for block in blocks:
                h *= _M
                h ^= block
            if length % 4:
                h *= _M
            h ^= np.right_shift(h, 13, out=tmp)
            h *= _M
            h ^= np.right_shift(h, 15, out=tmp)
            # Java: Math.abs(h % size), truncating remainder on the signed value, which is
            # |h| mod size (|INT_MIN| is 2**31 as uint32); unsigned division by a constant
            # vectorises, a remainder does not.
            magnitude = np.abs(h.view(np.int32), out=tmp.view(np.int32)).view(np.uint32)
            np.floor_divide(magnitude, divisor, out=quotient)
            quotient *= divisor
            np.subtract(magnitude, quotient, out=tmp)
            if offset is None:
                out[i] = tmp
            else:
                np.add(tmp, offset, out=out[i])
        yield idx, out


def _chunks(data: np.ndarray, offsets: np.ndarray, k: int, size: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """(start, stop, positions of shape (k, stop - start) int32) for bounded batches of keys."""
    for start in range(0, len(offsets) - 1, _CHUNK):
        stop = min(start + _CHUNK, len(offsets) - 1)
        groups = list(_hash_chain(data, offsets[start : stop + 1], k, size, dtype=np.int32))
        if len(groups) == 1 and groups[0][0] is None:
            yield start, stop, groups[0][1]
            continue
        positions = np.empty((k, stop - start), np.int32)
        for idx, group in groups:
            positions[:, idx] = group
        yield start, stop, positions


def hash_positions(keys: Keys, num_hashes: int, vector_size: int) -> np.ndarray:
    """Bit positions, shape (n, num_hashes) int32, that Hudi sets for each key's UTF-8 bytes.

    Positions depend only on the geometry (num_hashes, vector_size), which is the same for
    every default-configured Hudi filter, so callers can hash a batch once and probe many
    files' filters with `BloomFilter.might_contain_positions`. The result is a transposed
    (Fortran-ordered) view: each hash's positions are contiguous.
    """
    if num_hashes <= 0 or not 0 < vector_size < 2**31:
        raise ValueError(f"bad geometry num_hashes={num_hashes} vector_size={vector_size}")
    data, offsets = _key_buffers(keys)
    out = np.empty((num_hashes, len(offsets) - 1), np.int32)
    for start, stop, positions in _chunks(data, offsets, num_hashes, vector_size):
        out[:, start:stop] = positions
    return out.T


def _type_code(type_code: str) -> str:
    code = str(type_code).upper()  # Hudi compares type codes ignoring case
    if code not in (DYNAMIC_V0, SIMPLE):
        raise CorruptTableError(f"unknown bloom filter type code {type_code!r}")
    return code


class BloomFilter:
    """A Hudi bloom filter: one bit vector (SIMPLE) or a bounded list of rows (DYNAMIC_V0).

    DYNAMIC_V0 fills its last row with `num_entries` keys, then appends rows while
    rows * num_entries < max_entries, then spreads keys round-robin over all rows from
    row 0 (the first such key and the next both land in row 0, as in Java). A key may be
    present when any row has all its k bits set.
    """

    def __init__(self, code: str, k: int, size: int, rows: np.ndarray) -> None:
        # rows: bool (rows, size), one row after the other, so that a key's bit positions
        # plus its row's offset index the whole filter at once.
        self._type_code, self._k, self._size, self._rows = code, k, size, rows
        self._nr = self._max = self._current = self._cursor = 0  # dynamic growth state
        self._reached_max = False

    @classmethod
    def create(
        cls,
        num_entries: int = 60000,
        fpp: float = 1e-9,
        max_entries: int = 100000,
        type_code: str = DYNAMIC_V0,
    ) -> BloomFilter:
        """An empty filter sized like Hudi's (`hoodie.index.bloom.num_entries`, `.fpp`)."""
        code = _type_code(type_code)
        if num_entries <= 0:
            raise ConfigError(f"num_entries must be > 0, got {num_entries}")
        if not 0.0 < fpp < 1.0:
            raise ConfigError(f"fpp must be between 0 and 1, got {fpp}")
        bits = math.ceil(num_entries * (-math.log(fpp) / (math.log(2) * math.log(2))))
        if bits >= 2**31:
            raise ConfigError(f"bloom filter of {bits} bits exceeds Java's int range")
        k = math.ceil(math.log(2) * bits / num_entries)
        created = cls(code, k, bits, np.zeros((1, bits), bool))
        created._nr, created._max = num_entries, max_entries
        return created

    @property
    def type_code(self) -> str:
        """`DYNAMIC_V0` or `SIMPLE`: the value of the `hoodie_bloom_filter_type_code` footer key."""
        return self._type_code

    @property
    def num_hashes(self) -> int:
        """Number of chained hashes (bits set) per key."""
        return self._k

    @property
    def vector_size(self) -> int:
        """Bits per row."""
        return self._size

    @property
    def num_rows(self) -> int:
        """Rows (bit vectors) in the filter; always 1 for SIMPLE."""
        return len(self._rows)

    @property
    def nbytes(self) -> int:
        """Memory the filter's bits take (one byte per bit: ~2.5 MB for Hudi's default geometry)."""
        return int(self._rows.nbytes)

    def _assign_rows(self, n: int) -> np.ndarray:
        """Row index receiving each of the next `n` keys, advancing the growth state."""
        target = np.zeros(n, np.int32)
        if self._type_code == SIMPLE:
            self._current += n
            return target
        i = 0
        while i < n:
            if self._reached_max:
                target[i:] = (self._cursor + np.arange(n - i)) % len(self._rows)
                self._cursor += n - i
                self._current += n - i
                break
            if self._current >= self._nr:
                if len(self._rows) * self._nr < self._max:
                    self._rows = np.concatenate((self._rows, np.zeros((1, self._size), bool)))
                    self._current = 0
                else:  # this key goes to row 0 without advancing the cursor
                    self._reached_max, target[i] = True, 0
                    self._current, i = self._current + 1, i + 1
                    continue
            take = min(self._nr - self._current, n - i)
            target[i : i + take] = len(self._rows) - 1
            self._current, i = self._current + take, i + take
        return target

    def add_keys(self, keys: Keys) -> None:
        """Adds record keys (hashed as UTF-8), in order, as Hudi adds one key per written record."""
        data, offsets = _key_buffers(keys)
        target = self._assign_rows(len(offsets) - 1)
        flat = self._rows.reshape(-1)
        for start in range(0, len(offsets) - 1, _CHUNK):
            stop = min(start + _CHUNK, len(offsets) - 1)
            rows = target[start:stop]
            single = rows[0] == rows[-1] and (rows == rows[0]).all()
            row_offsets = None if single and rows[0] == 0 else rows.astype(np.intp) * self._size
            for _, positions in _hash_chain(data, offsets[start : stop + 1], self._k, self._size, row_offsets):
                flat[positions] = True

    def might_contain_positions(self, positions: np.ndarray) -> np.ndarray:
        """Membership for precomputed `hash_positions` output of this filter's geometry."""
        positions = np.asarray(positions)
        if positions.ndim != 2 or positions.shape[1] != self._k:
            raise ValueError(f"positions must be (n, {self._k}), not {positions.shape}")
        result = np.zeros(len(positions), bool)
        for bits in self._rows:
            hit = bits[positions[:, 0]]
            for j in range(1, self._k):
                hit &= bits[positions[:, j]]
            result |= hit
        return result

    def might_contain(self, keys: Keys) -> np.ndarray:
        """Bool array: False means the key is certainly absent; True means maybe present."""
        data, offsets = _key_buffers(keys)
        out = np.zeros(len(offsets) - 1, bool)
        for start, stop, positions in _chunks(data, offsets, self._k, self._size):
            out[start:stop] = self.might_contain_positions(positions.T)
        return out

    def _row_bytes(self, bits: np.ndarray) -> bytes:
        header = _ROW_HEADER.pack(_VERSION, self._k, MURMUR_HASH, self._size)
        return header + np.packbits(bits, bitorder="little").tobytes()

    def serialize(self) -> str:
        """The footer value for `org.apache.hudi.bloomfilter`: base64 of Java's DataOutput bytes."""
        raw = b"".join(self._row_bytes(bits) for bits in self._rows)
        if self._type_code == DYNAMIC_V0:  # one shared header, then the rows
            current = (self._current + 2**31) % 2**32 - 2**31  # Java int wrap-around
            dynamic = _DYNAMIC_HEADER.pack(self._nr, current, len(self._rows))
            raw = raw[: _ROW_HEADER.size] + dynamic + raw
        return base64.b64encode(raw).decode("ascii")

    @classmethod
    def deserialize(cls, text: str | bytes, type_code: str = DYNAMIC_V0) -> BloomFilter:
        """Parses a footer value. Like Java, the growth bound is not stored, so a parsed
        DYNAMIC_V0 filter never appends rows: once its last row is full, keys go round-robin.
        """
        code = _type_code(type_code)
        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError, TypeError) as exc:
            raise CorruptTableError(f"bloom filter is not valid base64: {exc}") from exc
        view = memoryview(raw)
        offset = 0

        def take(size: int, what: str) -> memoryview:
            nonlocal offset
            if offset + size > len(raw):
                raise CorruptTableError(f"bloom filter truncated while reading {what}")
            offset += size
            return view[offset - size : offset]

        def header() -> tuple[int, int]:
            version, k, hash_type, size = _ROW_HEADER.unpack(take(13, "a row header"))
            if version != _VERSION:
                old = " (old unversioned Jenkins-hash format)" if version > 0 else ""
                raise CorruptTableError(f"bad bloom filter version {version}{old}")
            if hash_type != MURMUR_HASH or k <= 0 or size <= 0:
                raise CorruptTableError(f"bad bloom k={k} hash={hash_type} bits={size}")
            return k, size

        def row(k: int, size: int) -> np.ndarray:
            if header() != (k, size):
                raise CorruptTableError("bloom filter rows disagree on their geometry")
            packed = np.frombuffer(take((size + 7) // 8, "a bit vector"), np.uint8)
            return np.unpackbits(packed, count=size, bitorder="little").view(bool)

        k, size = header()
        if code == SIMPLE:
            offset = 0
            parsed = cls(code, k, size, row(k, size)[np.newaxis])
        else:
            nr, current, count = _DYNAMIC_HEADER.unpack(take(12, "the dynamic header"))
            if nr <= 0 or count <= 0:
                raise CorruptTableError(f"bad bloom filter header nr={nr} rows={count}")
            parsed = cls(code, k, size, np.stack([row(k, size) for _ in range(count)]))
            parsed._nr, parsed._current = nr, current  # max 0: never grows, as in Java
        if offset != len(raw):
            raise CorruptTableError(f"{len(raw) - offset} stray bytes after bloom filter")
        return parsed
