"""Snapshot, time-travel and read-optimized reads of file slices into Arrow.

Slices without log files (every copy-on-write slice, and every slice of a read-optimized
query) are read with pyarrow's dataset scanner over exactly their base files: column
projection and row-group pruning by statistics come from Parquet itself. Slices with
log files (merge-on-read) are merged slice by slice (`merge_on_read`), and the filter
and projection are applied to the merged rows, since a log record can change whether a
row matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward.core.engine.local import LocalEngine
from lakeward.core.exceptions import LakewardError
from lakeward.core.file_group.base_file import first_unreadable_base_file
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.read.merge_on_read import MergeSettings, VisibleInstants, read_merged_file_slice
from lakeward.core.schema import META_SCHEMA, with_meta
from lakeward.core.storage import Storage

if TYPE_CHECKING:
    import pyarrow.dataset as ds

#: Meta columns with one or few values per file are decoded as Arrow dictionaries:
#: the same strings, without materialising one copy per row.
DICTIONARY_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name")


@cache
def _parquet_format() -> ds.ParquetFileFormat:
    """The Parquet format of every scan, made once: meta columns decoded as dictionaries."""
    import pyarrow.dataset as ds  # lazy: pyarrow.dataset imports pandas (~0.3 s), too slow for CLI start-up

    return ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=DICTIONARY_META_COLUMNS))


def read_file_slices(
    storage: Storage,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
    *,
    instants: VisibleInstants | None = None,
    merge: MergeSettings | None = None,
    read_optimized: bool = False,
) -> pa.Table:
    """Rows of the given slices, in the table's current schema (meta columns first).

    Slices with log files are merged with them (snapshot and time travel of merge-on-read
    tables); that needs `instants` (the completed instants the read may see, up to the
    query instant: `VisibleInstants.from_timeline(timeline, as_of)`) and the table's
    `merge` settings (`MergeSettings.from_config(config)`; default: the latest write
    wins). `read_optimized=True` reads base files only and ignores log files, as Hudi's
    read-optimized query does.
    """
    merged_slices = [] if read_optimized else [s for s in slices if s.log_files]
    if merged_slices and instants is None:
        raise LakewardError(
            "file slices with log files (merge-on-read) need the visible instants: pass "
            "instants=VisibleInstants.from_timeline(timeline, as_of), or read_optimized=True"
        )
    plain_paths = [
        storage.full_path(s.base_file.path)
        for s in slices
        if s.base_file is not None and (read_optimized or not s.log_files)
    ]
    all_paths = [storage.full_path(s.base_file.path) for s in slices if s.base_file is not None]
    if not plain_paths and not merged_slices:
        full = with_meta(schema) if schema is not None else META_SCHEMA
        empty = _dictionary_meta(full).empty_table()
        return empty.select(list(columns)) if columns is not None else empty
    if all_paths:
        try:
            if schema is None:
                dataset_schema = _dictionary_meta(_physical_schema(storage, all_paths[-1]))
            else:
                dataset_schema = _aligned_schema(storage, all_paths, schema)
        except (pa.ArrowInvalid, OSError) as exc:
            _raise_damaged(storage, all_paths, exc)
            raise
    elif schema is not None:
        dataset_schema = _dictionary_meta(with_meta(schema))
    else:
        raise LakewardError("log files cannot be merged without a table schema (no completed write records one)")
    wanted = list(columns) if columns is not None else None
    parts: list[pa.Table] = []
    if plain_paths:
        import pyarrow.dataset as ds  # lazy: pyarrow.dataset imports pandas (~0.3 s), too slow for CLI start-up

        dataset = ds.dataset(plain_paths, schema=dataset_schema, format=_parquet_format(), filesystem=storage.fs)
        try:
            parts.append(dataset.to_table(columns=wanted, filter=filter))
        except (pa.ArrowInvalid, OSError) as exc:  # Parquet's errors do not say which file
            _raise_damaged(storage, plain_paths, exc)
            raise

    def merged(file_slice: FileSlice) -> pa.Table:
        assert instants is not None
        rows = read_merged_file_slice(storage, file_slice, dataset_schema, instants, merge or MergeSettings())
        rows = rows.cast(dataset_schema)
        if filter is not None:
            rows = rows.filter(filter)
        return rows.select(wanted) if wanted is not None else rows

    # Slices merge independently, mostly in Arrow and Avro code that releases the GIL.
    parts.extend(LocalEngine().map(merged, merged_slices, "merge file slices"))
    table = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    return table.replace_schema_metadata(None)


def _raise_damaged(storage: Storage, full_paths: Sequence[str], exc: BaseException) -> None:
    """Raise a CorruptFileError naming the damaged file if one of `full_paths` is why `exc` happened."""
    damaged = first_unreadable_base_file(storage, full_paths)
    if damaged is not None:
        raise damaged from exc


def _physical_schema(storage: Storage, path: str) -> pa.Schema:
    return pq.read_schema(path, filesystem=storage.fs).remove_metadata()


def _aligned_schema(storage: Storage, paths: Sequence[str], schema: pa.Schema) -> pa.Schema:
    """The newest file's physical schema, plus table columns no file has yet (all null)."""
    newest = max(paths, key=lambda p: p.rsplit("_", 1)[-1])
    physical = _physical_schema(storage, newest)
    missing = [f for f in with_meta(schema) if f.name not in physical.names]
    return _dictionary_meta(pa.schema(list(physical) + missing) if missing else physical)


def _dictionary_meta(schema: pa.Schema) -> pa.Schema:
    for name in DICTIONARY_META_COLUMNS:
        i = schema.get_field_index(name)
        if i >= 0:
            schema = schema.set(i, pa.field(name, pa.dictionary(pa.int32(), pa.string())))
    return schema
