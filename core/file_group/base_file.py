"""Parquet base files: meta columns first, Hudi's footer (bloom filter, key range, Avro schema).

Pure functions over Arrow data and a Storage, so the local and the Spark engine run the
same code per file group.
"""

from __future__ import annotations

import copy
import posixpath
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.exceptions import CorruptFileError, MissingFileError, StorageError
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.file_group.parquet_footer import Located, footer_key_values
from lakeward.core.index.bloom_filter import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_TYPE_CODE_FOOTER_KEY,
    MAX_RECORD_KEY_FOOTER_KEY,
    MIN_RECORD_KEY_FOOTER_KEY,
    BloomFilter,
)
from lakeward.core.storage import Storage, is_storage_failure

AVRO_SCHEMA_FOOTER_KEY = "parquet.avro.schema"
#: Meta columns unique per record, whose neighbouring values share long prefixes
#: (`<instant>_<partition>_<n>` sequence numbers; record keys, most of all when sorted or
#: composite): DELTA_BYTE_ARRAY stores each value as (shared prefix length, suffix), which
#: every Parquet reader Hudi uses decodes (parquet-mr, arrow-rs in hudi-rs, Arrow C++).
#: Dictionary pages would only be built and thrown away for them.
DELTA_ENCODED_COLUMNS = ("_hoodie_commit_seqno", "_hoodie_record_key")


@dataclass(frozen=True)
class BloomSettings:
    """`hoodie.index.bloom.num_entries`, `hoodie.index.bloom.fpp`, filter type, max entries."""

    num_entries: int = 60000
    fpp: float = 1e-9
    max_entries: int = 100000
    type_code: str = "DYNAMIC_V0"


@dataclass(frozen=True)
class FooterKeys:
    """The key range and bloom filter a base file's footer records.

    The filter is kept as the footer's text and parsed on first use: an index that prunes
    a file by its key range never pays for (or holds in memory) that file's filter.
    """

    min_key: str | None
    max_key: str | None
    bloom_text: str | bytes | None = field(default=None, repr=False)
    bloom_type: str = "DYNAMIC_V0"
    #: Reads the filter's text from the file, when the footer was read without it.
    bloom_source: Callable[[], bytes] | None = field(default=None, repr=False, compare=False)
    #: Told of the filter once parsed: the footer cache counts the memory its entries' filters take.
    on_parsed: Callable[[BloomFilter], None] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def bloom(self) -> BloomFilter | None:
        """The parsed bloom filter (None: the footer has none)."""
        text = self.bloom_text if self.bloom_source is None else self.bloom_source()
        if text is None:
            return None
        parsed = BloomFilter.deserialize(text, self.bloom_type)
        if self.on_parsed is not None:
            self.on_parsed(parsed)
        return parsed


def write_base_file(
    storage: Storage,
    path: str,
    table: pa.Table,
    avro_schema_json: str,
    bloom: BloomSettings | None,
    compression: str = "snappy",
    extend: tuple[BloomFilter, pa.Array] | None = None,
) -> int:
    """Write `table` (meta columns first) to `path` with Hudi's footer; returns the file size.

    `bloom` None: no bloom filter nor key range in the footer, as Hudi writes the files of a
    table without meta fields (`HoodieFileWriterFactory.enableBloomFilter`: virtual keys).

    `extend` = (the previous version's filter, keys new to the file group): the new filter
    is that filter plus the new keys, instead of hashing every key again. It still holds
    every key of the file; keys deleted since only cost false positives, which the
    index's key confirmation absorbs.
    """
    keys = table.column("_hoodie_record_key")
    metadata = {AVRO_SCHEMA_FOOTER_KEY: avro_schema_json, "writer.model.name": "avro"}
    if bloom is not None:  # in every file, an empty one too, as Hudi's writer; the key range only with keys
        if extend is not None:
            bloom_filter = copy.deepcopy(extend[0])
            bloom_filter.add_keys(extend[1])
        else:
            bloom_filter = BloomFilter.create(bloom.num_entries, bloom.fpp, bloom.max_entries, bloom.type_code)
            bloom_filter.add_keys(keys)
        metadata |= {BLOOM_FILTER_FOOTER_KEY: bloom_filter.serialize(), BLOOM_TYPE_CODE_FOOTER_KEY: bloom.type_code}
        if table.num_rows:
            min_max = pc.min_max(keys)
            metadata |= {
                MIN_RECORD_KEY_FOOTER_KEY: min_max["min"].as_py(),
                MAX_RECORD_KEY_FOOTER_KEY: min_max["max"].as_py(),
            }
    else:
        bloom_filter = None
    # Hudi's keys go into the footer's key-value metadata only, as Hudi writes them: not also
    # into the `ARROW:schema` copy of the Arrow schema (which would carry the bloom filter twice).
    with (
        storage.open_output_stream(path) as sink,
        pq.ParquetWriter(
            sink,
            table.schema,
            compression=compression,
            # each column in its schema's unit (timestamp-millis stays TIMESTAMP_MILLIS: a reader
            # taking the Avro schema's unit reads the stored numbers); seconds and nanoseconds,
            # which Avro lacks, as micros
            coerce_timestamps=None if _units_are_avro(table.schema) else "us",
            allow_truncated_timestamps=True,
            write_statistics=True,
            **_encodings(table),
        ) as writer,
    ):
        writer.write_table(table)
        writer.add_key_value_metadata(metadata)
    footer = FooterKeys(
        metadata.get(MIN_RECORD_KEY_FOOTER_KEY),
        metadata.get(MAX_RECORD_KEY_FOOTER_KEY),
        metadata.get(BLOOM_FILTER_FOOTER_KEY),
        metadata.get(BLOOM_TYPE_CODE_FOOTER_KEY, "DYNAMIC_V0"),
    )
    if bloom_filter is not None:
        footer.__dict__["bloom"] = bloom_filter  # already parsed: fill the cached property
    _remember_footer(storage, path, footer)
    return storage.size(path)


