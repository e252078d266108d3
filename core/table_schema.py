"""The table's current schema: from the latest completed write's commit metadata, as Hudi does."""

from __future__ import annotations

import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.schema import arrow_schema_from_avro
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline
from lakeward.core.timeline.transitions import read_commit_metadata


def resolve_table_schema(storage: Storage, timeline: Timeline, config: TableConfig) -> pa.Schema | None:
    """Data schema (no meta columns) of the latest completed write, else the create schema."""
    for instant in reversed(timeline.completed_writes()):
        schema = read_commit_metadata(storage, instant).schema
        if schema:
            return arrow_schema_from_avro(schema)
    if config.create_schema:
        return arrow_schema_from_avro(config.create_schema)
    return None
