"""Change records as persisted in `.cdc` log files (CDC data blocks), per supplemental logging mode.

The record schemas are Hudi's (format doc 10): `KEY_OP` keeps `op` and `record_key`;
`DATA_BEFORE` adds the before-image; `DATA_BEFORE_AFTER` keeps `op`, `ts_ms` and both
images. Images are the table's Avro record with meta fields. A `.cdc` file is named like
a log file of the slice it belongs to, with the `.cdc` suffix, and holds one block per
instant whose changes it carries (the block's `INSTANT_TIME`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.changes import AFTER, BEFORE, KEY, OP, TS, as_images, change_schema, image_type
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.file_group.log_file import (
    BlockType,
    CdcDataBlock,
    RawBlock,
    decode_avro_together,
    decode_block,
    encode_block,
)
from lakeward.core.file_group.log_file.log_format import DecodedTogether
from lakeward.core.file_group.naming import log_file_name
from lakeward.core.merge import RECORD_KEY
from lakeward.core.schema import conform_batch
from lakeward.core.storage import Storage


def _nullable(schema: Any) -> list[Any]:
    return ["null", schema]


def cdc_avro_schema(mode: SupplementalLoggingMode, table_avro_schema_json: str) -> str:
    """The Avro schema of the CDC records of `mode` (the `SCHEMA` header of CDC blocks)."""
    string = ["string", "null"]
    if mode is SupplementalLoggingMode.KEY_OP:
        fields = [{"name": OP, "type": string}, {"name": KEY, "type": string}]
        return json.dumps({"type": "record", "name": "Record", "fields": fields}, separators=(",", ":"))
    table = json.loads(table_avro_schema_json)
    name, namespace = table["name"], table.get("namespace")
    full_name = name if "." in name or not namespace else f"{namespace}.{name}"
    nullable_string = ["null", "string"]
    if mode is SupplementalLoggingMode.DATA_BEFORE:
        fields = [
            {"name": OP, "type": nullable_string, "default": None},
            {"name": KEY, "type": nullable_string, "default": None},
            {"name": BEFORE, "type": _nullable(table), "default": None},
        ]
    else:
        fields = [
            {"name": OP, "type": nullable_string, "default": None},
            {"name": TS, "type": nullable_string, "default": None},
            {"name": BEFORE, "type": _nullable(table), "default": None},
            {"name": AFTER, "type": _nullable(full_name), "default": None},
        ]
    record = {"type": "record", "name": "CDC", "fields": fields}
    if table.get("namespace"):
        record["namespace"] = table["namespace"]
    return json.dumps(record, separators=(",", ":"))


def to_cdc_records(changes: pa.Table, mode: SupplementalLoggingMode) -> pa.Table:
    """The persisted columns of `changes` (see `changes.change_schema`) for `mode`."""
    if mode is SupplementalLoggingMode.KEY_OP:
        return changes.select([OP, KEY])
    if mode is SupplementalLoggingMode.DATA_BEFORE:
        return changes.select([OP, KEY, BEFORE])
    return changes.select([OP, TS, BEFORE, AFTER])


def cdc_block(
    changes: pa.Table, instant_time: str, mode: SupplementalLoggingMode, table_avro_schema_json: str
) -> CdcDataBlock:
    """A CDC data block of the changes one instant made to one file group."""
    return CdcDataBlock.create(
        to_cdc_records(changes, mode), instant_time, cdc_avro_schema(mode, table_avro_schema_json)
    )


def write_cdc_file(
    storage: Storage,
    partition_path: str,
    file_id: str,
    base_instant_time: str,
    write_token: str,
    blocks: Sequence[CdcDataBlock],
    before_create: Callable[[str], None] | None = None,
    version: int = 1,
) -> tuple[str, int]:
    """Write `blocks` as the `.cdc` log file of a slice; returns (path, size).

    The name is fixed by its arguments, so running the same task again rewrites the same
    file (idempotent). `before_create` gets the file name first (to create its marker).
    """
    name = log_file_name(file_id, base_instant_time, version, write_token, cdc=True)
    path = posixpath.join(partition_path, name) if partition_path else name
    data = b"".join(encode_block(b) for b in blocks)
    if before_create is not None:
        before_create(name)
    storage.write_bytes(path, data)
    return path, len(data)


def _conform_images(images: pa.Array, full_schema: pa.Schema) -> pa.Array:
    """Images of an older schema in the current one (new columns null, dropped columns gone)."""
    target = image_type(full_schema)
    if images.type == target:
        return images
    struct = images if isinstance(images, pa.StructArray) else pa.array(images)
    valid = pc.is_valid(struct)
    rows = pa.Table.from_struct_array(struct)  # type: ignore[attr-defined]
    rows = rows.select([n for n in rows.column_names if n in full_schema.names])
    conformed = as_images(conform_batch(rows, full_schema, allow_missing=True), full_schema)
    return pc.if_else(valid, conformed, pa.nulls(len(conformed), target))


def cdc_block_changes(
    files: Mapping[str, Sequence[RawBlock]], full_schema: pa.Schema
) -> dict[str, list[tuple[str | None, pa.Table]]]:
    """The changes each CDC data block of `.cdc` files holds: per file, (instant time, changes in
    `changes.change_schema`) in block order; images the file's mode does not persist are null.

    The blocks of one `SCHEMA` are decoded together, in one column-wise pass and one
    conversion (a file group's blocks are many and small: one per commit); blocks that pass
    cannot take are decoded one by one, with the precise error for damaged bytes.
    """
    blocks = [(path, raw) for path, raws in files.items() for raw in raws]
    raws = [raw for _, raw in blocks]
    decoded: dict[int, pa.Table] = {}
    for group in decode_avro_together(raws):
        if raws[group.positions[0]].block_type is not BlockType.CDC_DATA:
            continue
        instants = pa.array([raws[i].instant_time for i in group.positions], pa.string())
        ts = pc.take(instants, pa.array(np.repeat(np.arange(len(group.counts)), group.counts)))
        converted = DecodedTogether(group.positions, _from_cdc_records(group.records, ts, full_schema), group.counts)
        decoded.update(converted.slices())
    out: dict[str, list[tuple[str | None, pa.Table]]] = {path: [] for path in files}
    for i, (path, raw) in enumerate(blocks):
        changes = decoded.get(i)
        if changes is None:
            block = decode_block(raw)
            if not isinstance(block, CdcDataBlock):
                continue
            n = block.records.num_rows
            changes = _from_cdc_records(
                block.records, pa.repeat(pa.scalar(raw.instant_time, pa.string()), n), full_schema
            )
        out[path].append((raw.instant_time, changes))
    return out


def _from_cdc_records(records: pa.Table, ts: pa.Array, full_schema: pa.Schema) -> pa.Table:
    """CDC records (any mode) as changes; `ts`: each record's instant time (its block's)."""
    n = records.num_rows
    names = records.column_names
    target = image_type(full_schema)
    before = _conform_images(records.column(BEFORE).combine_chunks(), full_schema) if BEFORE in names else None
    after = _conform_images(records.column(AFTER).combine_chunks(), full_schema) if AFTER in names else None
    if KEY in names:
        keys = records.column(KEY).combine_chunks()
    else:
        from_after = pc.struct_field(after, RECORD_KEY) if after is not None else None
        from_before = pc.struct_field(before, RECORD_KEY) if before is not None else None
        keys = pc.coalesce(*[k for k in (from_after, from_before) if k is not None])
    return pa.Table.from_arrays(
        [
            pc.cast(records.column(OP).combine_chunks(), pa.string()),
            ts,
            pc.cast(keys, pa.string()),
            before if before is not None else pa.nulls(n, target),
            after if after is not None else pa.nulls(n, target),
        ],
        schema=change_schema(full_schema),
    )
