"""Snapshot and time-travel reads of copy-on-write file slices into Arrow.

The latest base file of each live file group (as of a completed instant) is read with
pyarrow's dataset scanner over exactly those files: column projection and row-group
pruning by statistics come from Parquet itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from lakeward.core.exceptions import LakewardError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.schema import META_SCHEMA, with_meta
from lakeward.core.storage import Storage

#: Meta columns with one or few values per file are decoded as Arrow dictionaries:
#: the same strings, without materialising one copy per row.
DICTIONARY_META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_file_name")
_PARQUET = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=DICTIONARY_META_COLUMNS))


def read_file_slices(
    storage: Storage,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None = None,
    filter: pc.Expression | None = None,
) -> pa.Table:
    """Rows of the given slices' base files, in the table's current schema."""
    if any(s.log_files for s in slices):
        raise LakewardError(
            "this table has log files (merge-on-read); lakeward reads copy-on-write slices only, for now"
        )
    paths = [storage.full_path(s.base_file.path) for s in slices if s.base_file is not None]
    if not paths:
        full = with_meta(schema) if schema is not None else META_SCHEMA
        empty = _dictionary_meta(full).empty_table()
        return empty.select(list(columns)) if columns is not None else empty
    if schema is None:
        dataset_schema = _dictionary_meta(_physical_schema(storage, paths[-1]))
    else:
        dataset_schema = _aligned_schema(storage, paths, schema)
    dataset = ds.dataset(paths, schema=dataset_schema, format=_PARQUET, filesystem=storage.fs)
    table = dataset.to_table(columns=list(columns) if columns is not None else None, filter=filter)
    return table.replace_schema_metadata(None)


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
