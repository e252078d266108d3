"""Read filters: DNF tuples (as pyarrow.parquet takes them) or pyarrow expressions, and
partition pruning from the conjuncts that touch only partition fields.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import ConfigError
from lakeward.core.index.secondary.predicates import filters_to_expression, parse_filters  # lakeward's extra operators
from lakeward.core.keygen import DEFAULT_PARTITION, partition_filter_values
from lakeward.core.schema import META_COLUMNS, key_unit, with_meta

Filters: TypeAlias = pc.Expression | Sequence[tuple[str, str, Any]] | Sequence[Sequence[tuple[str, str, Any]]] | None


def to_expression(filters: Filters) -> pc.Expression | None:
    if filters is None or isinstance(filters, pc.Expression):
        return filters
    if not filters:
        return None

    try:
        return filters_to_expression(filters)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"filters={filters!r} are not valid: {exc}") from exc


def conform_time_literals(filters: Filters, schema: pa.Schema | None) -> Filters:
    """`filters` with each datetime literal made comparable with its timestamp column: a naive one
    on a column with a time zone is taken as UTC (lakeward writes naive timestamps as UTC instants,
    Hudi's `timestamp-micros`, so a naive literal means the value as written), an aware one on a
    column without a time zone becomes its naive UTC value. Pyarrow refuses to compare the two
    kinds (`ArrowInvalid`). Expressions are left as they are."""
    if schema is None:
        return filters

    def conform(t: tuple[str, str, Any]) -> tuple[str, str, Any]:
        column, op, value = t
        if column not in schema.names or not pa.types.is_timestamp(schema.field(column).type):
            return t
        aware = schema.field(column).type.tz is not None

        def one(v: Any) -> Any:
            if not isinstance(v, dt.datetime):
                return v
            if aware and v.tzinfo is None:
                return v.replace(tzinfo=dt.UTC)
            if not aware and v.tzinfo is not None:
                return v.astimezone(dt.UTC).replace(tzinfo=None)
            return v

        if isinstance(value, (list, tuple, set, frozenset)):
            return (column, op, type(value)(one(v) for v in value))
        return (column, op, one(value))

    return _map_predicates(filters, conform)


def conform_number_literals(filters: Filters, schema: pa.Schema | None) -> Filters:
    """`filters` with each float literal on an integer column made an integer one of the same meaning
    (`> 1.5` is `>= 2`, `= 1.5` matches nothing, `in [2.0, 2.5]` is `in [2]`). Pyarrow compares the two
    through a float cast that refuses large integers (`ArrowInvalid: Integer value ... not in range`)
    in the middle of the scan. Expressions are left as they are."""
    if schema is None:
        return filters

    def on_integers(column: str) -> bool:
        return column in schema.names and pa.types.is_integer(schema.field(column).type)

    def conform(t: tuple[str, str, Any]) -> tuple[str, str, Any]:
        column, op, value = t
        if not on_integers(column):
            return t
        if op in ("in", "not in"):
            values = list(value)
            if not any(isinstance(v, float) for v in values):
                return t
            _finite(t, values)
            return (column, op, [int(v) if isinstance(v, float) else v for v in values if _integral(v)])
        if not isinstance(value, float):
            return t
        _finite(t, [value])
        if value.is_integer():
            return (column, op, int(value))
        if op in (">", ">="):
            return (column, ">=", math.ceil(value))
        if op in ("<", "<="):
            return (column, "<=", math.floor(value))
        if op == "=":
            return (column, "in", [])
        if op == "!=":
            return (column, "is not null", None)
        return t

    return _map_predicates(filters, conform)


def _map_predicates(filters: Filters, conform: Callable[[tuple[str, str, Any]], tuple[str, str, Any]]) -> Filters:
    """`filters` with each DNF predicate replaced by `conform(predicate)`, in the shape they came in
    (one conjunction or a list of them); expressions and no filters are left as they are."""
    disjuncts = _disjuncts(filters)
    if disjuncts is None:
        return filters
    conformed = [[conform(t) for t in conj] for conj in disjuncts]
    return conformed[0] if isinstance(filters[0], tuple) else conformed  # type: ignore[index]


def _integral(value: Any) -> bool:
    return not isinstance(value, float) or value.is_integer()


def _finite(t: tuple[str, str, Any], values: Sequence[Any]) -> None:
    if any(isinstance(v, float) and not math.isfinite(v) for v in values):
        raise ConfigError(f"filter {t!r}: {t[0]!r} holds integers, which compare with no NaN or infinity")


def check_filters_fit(filters: Filters, schema: pa.Schema | None, *, meta_fields: bool = True) -> None:
    """ConfigError naming the filters when they do not fit the table's columns (an unknown column, a
    literal of a type the column cannot be compared with): found before any file is read, where
    pyarrow's own error would name neither the filter nor the table. `meta_fields`: False for a table
    written without them (virtual keys), whose `_hoodie_*` columns hold nothing to filter on (a filter
    on them matched the stored nulls of some files and the computed keys of others)."""
    expression = to_expression(filters)
    if expression is None or schema is None:
        return
    if not meta_fields:
        named = [c for c in META_COLUMNS if c in str(expression)]
        if named:
            raise ConfigError(
                f"filters={filters!r} name {named}, which a table written without meta fields "
                "(hoodie.populate.meta.fields=false) does not store: filter on the record key and partition fields"
            )
    try:
        with_meta(schema).empty_table().filter(expression)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        reason = str(exc).splitlines()[0]
        raise ConfigError(f"filters={filters!r} do not fit the table's columns {schema.names}: {reason}") from None


def check_columns_fit(columns: Sequence[str] | None, schema: pa.Schema | None) -> None:
    """ConfigError naming the asked-for columns the table does not have (meta columns always exist),
    before any file is read; on a table nothing was written to, every data column is unknown."""
    if columns is None:
        return
    known = set(with_meta(schema).names) if schema is not None else set(META_COLUMNS)
    unknown = [c for c in columns if c not in known]
    if not unknown:
        return
    if schema is None:
        raise ConfigError(f"columns {unknown} are not known yet: nothing was written to the table (no schema)")
    raise ConfigError(f"columns {unknown} are not columns of the table; its columns: {schema.names}")


def _disjuncts(filters: Filters) -> list[list[tuple[str, str, Any]]] | None:
    dnf = parse_filters(filters)  # refuses, naming them, filters that are no DNF tuples
    if dnf is None:
        return None
    return [[(p.column, p.op, p.value) for p in conjunction] for conjunction in dnf]


def partition_pruner(filters: Filters, config: TableConfig, schema: pa.Schema | None):
    """A predicate on partition paths, or None when the filters say nothing about partitions."""
    disjuncts = _disjuncts(filters)
    if not disjuncts or not config.is_partitioned:
        return None
    fields = set(config.partition_fields)
    if any(not any(t[0] in fields for t in conj) for conj in disjuncts):
        return None  # some disjunct does not constrain partitions: nothing can be pruned
    if config.key_generator.name == "TIMESTAMP":
        return None

    def typed(name: str, raw: str) -> Any:
        if schema is not None and name in schema.names:
            kind = schema.field(name).type
            if pa.types.is_timestamp(kind) and raw.lstrip("-").isdigit():  # Hudi's number of the unit (`key_text`)
                return pa.scalar(int(raw), pa.timestamp(key_unit(kind), kind.tz)).cast(kind).as_py()
            try:
                return pa.scalar(raw).cast(schema.field(name).type).as_py()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return raw
        return raw

    def accept(partition_path: str) -> bool:
        if partition_path.count("/") + 1 != len(config.partition_fields):
            # a value holding '/', which Hudi writes as nested folders when values are not URL-encoded:
            # which folders make which value is unknown here, so the partition is never ruled out
            return True
        values = partition_filter_values(partition_path, config)  # decoded when URL-encoded
        if DEFAULT_PARTITION in values.values():
            # The default folder holds nulls, empty strings and the literal default name alike:
            # its rows' values are unknown here, so it is never ruled out.
            return True
        row = {name: [typed(name, raw)] for name, raw in values.items()}
        table = pa.table(row) if row else None
        if table is None:
            return True
        for conj in disjuncts:
            own = [t for t in conj if t[0] in fields]
            try:
                expr = to_expression(own)
                if table.filter(expr).num_rows:
                    return True
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError, ValueError):
                return True
        return False

    return accept
