"""Table schemas: Arrow <-> Hudi Avro conversion, meta columns and schema evolution.

Hudi stores the table schema as Avro JSON (`extraMetadata.schema` of every write commit,
`hoodie.table.create.schema` in `hoodie.properties`, `parquet.avro.schema` in base
files). Java readers compare those strings and resolve named types by full name, so the
Avro we write mirrors what Spark + Hudi 0.14 write byte for byte: Spark's
`SchemaConverters.toAvroType` naming (nested records named after their field, decimals
as `fixed` named "fixed" in namespace `<parent record>.<field>`) followed by Hudi's
`getAvroSchemaWithDefaults` (null first in every union, `"default": null`).
"""

from __future__ import annotations

import decimal
import json
import math
import re
from collections.abc import Collection
from typing import Any

import pyarrow as pa

from lakeward.core.exceptions import SchemaError

META_COLUMNS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)
"""The five Hudi meta columns, in the order they lead every base file (format doc 5.1)."""

VIRTUAL_META_COLUMNS: tuple[str, ...] = META_COLUMNS[:4]
"""The meta columns a virtual-key table (`hoodie.populate.meta.fields=false`) leaves null: all but
`_hoodie_file_name`, which Hudi 1.x still fills."""

META_SCHEMA: pa.Schema = pa.schema([pa.field(n, pa.string()) for n in META_COLUMNS])
"""Arrow schema of the meta columns: all nullable strings."""

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
#: The type promotions of Avro (a reader of the right-hand types reads data written as the
#: left-hand one) that keep every value, which Hudi's writers apply as schema evolution: int -> long,
#: double; float -> double; string <-> bytes. Files of the left-hand type are read in the right-hand
#: one. Avro's int -> float and long -> float, double round large values, and are refused.
_PROMOTIONS: dict[str, frozenset[str]] = {
    "int": frozenset({"long", "double"}),
    "float": frozenset({"double"}),
    "string": frozenset({"bytes"}),
    "bytes": frozenset({"string"}),
}
#: The promotions a write may widen a top-level column by (`evolve_schema`). Not float -> double:
#: readers disagree on the doubles a float file holds (Arrow and Spark widen the binary value,
#: 5.2456017f -> 5.245601654052734; Hudi's Avro rewriting and hudi-rs's base-file reads go through
#: the decimal text, -> 5.2456017). string <-> bytes never widen: the table's type stays.
_WIDENINGS: dict[str, frozenset[str]] = {"int": frozenset({"long", "double"})}


def promotes_to(narrow: pa.DataType, wide: pa.DataType, promotions: dict[str, frozenset[str]] = _PROMOTIONS) -> bool:
    """Whether data of type `narrow` is promoted to `wide` (by `_PROMOTIONS`, or `promotions`)."""
    a, b = _SIMPLE_TO_AVRO.get(narrow), _SIMPLE_TO_AVRO.get(wide)
    return a is not None and b is not None and b in promotions.get(a, frozenset())


# Arrow types written as a plain Avro type (Spark: BYTE/SHORT/INT all become int).
_SIMPLE_TO_AVRO: dict[pa.DataType, str] = {
    pa.bool_(): "boolean", pa.int8(): "int", pa.int16(): "int", pa.int32(): "int",
    pa.int64(): "long", pa.float32(): "float", pa.float64(): "double",
    pa.string(): "string", pa.large_string(): "string",
    pa.binary(): "bytes", pa.large_binary(): "bytes",
}  # fmt: skip
_PRIMITIVE_TO_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(),
    "double": pa.float64(), "string": pa.string(), "bytes": pa.binary(),
}  # fmt: skip
# Spark TIMESTAMP is UTC-adjusted (Parquet isAdjustedToUTC=true); local-* are tz-naive.
_LOGICAL_TO_ARROW: dict[tuple[str, str], pa.DataType] = {("int", "date"): pa.date32()} | {
    ("long", f"{prefix}timestamp-{unit}"): pa.timestamp(arrow_unit, tz)
    for prefix, tz in (("", "UTC"), ("local-", None))
    for unit, arrow_unit in (("millis", "ms"), ("micros", "us"), ("nanos", "ns"))
}


