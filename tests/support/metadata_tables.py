"""Small lakeward tables with a metadata table, for the metadata-table tests."""

from __future__ import annotations

import pyarrow as pa

from lakeward import Table


def table_with_metadata(path: str, version: int, table_type: str, rows: pa.Table) -> None:
    """Create a table (record key `id`, partitions `part`, ordering `ts`) at `path`, insert `rows`, and
    initialise its metadata table (`files`)."""
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=version
    )
    table.insert(rows)
    table.initialize_metadata_table()
