"""Read predicates: the `filters` `Table.read` takes, as an OR of ANDs of per-column predicates.

`filters` are DNF tuples, as pyarrow.parquet takes them: `[(col, op, value), ...]` (an
AND) or `[[...], [...]]` (an OR of ANDs). Besides pyarrow's operators (`=`, `==`, `!=`,
`<`, `<=`, `>`, `>=`, `in`, `not in`) lakeward accepts:

- `(col, "is null", None)` and `(col, "is not null", None)`;
- `(col, "like", pattern)`: SQL LIKE (`%` any run, `_` one character, `\\` escapes),
  case-sensitive, as pyarrow's `match_like`;
- `(col, "match", text)`: every word of `text` occurs as a word of the value;
- `(col, "phrase", text)`: the words of `text` occur consecutively in the value.

`match` and `phrase` split text into words the way the `text` index does (runs of
letters and digits) and compare them lower-cased, so they are case-insensitive, with or
without an index. A pyarrow Expression as `filters` is applied as it is; it is never
turned into index predicates (such reads scan).
"""

from __future__ import annotations

import decimal
import numbers
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.exceptions import ConfigError

#: Operators that pyarrow.parquet's DNF filters know.
STANDARD_OPS = frozenset({"=", "==", "!=", "<", "<=", ">", ">=", "in", "not in"})
#: Operators lakeward adds.
EXTENDED_OPS = frozenset({"is null", "is not null", "like", "match", "phrase"})
RANGE_OPS = frozenset({"<", "<=", ">", ">="})
TEXT_MATCH_FUNCTION = "lakeward_text_match"
TEXT_PHRASE_FUNCTION = "lakeward_text_phrase"


@dataclass(frozen=True)
class ColumnPredicate:
    """One comparison of one column with a literal; `op` normalised (`==` is `=`, lower case)."""

    column: str
    op: str
    value: Any = None

    def __str__(self) -> str:
        if self.op in ("is null", "is not null"):
            return f"{self.column} {self.op}"
        return f"{self.column} {self.op} {self.value!r}"


#: An OR of ANDs of column predicates (disjunctive normal form).
Dnf: TypeAlias = tuple[tuple[ColumnPredicate, ...], ...]


def _normalise(item: Any) -> ColumnPredicate:
    if not (isinstance(item, tuple | list) and len(item) == 3 and isinstance(item[0], str)):
        raise ConfigError(f"filter {item!r} is not a (column, op, value) tuple")
    column, op, value = item
    name = str(op).strip().lower()
    if name == "==":
        name = "="
    if name not in STANDARD_OPS and name not in EXTENDED_OPS:
        raise ConfigError(f"filter {item!r}: op {op!r} is not one of {sorted(STANDARD_OPS | EXTENDED_OPS)}")
    if name in ("in", "not in"):
        if isinstance(value, str | bytes) or not isinstance(value, Sequence | set | frozenset | pa.Array):
            raise ConfigError(f"filter {item!r}: {name!r} takes a list of values")
        value = tuple(value.to_pylist() if isinstance(value, pa.Array) else value)
    if name in ("is null", "is not null") and value not in (None, ""):
        raise ConfigError(f"filter {item!r}: {name!r} takes no value; write ({column!r}, {name!r}, None)")
    if name in ("like", "match", "phrase") and not isinstance(value, str):
        raise ConfigError(f"filter {item!r}: {name!r} takes a string")
    return ColumnPredicate(column, name, value)


def parse_filters(filters: Any) -> Dnf | None:
    """The filters as DNF column predicates; None for no filters or a pyarrow Expression."""
    if filters is None or isinstance(filters, pc.Expression):
        return None
    if not isinstance(filters, Sequence) or isinstance(filters, str | bytes):
        raise ConfigError(f"filters={filters!r} are neither DNF tuples nor a pyarrow Expression")
    if not filters:
        return None
    if isinstance(filters, tuple) and filters and isinstance(filters[0], str):
        raise ConfigError(
            f"filters={filters!r} is one predicate: pass a list of them, filters=[{filters!r}] (DNF tuples)"
        )
    first = filters[0]
    if isinstance(first, tuple) or (isinstance(first, list) and first and isinstance(first[0], str)):
        return (tuple(_normalise(t) for t in filters),)
    out = []
    for conjunction in filters:
        if not isinstance(conjunction, Sequence) or isinstance(conjunction, str) or not conjunction:
            raise ConfigError(f"filters={filters!r}: each disjunct must be a non-empty list of (column, op, value)")
        out.append(tuple(_normalise(t) for t in conjunction))
    return tuple(out)


# -- exact evaluation -------------------------------------------------------------------------
def predicate_expression(p: ColumnPredicate) -> pc.Expression:
    """The exact pyarrow expression of one predicate (what a full scan applies)."""
    field = pc.field(p.column)
    op, value = p.op, p.value
    if op == "=":
        return field == value
    if op == "!=":
        return field != value
    if op == "<":
        return field < value
    if op == "<=":
        return field <= value
    if op == ">":
        return field > value
    if op == ">=":
        return field >= value
    if op == "in":
        return _in_expression(field, list(value))
    if op == "not in":
        return ~_in_expression(field, list(value))
    if op == "is null":
        return field.is_null()
    if op == "is not null":
        return field.is_valid()
    if op == "like":
        return pc.match_like(field, value)
    if op in ("match", "phrase"):
        register_text_functions()
        name = TEXT_MATCH_FUNCTION if op == "match" else TEXT_PHRASE_FUNCTION
        return pc.Expression._call(name, [field.cast(pa.string()), pa.scalar(value, pa.string())])
    raise ConfigError(f"unknown filter op {op!r}")