def strip_meta(schema: pa.Schema) -> pa.Schema:
    """`schema` without the five meta columns (the data schema Hudi records in commits)."""
    return pa.schema([f for f in schema if f.name not in META_COLUMNS], schema.metadata)


def with_meta(schema: pa.Schema) -> pa.Schema:
    """`schema` with the meta columns first, as in every base file; existing ones are replaced."""
    return pa.schema([*META_SCHEMA, *strip_meta(schema)], schema.metadata)


def _sanitize(name: str) -> str:
    """Hudi's `HoodieAvroUtils.sanitizeName`: invalid Avro name characters become `__`."""
    if name and re.match(r"[^A-Za-z_]", name[0]):
        name = "__" + name[1:]
    return re.sub(r"[^A-Za-z0-9_]", "__", name)


def _nullable(avro_type: Any, null_first: bool) -> list[Any]:
    return ["null", avro_type] if null_first else [avro_type, "null"]


def _min_bytes(precision: int) -> int:
    """Spark's `minBytesForPrecision`: fewest two's-complement bytes holding 10**precision."""
    n = 1
    while 2 ** (8 * n - 1) < 10**precision:
        n += 1
    return n


def _avro_fields(fields: list[pa.Field], ns: str, null_first: bool, path: str) -> list[Any]:
    """Avro fields of a record whose full name is `ns` (its children's namespace)."""
    seen: set[str] = set()
    out: list[Any] = []
    for f in fields:
        col = f"{path}.{f.name}" if path else f.name
        if not _AVRO_NAME.match(f.name) or f.name in seen:
            raise SchemaError(f"column '{col}': invalid or duplicate Avro field name")
        seen.add(f.name)
        typ = _nullable(_avro_type(f.type, f.name, ns, null_first, col), null_first)
        field = {"name": f.name, "type": typ}
        out.append(field | {"default": None} if null_first else field)
    return out


def _avro_type(t: pa.DataType, name: str, ns: str, null_first: bool, col: str) -> Any:
    """Spark's `toAvroType(t, recordName=name, nameSpace=ns)` for one Arrow type."""
    if t in _SIMPLE_TO_AVRO:
        return _SIMPLE_TO_AVRO[t]
    if pa.types.is_decimal128(t):
        return {
            "type": "fixed",
            "name": "fixed",
            "namespace": f"{ns}.{name}",
            "size": _min_bytes(t.precision),
            "logicalType": "decimal",
            "precision": t.precision,
            "scale": t.scale,
        }
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t):
        unit = "millis" if t.unit == "ms" else "micros"
        return {"type": "long", "logicalType": f"timestamp-{unit}"}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        kind, key = ("map", "values") if pa.types.is_map(t) else ("array", "items")
        if kind == "map" and _SIMPLE_TO_AVRO.get(t.key_type) != "string":
            raise SchemaError(f"column '{col}': Avro maps need string keys, got {t.key_type}")
        value = t.item_type if kind == "map" else t.value_type
        return {
            "type": kind,
            key: _nullable(_avro_type(value, name, ns, null_first, col), null_first),
        }
    if pa.types.is_struct(t):
        fields = _avro_fields(list(t), f"{ns}.{name}", null_first, col)
        return {"type": "record", "name": name, "namespace": ns, "fields": fields}
    raise SchemaError(f"column '{col}' has type {t}, which has no Hudi/Avro equivalent")


def avro_schema_from_arrow(
    schema: pa.Schema,
    table_name: str,
    *,
    with_meta: bool = False,
    null_first: bool = True,
) -> dict[str, Any]:
    """Hudi's Avro schema (as a JSON-ready dict) for an Arrow schema.

    Record `<table>_record` in namespace `hoodie.<table>`; every field nullable. With
    `null_first` (the default) unions are `["null", T]` with `"default": null`, as in
    `extraMetadata.schema` and `parquet.avro.schema`; `null_first=False` gives Spark's
    `[T, "null"]` without defaults, as in `hoodie.table.create.schema`. With `with_meta`
    the five meta fields (`["null","string"]`, `"doc": ""`) come first and meta columns
    already in `schema` are not repeated; without it they are treated as data columns.
    """
    name = _sanitize(table_name)
    ns = f"hoodie.{name}"
    data = strip_meta(schema) if with_meta else schema
    fields = _avro_fields(list(data), f"{ns}.{name}_record", null_first, "")
    if with_meta:
        meta = [{"name": m, "type": ["null", "string"], "doc": "", "default": None} for m in META_COLUMNS]
        fields = meta + fields
    return {
        "type": "record",
        "name": f"{name}_record",
        "namespace": ns,
        "fields": fields,
    }