def _encodings(table: pa.Table) -> dict[str, object]:
    """ParquetWriter arguments: DELTA_BYTE_ARRAY for the unique meta strings, dictionaries
    only for the columns whose values repeat.

    The low-cardinality meta columns (`_hoodie_commit_time`, `_hoodie_partition_path`,
    `_hoodie_file_name`) are one dictionary entry and a run of indices per page. A column of
    mostly distinct values (ids, amounts, event times) is written PLAIN from the start:
    with a dictionary, Parquet builds one, outgrows the page limit and falls back to PLAIN
    anyway, which costs write time and bytes (issue 19 targets 4 and 6).
    """
    schema = table.schema
    delta = [name for name in DELTA_ENCODED_COLUMNS if name in schema.names and _is_text(schema.field(name).type)]
    sample = _sample_rows(table, DICTIONARY_SAMPLE_ROWS)
    return {
        "use_dictionary": [name for name in schema.names if name not in delta and _repeats(sample.column(name))],
        "column_encoding": dict.fromkeys(delta, "DELTA_BYTE_ARRAY"),
    }


#: Rows looked at to judge whether a column's values repeat enough for a dictionary.
DICTIONARY_SAMPLE_ROWS = 8192
#: A column whose sample has at most this share of distinct values gets a dictionary.
DICTIONARY_MAX_DISTINCT_SHARE = 0.5


