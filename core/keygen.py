"""Key generators: record keys and partition paths, computed column-wise over Arrow batches.

Formats follow Apache Hudi's generators so that keys and partition directories match what
Hudi writes for the same data (see the format reference, section 9).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import KeyGeneratorType, TableConfig
from lakeward.core.exceptions import InvalidRecordError, SchemaError
from lakeward.core.schema import key_text
from lakeward.core.table_version import METAFOLDER
from lakeward.core.timestamp_keygen import TimestampPartitioner

NULL_KEY_PART = "__null__"
EMPTY_KEY_PART = "__empty__"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _stored_type(schema: pa.Schema | None, name: str) -> pa.DataType | None:
    if schema is None:
        return None
    i = schema.get_field_index(name)
    return schema.field(i).type if i >= 0 else None


def _column(batch: pa.Table, name: str, role: str) -> pa.ChunkedArray:
    if name not in batch.column_names and name.split(".")[0] in batch.column_names:
        raise SchemaError(
            f"the table uses the nested field {name!r} as {role}, which lakeward does not support (Hudi "
            "accepts dotted paths into struct columns): use a top-level column"
        )
    if name not in batch.column_names:
        raise SchemaError(
            f"the batch has no column {name!r}, which the table uses as {role}; batch columns: {batch.column_names}"
        )
    return batch.column(name)


def is_complex_key(config: TableConfig) -> bool:
    """Whether record keys are written in the complex format, `field:value,...` (Hudi's
    ComplexKeyGenerator, and any key of several fields), rather than as the one field's value
    (a single-field ComplexKeyGenerator table that records the `VALUE_ONLY` encoding)."""
    if len(config.record_key_fields) > 1:
        return True
    return config.key_generator is KeyGeneratorType.COMPLEX and not config.single_complex_key_value_only


def record_keys(batch: pa.Table, config: TableConfig, schema: pa.Schema | None = None) -> pa.ChunkedArray:
    """The `_hoodie_record_key` of every row; null or empty keys are an error. `schema`: the
    table's, whose types the values are stored in (else the batch's are)."""
    fields = config.record_key_fields
    columns = [_column(batch, f, "record key") for f in fields]
    if not is_complex_key(config):
        keys = key_text(columns[0], fields[0], _stored_type(schema, fields[0]))
        bad = pc.sum(pc.or_kleene(pc.is_null(keys), pc.equal(keys, ""))).as_py() or 0
        if bad:
            raise InvalidRecordError(f"{bad} row(s) have a null or empty record key in column {fields[0]!r}")
        return keys
    parts = []
    all_missing = None
    for name, column in zip(fields, columns):
        text = key_text(column, name, _stored_type(schema, name))
        missing = pc.or_kleene(pc.is_null(text), pc.equal(text, ""))
        all_missing = missing if all_missing is None else pc.and_kleene(all_missing, missing)
        text = pc.if_else(pc.is_null(text), NULL_KEY_PART, text)
        text = pc.if_else(pc.equal(text, ""), EMPTY_KEY_PART, text)
        parts.append(pc.binary_join_element_wise(f"{name}:", text, ""))
    bad = pc.sum(all_missing).as_py() or 0
    if bad:
        raise InvalidRecordError(f"{bad} row(s) have every record key field {list(fields)} null or empty")
    return pc.binary_join_element_wise(*parts, ",")


#: Characters Hudi escapes in partition values (`PartitionPathEncodeUtils`, taken from Hive):
#: ASCII control characters, DEL and `"#%'*/:=?\{[]^`. Everything else, spaces and non-ASCII
#: included, stays as it is.
_ESCAPED = frozenset(
    [chr(c) for c in range(0x20)] + ['"', "#", "%", "'", "*", "/", ":", "=", "?", "\\", "\x7f", "{", "[", "]", "^"]
)
#: Characters that would split a value into folders when partition values are not encoded.
PATH_SEPARATORS = ("/", "\\")
URL_ENCODE_OPTION = "hoodie.datasource.write.partitionpath.urlencode"


def escape_partition_value(value: str) -> str:
    """A partition value as Hudi writes it with `hoodie.datasource.write.partitionpath.urlencode=true`.

    Each escaped character becomes `%` and its two-digit upper-case hex code (`eu/west` ->
    `eu%2Fwest`, `x=y?` -> `x%3Dy%3F`); the result is one folder name that Hudi, hudi-rs and
    lakeward decode back to the value.
    """
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def unescape_partition_value(text: str) -> str:
    """The value an escaped partition folder name stands for (the inverse of `escape_partition_value`).

    As Hudi: `%` followed by two hex digits is that character, anything else stays as it is.
    """
    if "%" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        code = text[i + 1 : i + 3]
        if text[i] == "%" and len(code) == 2 and all(c in "0123456789abcdefABCDEF" for c in code):
            out.append(chr(int(code, 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _check_folder_name(value: str, name: str, config: TableConfig) -> None:
    """Fail unless `value`, the rendered value of partition field `name`, makes one folder name."""
    if not config.url_encode_partitions:
        if "\x00" in value:  # no file system takes it in a name (the write failed midway, on os.makedirs)
            raise InvalidRecordError(
                f"the partition column {name!r} has a value with a NUL character ({value!r}), which no folder "
                f"name can hold. Create the table with {URL_ENCODE_OPTION}=true to URL-encode partition values "
                "(as Hudi does), or remove the character from the value"
            )
        separator = next((s for s in PATH_SEPARATORS if s in value), None)
        if separator is not None:
            raise InvalidRecordError(
                f"the partition column {name!r} has the value {value!r}, which contains the path separator "
                f"{separator!r} and would become nested folders. Create the table with "
                f"{URL_ENCODE_OPTION}=true to URL-encode partition values (as Hudi does), or remove the "
                "separator from the value"
            )
    if not config.hive_style_partitioning and value in (".", "..", METAFOLDER):
        reason = "the table's own timeline folder" if value == METAFOLDER else "it would point outside the partition"
        raise InvalidRecordError(
            f"the partition column {name!r} has the value {value!r}, which is no usable folder name "
            f"({reason}); use hoodie.datasource.write.hive_style_partitioning=true "
            "when creating the table, or another value"
        )


def partition_paths(batch: pa.Table, config: TableConfig, schema: pa.Schema | None = None) -> pa.ChunkedArray:
    """The `_hoodie_partition_path` of every row ("" when the table is not partitioned); `schema`:
    as for `record_keys`."""
    if not config.is_partitioned:
        return pa.chunked_array([pa.array([""] * batch.num_rows, pa.string())])
    segments: list[pa.ChunkedArray] = []
    timestamps = (
        TimestampPartitioner.from_options(dict(config.keygen_options))
        if config.key_generator is KeyGeneratorType.TIMESTAMP
        else None
    )
    for name in config.partition_fields:
        column = _column(batch, name, "partition field")
        unique = pc.unique(column)
        rendered: list[str] = []
        for value in unique.to_pylist():
            if timestamps is not None:
                # The output format's own `/` (yyyy/MM/dd) are meant as folders, as in Hudi.
                text = timestamps.partition_path(value)
            elif value is None or value == "":
                text = DEFAULT_PARTITION
            else:
                text = key_text(pa.array([value], unique.type), name, _stored_type(schema, name))[0].as_py()
                _check_folder_name(text, name, config)
            if config.url_encode_partitions:
                text = escape_partition_value(text)
            rendered.append(f"{name}={text}" if config.hive_style_partitioning else text)
        index = pc.index_in(column, value_set=unique)
        segments.append(pc.take(pa.array(rendered, pa.string()), index))
    if len(segments) == 1:
        return pa.chunked_array(segments[0]) if isinstance(segments[0], pa.Array) else segments[0]
    return pc.binary_join_element_wise(*segments, "/")


def partition_filter_values(partition_path: str, config: TableConfig) -> dict[str, str]:
    """Field -> raw string value of one partition path (for partition pruning), decoded when encoded."""
    if not config.is_partitioned:
        return {}
    segments = partition_path.split("/")
    fields: Sequence[str] = config.partition_fields
    values = {}
    for name, segment in zip(fields, segments):
        if config.hive_style_partitioning and segment.startswith(f"{name}="):
            segment = segment[len(name) + 1 :]
        values[name] = unescape_partition_value(segment) if config.url_encode_partitions else segment
    return values


def with_virtual_keys(rows: pa.Table, config: TableConfig) -> pa.Table:
    """`rows` (stored rows of a virtual-key table) with `_hoodie_record_key` and
    `_hoodie_partition_path` computed from the key generator's fields, as Hudi's readers
    compute them (the stored columns are null); other tables' rows are returned unchanged."""
    if config.populate_meta_fields:
        return rows
    derived = {"_hoodie_record_key": record_keys(rows, config), "_hoodie_partition_path": partition_paths(rows, config)}
    for name, values in derived.items():
        values = values.cast(pa.string())
        if name in rows.column_names:
            rows = rows.set_column(rows.schema.get_field_index(name), name, values)
        else:
            rows = rows.append_column(name, values)
    return rows