def avro_schema_json(
    schema: pa.Schema,
    table_name: str,
    *,
    with_meta: bool = False,
    null_first: bool = True,
) -> str:
    """`avro_schema_from_arrow` as the compact JSON string Hudi writes (no whitespace)."""
    avro = avro_schema_from_arrow(schema, table_name, with_meta=with_meta, null_first=null_first)
    return json.dumps(avro, separators=(",", ":"))


def _arrow_type(s: Any, ns: str, named: dict[str, pa.DataType], col: str) -> pa.DataType:
    """Arrow type of one Avro schema node; `named` collects named types for references."""
    if isinstance(s, list):
        branches = [b for b in s if b != "null"]
        if len(branches) != 1:
            raise SchemaError(f"column '{col}': union {s} is not a nullable single type")
        return _arrow_type(branches[0], ns, named, col)
    if isinstance(s, str):
        if s in _PRIMITIVE_TO_ARROW:
            return _PRIMITIVE_TO_ARROW[s]
        for ref in (f"{ns}.{s}", s):
            if ref in named:
                return named[ref]
        raise SchemaError(f"column '{col}': unknown Avro type {s!r}")
    if not isinstance(s, dict) or "type" not in s:
        raise SchemaError(f"column '{col}': malformed Avro schema {s!r}")
    typ, logical = s["type"], s.get("logicalType")
    if typ in ("record", "fixed", "enum"):
        ns = s.get("namespace", ns)
        full = s["name"] if "." in s["name"] else f"{ns}.{s['name']}".lstrip(".")
        if typ == "record":
            fields = []
            for f in s["fields"]:
                c = f"{col}.{f['name']}" if col else f["name"]
                fields.append(pa.field(f["name"], _arrow_type(f["type"], ns, named, c)))
            result: pa.DataType = pa.struct(fields)
        elif typ == "enum":
            result = pa.string()
        elif logical == "decimal":
            result = pa.decimal128(s["precision"], s.get("scale", 0))
        else:
            result = pa.binary(s["size"])
        named[full] = result
        return result
    if typ == "array":
        return pa.list_(_arrow_type(s["items"], ns, named, col))
    if typ == "map":
        return pa.map_(pa.string(), _arrow_type(s["values"], ns, named, col))
    if typ == "bytes" and logical == "decimal":
        return pa.decimal128(s["precision"], s.get("scale", 0))
    logical_type = _LOGICAL_TO_ARROW.get((typ, logical or ""))
    # A primitive wrapped in a dict; unknown logical types are ignored (Avro spec).
    return logical_type or _arrow_type(typ, ns, named, col)


def arrow_schema_from_avro(avro: str | dict[str, Any]) -> pa.Schema:
    """Arrow schema of a Hudi Avro record schema (JSON string or parsed dict).

    Accepts both union orders (`["null", T]` and `[T, "null"]`); every field, list item
    and map value comes back nullable. Timestamps become `timestamp[unit, tz=UTC]` (Spark
    `TIMESTAMP` is UTC-adjusted), `local-timestamp-*` tz-naive; ints become int32.
    """
    try:
        parsed = json.loads(avro) if isinstance(avro, str) else avro
    except json.JSONDecodeError as e:
        raise SchemaError(f"table schema is not valid JSON: {e}") from e
    if not isinstance(parsed, dict) or parsed.get("type") != "record":
        raise SchemaError("table schema must be an Avro record")
    try:
        return pa.schema(list(_arrow_type(parsed, "", {}, "")))
    except (KeyError, TypeError, ValueError) as e:  # missing keys, bad precision...
        raise SchemaError(f"unsupported or malformed Avro table schema: {e!r}") from e


