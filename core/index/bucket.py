"""BUCKET index: a key's file group is fixed by hashing it into one of N buckets.

As Apache Hudi's simple bucket index: bucket = (Java List<String>.hashCode of the hash
field values & Integer.MAX_VALUE) mod N, and the bucket's file id starts with the bucket
number in 8 digits, so Hudi and lakeward put the same key in the same file group. The
hash field values are taken from the record key's text, as Hudi 1.x takes them
(`KeyGenUtils.extractRecordKeysByFields`): a simple key is its one value; a complex key's
`field:value` parts give the hash fields' values, `__null__` as null and `__empty__` as "".
"""

from __future__ import annotations

import array
import sys
import uuid
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice

_UTF16 = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"


#: The complex key format's stand-ins for a null and an empty field value (`keygen`).
_NULL_PART, _EMPTY_PART = "__null__", "__empty__"


def _java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    for unit in array.array("H", text.encode(_UTF16)):
        h = (31 * h + unit) & 0xFFFFFFFF
    return h


def bucket_ids(hash_values: Sequence[Sequence[str | None]], num_buckets: int) -> np.ndarray:
    """Bucket of each row, from the row's hash-field values (strings or None, in field order)."""
    out = np.empty(len(hash_values), dtype=np.int64)
    for i, values in enumerate(hash_values):
        h = 1
        for value in values:
            h = (31 * h + (0 if value is None else _java_string_hash(value))) & 0xFFFFFFFF
        out[i] = (h & 0x7FFFFFFF) % num_buckets
    return out


def hash_values(record_key: str, fields: Sequence[str], complex_key: bool) -> list[str | None]:
    """The hash fields' values in a record key's text (module docstring)."""
    if not complex_key:
        return [record_key]
    parts = dict(p.split(":", 1) for p in record_key.split(",") if ":" in p)
    values = [parts.get(f) for f in fields]
    return [None if v == _NULL_PART else "" if v == _EMPTY_PART else v for v in values]


def bucket_ids_of(
    record_keys: pa.Array | pa.ChunkedArray, fields: Sequence[str], num_buckets: int, complex_key: bool
) -> np.ndarray:
    """Bucket of each record, from its record key text (`complex_key`: in the `field:value,...` format)."""
    keys = pc.cast(record_keys, pa.string()).to_pylist()
    return bucket_ids([hash_values(k, fields, complex_key) for k in keys], num_buckets)


def bucket_of_file_id(file_id: str) -> int | None:
    prefix = file_id[:8]
    return int(prefix) if prefix.isdigit() else None


def new_bucket_file_id(bucket: int) -> str:
    return f"{bucket:08d}{str(uuid.uuid4())[8:]}-0"


def locate(slices: Sequence[FileSlice], buckets: np.ndarray, num_buckets: int) -> tuple[pa.Array, set[str]]:
    """File id for every row's bucket, creating ids for buckets with no file group yet.

    Returns the file ids and the subset that are new file groups. Refuses (ConfigError) a
    partition whose file groups are not the buckets of `num_buckets`: written by another index,
    or with more buckets. Their keys are not where this index looks, so every update would be
    added again as a new row (Hudi's simple bucket index fails on such file ids too).
    """
    by_bucket: dict[int, str] = {}
    for s in slices:
        bucket = bucket_of_file_id(s.file_id)
        if bucket is None or bucket >= num_buckets or bucket in by_bucket:
            raise ConfigError(_not_buckets_message(s, bucket, num_buckets, by_bucket.get(bucket or 0)))
        by_bucket[bucket] = s.file_id
    new_ids: set[str] = set()
    for bucket in np.unique(buckets):
        if int(bucket) not in by_bucket:
            by_bucket[int(bucket)] = new_bucket_file_id(int(bucket))
            new_ids.add(by_bucket[int(bucket)])
    ids = [by_bucket[int(b)] for b in buckets]
    return pa.array(ids, pa.string()), new_ids


def _not_buckets_message(found: FileSlice, bucket: int | None, num_buckets: int, other: str | None) -> str:
    where = f"file group {found.file_id} of partition {found.partition_path or '(non-partitioned)'}"
    if bucket is None:
        why = "was not written by the BUCKET index (its file id does not start with a bucket number)"
    elif bucket >= num_buckets:
        why = f"is bucket {bucket}, past the {num_buckets} buckets of hoodie.bucket.index.num.buckets"
    else:
        why = f"is bucket {bucket}, which file group {other} already is"
    return (
        f"hoodie.index.type=BUCKET cannot write this table: {where} {why}. A bucket index finds a key only "
        "in its bucket's file group, so this write would add updated keys again. Use the index type and "
        "hoodie.bucket.index.num.buckets the table was written with (the bucket count never changes)."
    )