def _in_expression(field: pc.Expression, values: list[Any]) -> pc.Expression:
    """`field in values`, where None matches the null rows (as `is_in` without skipping nulls does).

    NaN is asked for on its own: `is_in` accepts it, but Parquet statistics leave NaN out of
    min/max and the dataset scan prunes on them, while no statistic rules out `is_nan`. None is
    asked for with `is_null`: a value set of None alone has no type the column's can match."""
    nan = any(isinstance(v, float) and v != v for v in values)
    null = any(v is None for v in values)
    rest = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
    parts = [field.isin(rest)] if rest or not (nan or null) else []
    if nan:
        parts.append(pc.is_nan(field) & field.is_valid())  # false, not null, on a null row (as is_in)
    if null:
        parts.append(field.is_null())
    return reduce(lambda a, b: a | b, parts)


def dnf_expression(dnf: Dnf) -> pc.Expression:
    return reduce(
        lambda a, b: a | b, [reduce(lambda a, b: a & b, [predicate_expression(p) for p in conj]) for conj in dnf]
    )


def filters_to_expression(filters: Any) -> pc.Expression | None:
    """`filters` (DNF tuples with lakeward's extra operators, or an Expression) as one pyarrow Expression."""
    if filters is None or isinstance(filters, pc.Expression):
        return filters
    dnf = parse_filters(filters)
    return None if dnf is None else dnf_expression(dnf)


# -- words: the text index's tokenizer, shared with exact evaluation ---------------------------
_local = threading.local()


def text_analyzer() -> Any:
    """Tantivy's simple tokenizer (runs of letters and digits) with lower-casing, no length limit.

    The text index is built with exactly this analyzer and `match` / `phrase` are
    evaluated with it, so index answers and scans agree word for word.
    """
    analyzer = getattr(_local, "analyzer", None)
    if analyzer is None:
        # lazy: tantivy loads only for text indexes
        import tantivy

        analyzer = tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple()).filter(tantivy.Filter.lowercase()).build()
        _local.analyzer = analyzer
    return analyzer


def words(text: str) -> list[str]:
    return list(text_analyzer().analyze(text))


def _contains_phrase(tokens: list[str], phrase: list[str]) -> bool:
    n = len(phrase)
    return any(tokens[i : i + n] == phrase for i in range(len(tokens) - n + 1))


def text_mask(values: pa.Array | pa.ChunkedArray, query: str, phrase: bool) -> pa.Array:
    """Per value: does it match the words of `query` (all of them; consecutively for a phrase)? Null stays null."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.dictionary_decode()
    wanted = words(query)
    if not len(values):
        return pa.array([], pa.bool_())
    distinct = pc.unique(values)
    hits = np.zeros(len(distinct), dtype=bool)
    for i, value in enumerate(distinct.to_pylist()):
        if value is None:
            continue
        tokens = words(value)
        if phrase:
            hits[i] = bool(wanted) and _contains_phrase(tokens, wanted)
        else:
            present = set(tokens)
            hits[i] = bool(wanted) and all(w in present for w in wanted)
    positions = pc.index_in(values, value_set=distinct)
    result = pa.array(hits).take(positions)
    return pc.if_else(pc.is_null(values), pa.scalar(None, pa.bool_()), result)


_registered = False
_register_lock = threading.Lock()


def register_text_functions() -> None:
    """Register `match` / `phrase` as pyarrow scalar functions (once per process), usable in Expressions."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        for name, phrase in ((TEXT_MATCH_FUNCTION, False), (TEXT_PHRASE_FUNCTION, True)):

            def fn(ctx: Any, values: Any, query: Any, _phrase: bool = phrase) -> pa.Array:
                text = query[0].as_py() if isinstance(query, pa.Array) else query.as_py()
                if isinstance(values, pa.Scalar):
                    values = pa.array([values.as_py()], values.type)
                return text_mask(values, text, _phrase)

            doc = {"summary": f"lakeward {'phrase' if phrase else 'word'} match", "description": "see predicates.py"}
            try:
                pc.register_scalar_function(fn, name, doc, {"values": pa.string(), "query": pa.string()}, pa.bool_())
            except pa.ArrowKeyError:
                pass  # registered already
        _registered = True


# -- literals --------------------------------------------------------------------------------
def literal(value: Any, data_type: pa.DataType) -> pa.Scalar | None:
    """`value` as a scalar of the column's type; None when it is not exactly one (the index or the
    statistics then do not answer, and the exact filter decides what it means).

    Not exactly one: a conversion that changes the value (5.5 on an integer column, 0.1 on a float32
    column, a datetime on a date column, a time zone-less datetime on a UTC column) and NaN. Answering
    with the converted value would drop rows the exact filter keeps: it compares in the wider type.
    """
    if pa.types.is_dictionary(data_type):
        data_type = data_type.value_type
    try:
        if isinstance(value, pa.Scalar):
            value = value.as_py()
        scalar = pa.scalar(value, type=data_type)
        if not scalar.is_valid:
            return None
        converted = scalar.as_py()
        if type(converted) is not type(value) and not (_is_number(converted) and _is_number(value)):
            return None  # e.g. a datetime taken as a date: a different value, whatever == says
        if not converted == value:  # also NaN, which equals nothing
            return None
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return None
    return scalar


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number | decimal.Decimal) and not isinstance(value, bool)


def like_prefix(pattern: str) -> str | None:
    """The literal prefix of a LIKE pattern that starts with one and ends in `%` (e.g. 'Buying%');
    None for other patterns (escapes, `_`, a leading wildcard, a `%` in the middle)."""
    if "\\" in pattern or "_" in pattern or not pattern.endswith("%"):
        return None
    prefix = pattern.rstrip("%")
    if not prefix or "%" in prefix:
        return None
    return prefix