def _merge(
    table_t: pa.DataType,
    batch_t: pa.DataType,
    path: str,
    *,
    allow_new: bool,
    allow_missing: bool,
    promote: bool = False,
) -> pa.DataType:
    """The table type after writing a `batch_t` column into a `table_t` column, or SchemaError.
    `promote`: a `batch_t` that `table_t` is promoted to (`promotes_to`) widens the column."""
    kw = {"allow_new": allow_new, "allow_missing": allow_missing, "promote": promote}
    if table_t == batch_t or pa.types.is_null(batch_t):
        return table_t
    if pa.types.is_struct(table_t) and pa.types.is_struct(batch_t):
        batch_fields = {f.name: f for f in batch_t}
        if len(batch_fields) != batch_t.num_fields:
            raise SchemaError(f"{f'column {path!r}' if path else 'the batch'} has duplicate field names")
        out: list[pa.Field] = []
        for f in table_t:
            sub = f"{path}.{f.name}" if path else f.name
            if f.name in batch_fields:
                out.append(f.with_type(_merge(f.type, batch_fields[f.name].type, sub, **kw)))
            elif allow_missing:
                out.append(f)
            else:
                raise SchemaError(
                    f"column '{sub}' of the table is missing from the batch (dropping columns is not supported)"
                )
        table_names = set(table_t.names)  # `names` builds a list on every call
        folded = {n.lower(): n for n in table_names}
        for f in batch_t:
            if f.name in table_names:
                continue
            sub = f"{path}.{f.name}" if path else f.name
            if not allow_new:
                raise SchemaError(f"column '{sub}' of the batch is not in the target schema (evolve the schema first)")
            if f.name.lower() in folded:
                # Hudi's Spark and Hive readers resolve names case-insensitively: they would read one for the other
                raise SchemaError(
                    f"column '{sub}' of the batch differs from the table's column '{folded[f.name.lower()]}' "
                    "only in case: rename it (readers that ignore case could not tell them apart)"
                )
            folded[f.name.lower()] = f.name
            _avro_type(f.type, f.name, "x", True, sub)  # must be representable in Avro
            out.append(f.with_nullable(True))
        return pa.struct(out)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(p(table_t) for p in lists) and any(p(batch_t) for p in lists):
        value = _merge(table_t.value_type, batch_t.value_type, f"{path}[]", **kw)
        ctor = pa.list_ if pa.types.is_list(table_t) else pa.large_list
        return ctor(table_t.value_field.with_type(value))
    if pa.types.is_map(table_t) and pa.types.is_map(batch_t):
        _merge(table_t.key_type, batch_t.key_type, f"{path}{{key}}", **kw)
        item = _merge(table_t.item_type, batch_t.item_type, f"{path}{{}}", **kw)
        return pa.map_(table_t.key_type, table_t.item_field.with_type(item))
    tb, bb = _INT_BITS.get(table_t), _INT_BITS.get(batch_t)
    if tb and bb and (tb == 64 or bb <= 32):
        return table_t if tb == 64 else pa.int32()  # int8/16/32 are all Avro "int"
    if promotes_to(batch_t, table_t):  # (string <-> bytes promote both ways: the table's type stays)
        return table_t
    if promote and promotes_to(table_t, batch_t):
        if any(c in path for c in ".[{"):
            raise SchemaError(
                f"column '{path}' has type {batch_t} in the batch but {table_t} in the table: types widen "
                "in top-level columns only (readers of merge-on-read log files written before cannot "
                "widen them inside a nested column)"
            )
        if not promotes_to(table_t, batch_t, _WIDENINGS):
            raise SchemaError(
                f"column '{path}' has type {batch_t} in the batch but {table_t} in the table: widening "
                f"{table_t} to {batch_t} is not supported, as readers disagree on the values of the files "
                "written before (5.2456017 as a float reads as 5.245601654052734 in Arrow and Spark, as "
                f"5.2456017 in Hudi's record merging); send {table_t}"
            )
        return batch_t
    for family in (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_binary, pa.types.is_large_binary),
        (pa.types.is_timestamp,),
    ):
        if any(p(table_t) for p in family) and any(p(batch_t) for p in family):
            return table_t
    raise SchemaError(f"column '{path}' has type {batch_t} in the batch but {table_t} in the table")


