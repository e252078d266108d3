"""Building the index files of one base file: a plain function over Arrow, run by any engine.

The index build service, compaction and clustering (with `auto_build`) all call
`build_base_file_indexes` once per base file, as a task of the local or the Spark engine.
"""

from __future__ import annotations

import logging
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.index.secondary.bitmap import build_bitmap_index
from lakeward.core.index.secondary.definitions import IndexDefinition, IndexType
from lakeward.core.index.secondary.storage import index_file_path
from lakeward.core.index.secondary.text import build_text_index
from lakeward.core.storage import Storage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexFileStat:
    """One index file written."""

    index_name: str
    index_type: str
    base_file: str
    path: str
    num_rows: int
    size: int
    seconds: float


def build_base_file_indexes(
    storage: Storage, base_path: str, definitions: Sequence[IndexDefinition], instant_time: str
) -> list[IndexFileStat]:
    """Write the index file of every definition for the base file at `base_path` (relative path).

    Idempotent: the paths depend only on the instant, the index and the base file, and a
    re-run rewrites the same files. A base file that no longer exists (a clean removed it
    after the plan was made) is skipped.
    """
    if not definitions:
        return []
    name = posixpath.basename(base_path)
    file_id = name.split("_", 1)[0]
    try:
        source = storage.open_input_file(base_path)
    except FileNotFoundError:
        log.info("index build %s: base file %s is gone; skipped", instant_time, base_path)
        return []
    with source:
        parquet = pq.ParquetFile(source)
        metadata = parquet.metadata
        row_groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        present = set(parquet.schema_arrow.names)
        wanted = sorted({c for d in definitions for c in d.columns if c in present})
        data = parquet.read(columns=wanted) if wanted else pa.table({})
    num_rows = metadata.num_rows
    stats = []
    for definition in definitions:
        started = time.monotonic()
        columns = {}
        for column in definition.columns:
            if column in data.column_names:
                columns[column] = data.column(column)
            else:  # a column added after this file was written: every row reads as null
                columns[column] = pa.nulls(num_rows, pa.string())
        table = pa.table(columns) if columns else pa.table({})
        if definition.index_type is IndexType.BITMAP:
            body = build_bitmap_index(table, row_groups, definition.id, definition.name, name)
        else:
            body = build_text_index(table, row_groups, definition.id, definition.name, name)
        path = index_file_path(definition.index_type, instant_time, file_id, definition.name, name)
        storage.write_bytes(path, body)
        stats.append(
            IndexFileStat(
                definition.name,
                definition.index_type.value,
                base_path,
                path,
                num_rows,
                len(body),
                time.monotonic() - started,
            )
        )
    return stats