def _sample_rows(table: pa.Table, size: int) -> pa.Table:
    """`size` contiguous rows from the middle of `table` (all of it when it is small): a
    zero-copy slice. Sorted or clustered data shows its repeats in any run of rows."""
    start = max(0, (table.num_rows - size) // 2)
    return table.slice(start, size)


def _repeats(column: pa.ChunkedArray) -> bool:
    """Whether a dictionary pays for this column: nested or small columns keep pyarrow's
    default (a dictionary); a flat column gets one when its values repeat."""
    if len(column) < DICTIONARY_SAMPLE_ROWS // 8 or pa.types.is_nested(column.type):
        return True
    try:
        distinct = pc.count_distinct(column, mode="all").as_py()
    except pa.ArrowNotImplementedError:
        return True
    return distinct <= DICTIONARY_MAX_DISTINCT_SHARE * len(column)


def _is_text(data_type: pa.DataType) -> bool:
    return pa.types.is_string(data_type) or pa.types.is_large_string(data_type)


def read_base_file(
    storage: Storage,
    path: str,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    dictionary: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> pa.Table:
    """Read a base file (optionally some columns and rows); a damaged file is a CorruptFileError.

    `dictionary`: columns to read as Arrow dictionaries (few-valued meta columns).
    `exclude`: columns not to read, whichever else the file holds (not with `columns` or `filter`).
    """
    if exclude:
        with _readable(storage, path), storage.open_input_file(path) as source:
            parquet = pq.ParquetFile(source, read_dictionary=list(dictionary) or None)
            names = [name for name in parquet.schema_arrow.names if name not in exclude]
            return parquet.read(columns=names).replace_schema_metadata(None)
    with _readable(storage, path), storage.open_input_file(path) as source:
        table = pq.read_table(
            source,
            columns=list(columns) if columns is not None else None,
            filters=filter,
            read_dictionary=list(dictionary) or None,
        )
    return table.replace_schema_metadata(None)


def read_base_file_and_footer(storage: Storage, path: str) -> tuple[pa.Table, FooterKeys]:
    """All rows of a base file and its footer's key range and bloom filter, from one open of the file.

    For a rewrite of the file (compaction) that extends the old bloom filter: reading the
    footer separately would open the file and parse its key-value metadata again.
    """
    with _readable(storage, path), storage.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        keys = _footer_keys(parquet.metadata.metadata or {})
        table = parquet.read()
    _remember_footer(storage, path, keys)
    return table.replace_schema_metadata(None), keys


def corrupt_base_file(storage: Storage, path: str, exc: BaseException) -> CorruptFileError:
    """The error for a base file Parquet cannot read: names the file and the instant that wrote it."""
    parsed = parse_base_file_name(posixpath.basename(path))
    instant = parsed.instant_time if parsed is not None else None
    uri = storage.uri_of(path)
    if isinstance(exc, FileNotFoundError):
        return MissingFileError(f"base file {uri} (instant {instant}) is missing: {exc}", uri, instant)
    return CorruptFileError(f"base file {uri} (instant {instant}) is unreadable: {exc}", uri, instant)


@contextmanager
def _readable(storage: Storage, path: str) -> Iterator[None]:
    """Turn Parquet's errors about a damaged file (which do not name it) into CorruptFileError; storage
    failing meanwhile (S3 unreachable) is a StorageError naming the file, not damage."""
    try:
        yield
    except (pa.ArrowInvalid, OSError) as exc:
        if is_storage_failure(exc):
            raise StorageError(f"storage failed while reading base file {storage.uri_of(path)}: {exc}") from exc
        raise corrupt_base_file(storage, path, exc) from exc


def check_base_file(storage: Storage, path: str) -> None:
    """Read a base file through, footer and every row group; raise CorruptFileError if damaged."""
    with _readable(storage, path), storage.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        for i in range(parquet.metadata.num_row_groups):
            parquet.read_row_group(i)


def first_unreadable_base_file(storage: Storage, full_paths: Sequence[str]) -> CorruptFileError | None:
    """After a multi-file Parquet scan failed: the error naming the first damaged file, if one is.

    Only on the error path: files are read through until one fails. None when all read
    (the scan failed for another reason, e.g. a filter of the wrong type).
    """
    prefix = storage.root.rstrip("/") + "/"
    for full in full_paths:
        path = full[len(prefix) :] if full.startswith(prefix) else full
        try:
            check_base_file(storage, path)
        except CorruptFileError as found:
            return found
    return None


_footer_cache: dict[tuple[str, str], FooterKeys] = {}
_footer_lock = threading.Lock()
#: Bounds of the footer cache: entries, and bytes of the bloom filters they hold: the texts (about
#: 430 KB a default-sized filter) and the filters parsed from them (about 2.5 MB each) for files an
#: index probed. A long-lived process (a writer, a reused Spark worker) stays within them.
_FOOTER_CACHE_ENTRIES = 4096
_FOOTER_CACHE_BLOOM_BYTES = 256 * 1024 * 1024
_footer_cache_bloom_bytes = 0


def read_footer_keys(storage: Storage, path: str) -> FooterKeys:
    """Key range and bloom filter of a base file; cached, since base files never change."""
    cache_key = (storage.uri, path)
    with _footer_lock:
        if cache_key in _footer_cache:
            return _footer_cache[cache_key]
    with _readable(storage, path), storage.open_input_file(path) as source:
        values = footer_key_values(source)
        if values is None:  # not a footer the light reader walks: pyarrow reads (or rejects) it
            keys = _footer_keys(pq.read_metadata(source).metadata or {})
        else:
            bloom = values.pop(BLOOM_FILTER_FOOTER_KEY.encode(), None)
            meta = {k: v.read(source) if isinstance(v, Located) else v for k, v in values.items()}
            keys = _footer_keys(meta)
            if isinstance(bloom, Located):
                keys = replace(keys, bloom_source=partial(_read_located, storage, path, bloom))
            elif bloom is not None:
                keys = replace(keys, bloom_text=bloom)
    return _remember_footer(storage, path, keys)


def _read_located(storage: Storage, path: str, located: Located) -> bytes:
    """A footer value left unread by `footer_key_values` (the bloom filter), read when first needed."""
    with _readable(storage, path), storage.open_input_file(path) as source:
        return located.read(source)


def _footer_keys(meta: Mapping[bytes, bytes]) -> FooterKeys:
    """The key range and bloom filter of a footer's key-value metadata."""

    def text(key: str) -> str | None:
        value = meta.get(key.encode())
        return value.decode() if value is not None else None

    return FooterKeys(
        text(MIN_RECORD_KEY_FOOTER_KEY),
        text(MAX_RECORD_KEY_FOOTER_KEY),
        meta.get(BLOOM_FILTER_FOOTER_KEY.encode()),  # parsed on first use
        bloom_type if (bloom_type := text(BLOOM_TYPE_CODE_FOOTER_KEY)) is not None else "DYNAMIC_V0",
    )


def _remember_footer(storage: Storage, path: str, keys: FooterKeys) -> FooterKeys:
    """Cache a copy of `keys`: a filter parsed later by the caller (a compaction extending it) stays
    the caller's; a filter parsed on the cached copy (an index probe), or the one a writer just
    built, counts towards the cache's bytes. Returns the cached copy."""
    cache_key = (storage.uri, path)
    cached = replace(keys, on_parsed=partial(_count_parsed_bloom, cache_key))
    written = keys.__dict__.get("bloom")
    if written is not None:  # a writer's own new filter: kept, and counted
        cached.__dict__["bloom"] = written
    with _footer_lock:
        previous = _footer_cache.pop(cache_key, None)
        if previous is not None:
            _account_bloom_bytes(-_cached_bytes(previous))
        _account_bloom_bytes(_cached_bytes(cached))
        if len(_footer_cache) >= _FOOTER_CACHE_ENTRIES:
            _clear_footer_cache()
        _footer_cache[cache_key] = cached
    return cached


def _cached_bytes(keys: FooterKeys) -> int:
    parsed = keys.__dict__.get("bloom")
    return len(keys.bloom_text or "") + (parsed.nbytes if parsed is not None else 0)


def _count_parsed_bloom(cache_key: tuple[str, str], parsed: BloomFilter) -> None:
    with _footer_lock:
        if cache_key in _footer_cache:
            _account_bloom_bytes(parsed.nbytes)


def _account_bloom_bytes(delta: int) -> None:
    """Add `delta` to the cache's filter bytes (under `_footer_lock`); over the bound, start afresh."""
    global _footer_cache_bloom_bytes
    _footer_cache_bloom_bytes += delta
    if _footer_cache_bloom_bytes > _FOOTER_CACHE_BLOOM_BYTES:
        _clear_footer_cache()


def _clear_footer_cache() -> None:
    global _footer_cache_bloom_bytes
    _footer_cache.clear()
    _footer_cache_bloom_bytes = 0


def reusable_bloom(storage: Storage, path: str, bloom: BloomSettings) -> BloomFilter | None:
    """The bloom filter of an existing base file, if it has the geometry a new one would have."""
    return extendable_bloom(read_footer_keys(storage, path), bloom)


def extendable_bloom(footer: FooterKeys, bloom: BloomSettings) -> BloomFilter | None:
    """The footer's bloom filter, if it has the geometry a new filter of `bloom` would have."""
    previous = footer.bloom
    if previous is None or previous.type_code != bloom.type_code:
        return None
    fresh = BloomFilter.create(bloom.num_entries, bloom.fpp, bloom.max_entries, bloom.type_code)
    if (fresh.num_hashes, fresh.vector_size) != (previous.num_hashes, previous.vector_size):
        return None
    return previous


def _units_are_avro(schema: pa.Schema) -> bool:
    """Whether every timestamp of `schema` (nested ones too) is in milliseconds or microseconds."""

    def ok(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return t.unit in ("ms", "us")
        if pa.types.is_struct(t):
            return all(ok(f.type) for f in t)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return ok(t.value_type)
        if pa.types.is_map(t):
            return ok(t.key_type) and ok(t.item_type)
        return True

    return all(ok(f.type) for f in schema)