def evolve_schema(table_schema: pa.Schema, incoming: pa.Schema, keys: Collection[str] = ()) -> pa.Schema:
    """The table schema after writing a batch with schema `incoming`.

    Allowed: new columns (also new fields inside structs), appended after the existing ones and
    made nullable; ints narrower than the table's (int8/16/32 widen to int32); Avro's type
    promotions that keep every value, as Hudi's writers evolve a schema: a top-level batch column
    of a wider type widens the table's (`_WIDENINGS`: int -> long, double), one of a narrower type
    (`_PROMOTIONS`) is cast to the table's; string/large_string, binary/large_binary and any
    timestamp unit/time zone (cast when conforming; a lossy cast fails there); a batch column of
    Arrow type null. Everything else is a SchemaError: a table column missing from the batch
    (dropping is not supported), any other type change, and a promotion of one of `keys` (the
    record key and partition path fields) other than int -> long: Hudi renders their values as
    text, which would change (`1.0` for the int `1` as a double) and no longer match the keys and
    partitions stored. Meta columns are ignored on both sides.
    """
    old, new = (pa.struct(list(strip_meta(s))) for s in (table_schema, incoming))
    merged = pa.schema(list(_merge(old, new, "", allow_new=True, allow_missing=False, promote=True)))
    for name in keys:
        if name in old.names and name in merged.names:
            before, after = old.field(name).type, merged.field(name).type
            if before != after and not (before in _INT_BITS and after == pa.int64()):
                raise SchemaError(
                    f"column '{name}' is a record key or partition path field of the table: its type {before} "
                    f"cannot be promoted to {after} (the text of its values, which keys and partition paths "
                    "hold, would change)"
                )
    return pa.schema(list(merged), table_schema.metadata)


def merge_committed(committed: pa.Schema, ours: pa.Schema, *, allow_new: bool) -> pa.Schema:
    """`committed` (a schema another writer committed meanwhile) with the columns of `ours` it lacks
    and the types `ours` promotes its columns to (`allow_new`: ours becomes the table's latest
    schema); a column `ours` lacks keeps its place. SchemaError when a column's types do not merge,
    or (without `allow_new`) when `ours` has a column or field `committed` lacks or a type wider than
    its (readers take `committed`, which could not read our files)."""
    old, new = (pa.struct(list(strip_meta(s))) for s in (committed, ours))
    merged = _merge(old, new, "", allow_new=allow_new, allow_missing=True, promote=allow_new)
    return pa.schema(list(merged), committed.metadata)


def conform_batch(batch: pa.Table | pa.RecordBatch, target: pa.Schema, *, allow_missing: bool = False) -> pa.Table:
    """Cast and reorder `batch` to exactly `target` (normally the result of `evolve_schema`).

    Meta columns of the batch that `target` lacks are dropped; any other column not in
    `target` is a SchemaError. Columns (and struct fields) of `target` absent from the
    batch are a SchemaError unless `allow_missing`, then filled with nulls (only
    nullable ones). Casts are safe: a value that would change (overflow, truncated
    timestamp) raises SchemaError naming the column.
    """
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    if table.schema.equals(target, check_metadata=True):
        return table  # what the loop below would rebuild (no cast, nothing missing)
    names = set(target.names)
    keep = [f for f in table.schema if f.name in names or f.name not in META_COLUMNS]
    src, dst = pa.struct(keep), pa.struct(list(target))
    _merge(dst, src, "", allow_new=False, allow_missing=allow_missing)
    # `table.column_names` builds a list on every call, `table.column(name)` searches the
    # schema: one dict instead (a name the batch holds twice is looked up by `table.column`,
    # which refuses it, as before).
    present = table.column_names
    by_name = dict(zip(present, table.columns))
    unique = len(by_name) == len(present)
    columns: list[pa.ChunkedArray | pa.Array] = []
    for f in target:
        if f.name not in by_name:
            if not f.nullable:
                raise SchemaError(f"column '{f.name}' is missing from the batch and not nullable")
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        column = by_name[f.name] if unique else table.column(f.name)
        columns.append(_safe_cast(column, f))
    return pa.Table.from_arrays(columns, schema=target)


def _safe_cast(column: pa.ChunkedArray | pa.Array, target: pa.Field) -> pa.ChunkedArray | pa.Array:
    """`column` as `target`'s type; SchemaError naming the column when a value would change."""
    if column.type == target.type:
        return column
    try:
        return column.cast(target.type, safe=True)  # Arrow's cast (pyarrow.compute loads on first use)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError) as e:
        raise SchemaError(f"column '{target.name}' cannot be cast from {column.type} to {target.type}: {e}") from e


def cast_columns(batch: pa.Table, target: pa.Schema) -> pa.Table:
    """`batch` with each top-level column that `target` types otherwise cast to it (safely, as
    `conform_batch` casts; struct fields by name, so nested values too), before a write starts: a
    value that would change is refused while the table is untouched. Columns keep their order."""
    fields = {f.name: f for f in target}  # one lookup per column (`Schema.names` builds a list per call)
    for i, name in enumerate(batch.column_names):
        field, column = fields.get(name), batch.column(i)
        if field is None or column.type == field.type:
            continue
        batch = batch.set_column(i, batch.field(i).with_type(field.type), _safe_cast(column, field))
    return batch


def key_text(column: pa.ChunkedArray | pa.Array, name: str, stored: pa.DataType | None = None) -> pa.ChunkedArray:
    """The key text of each value of a record key or partition field, as Hudi's key generators
    render it; `stored`: the column's type in the table, when known (a timestamp renders in its unit)."""
    # lazy: opening a table needs no pyarrow.compute (start-up of the CLI's table commands, issue 23)
    import pyarrow.compute as pc

    typ = column.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return pc.cast(column, pa.string())
    if pa.types.is_boolean(typ):
        return pc.if_else(column, "true", "false")
    if pa.types.is_floating(typ):
        single = not pa.types.is_float64(typ)
        texts = pa.array([None if v is None else java_float_text(v, single) for v in column.to_pylist()], pa.string())
        return pa.chunked_array([texts]) if isinstance(column, pa.ChunkedArray) else texts
    if pa.types.is_integer(typ) or pa.types.is_decimal(typ):
        return pc.cast(column, pa.string())
    if pa.types.is_timestamp(typ):
        # As Hudi renders a timestamp-millis/-micros field (`getNestedFieldValAsString`, consistent
        # logical timestamps off, its default): the stored number, so that one instant is one key
        # whatever the batch's unit or zone (a time zone-less value is stored as UTC).
        unit = key_unit(stored if stored is not None and pa.types.is_timestamp(stored) else typ)
        counts = pc.cast(column, pa.timestamp(unit, typ.tz), safe=False)
        return pc.cast(pc.cast(counts, pa.int64()), pa.string())
    if pa.types.is_date(typ):
        return pc.cast(column, pa.string())
    raise SchemaError(f"column {name!r} of type {typ} cannot be part of a record key")


def java_float_text(value: float, single: bool = False) -> str:
    """A double (or, `single`, a float) as Java's `Double.toString` / `Float.toString` writes it,
    which is how Hudi's key generators render floating-point key and partition values: the
    shortest digits that identify the value, a decimal point always (`1.0`), and `E` notation
    outside [1e-3, 1e7) (`1.0E20`, `1.5E-7`); `NaN`, `Infinity`, `-0.0`."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    # lazy: numpy comes with pyarrow; only floating keys need it (float32's shortest digits)
    import numpy as np

    exact = decimal.Decimal(str(np.float32(value)) if single else repr(value))
    sign = "-" if exact < 0 else ""
    exact = abs(exact)
    digits = "".join(map(str, exact.as_tuple().digits)).rstrip("0") or "0"
    exponent = exact.adjusted()
    if not 1e-3 <= abs(value) < 1e7:
        return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"
    if exponent >= 0:
        return f"{sign}{digits[: exponent + 1].ljust(exponent + 1, '0')}.{digits[exponent + 1 :] or '0'}"
    return f"{sign}0.{'0' * (-exponent - 1)}{digits}"


def key_unit(typ: pa.TimestampType) -> str:
    """The unit a timestamp is stored in (its Avro type): milliseconds stay, others are micros."""
    return "ms" if typ.unit == "ms" else "us"
