"""Secondary index definitions: which columns are indexed, by which index type, with which options.

The definitions of a table are one JSON document, `.hoodie/.index/definitions.json`,
rewritten whole (atomically) under the table lock by `create_index` and `drop_index`.
Nothing else of Hudi's reads it: Hudi readers see a folder under `.hoodie/` they do not
know and ignore it.

Every definition carries a random `id`. Index files record the id of the definition
they were built for, so files of a dropped index never answer for a new index that
reuses its name.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import pyarrow as pa

from lakeward.core.config.values import parse_bool
from lakeward.core.exceptions import ConfigError, CorruptTableError, IndexExistsError, IndexNotFoundError
from lakeward.core.schema import META_COLUMNS
from lakeward.core.storage import Storage
from lakeward.core.timeline import METAFOLDER

INDEX_FOLDER = posixpath.join(METAFOLDER, ".index")
DEFINITIONS_PATH = posixpath.join(INDEX_FOLDER, "definitions.json")
DEFINITIONS_VERSION = 1
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


class IndexType(str, Enum):
    """Index implementations, by the name users give (`index_type=`)."""

    BITMAP = "bitmap"
    TEXT = "text"

    @classmethod
    def parse(cls, value: str | IndexType) -> IndexType:
        if isinstance(value, IndexType):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ConfigError(
                f"index_type={value!r} is not known; use one of {', '.join(t.value for t in cls)}"
            ) from None


#: Options every index type takes, with their defaults (see `IndexOptions`).
OPTION_DEFAULTS: dict[str, Any] = {
    "auto_build": False,
    "max_selectivity": 0.3,
    "max_in_values": 1024,
}


@dataclass(frozen=True)
class IndexOptions:
    """What users tune per index (`options={...}` of `create_index`).

    - `auto_build` (false): compaction and clustering build this index for the base files
      they write, as part of their own execution.
    - `max_selectivity` (0.3): a base file is read through the index only when the rows the
      index selects are at most this fraction of the file; above it, a scan is cheaper.
    - `max_in_values` (1024): an `in` predicate with more values than this is not looked
      up in the index (the file is scanned instead).
    """

    auto_build: bool = False
    max_selectivity: float = 0.3
    max_in_values: int = 1024

    @classmethod
    def parse(cls, options: Mapping[str, Any] | None) -> IndexOptions:
        opts = dict(options or {})
        unknown = sorted(set(opts) - set(OPTION_DEFAULTS))
        if unknown:
            raise ConfigError(f"unknown index option(s) {unknown}; known: {sorted(OPTION_DEFAULTS)}")
        auto = parse_bool(opts.get("auto_build", False), "index option auto_build")
        try:
            selectivity = float(opts.get("max_selectivity", OPTION_DEFAULTS["max_selectivity"]))
            in_values = int(opts.get("max_in_values", OPTION_DEFAULTS["max_in_values"]))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"index options {opts!r} are not valid: {exc}") from None
        if not 0.0 < selectivity <= 1.0:
            raise ConfigError(f"index option max_selectivity={selectivity} must be in (0, 1]")
        if in_values < 1:
            raise ConfigError(f"index option max_in_values={in_values} must be at least 1")
        return cls(auto, selectivity, in_values)

    def to_json(self) -> dict[str, Any]:
        return {
            "auto_build": self.auto_build,
            "max_selectivity": self.max_selectivity,
            "max_in_values": self.max_in_values,
        }


@dataclass(frozen=True)
class IndexDefinition:
    """One secondary index: a name, its type, the columns it indexes and its options."""

    name: str
    index_type: IndexType
    columns: tuple[str, ...]
    options: IndexOptions = field(default_factory=IndexOptions)
    #: Random id fixed at creation; index files carry it (a dropped and recreated name never mixes).
    id: str = ""
    #: The table's latest instant when the index was created (informational).
    created_at: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "index_type": self.index_type.value,
            "columns": list(self.columns),
            "options": self.options.to_json(),
            "id": self.id,
            "created_at": self.created_at,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> IndexDefinition:
        return cls(
            str(d["name"]),
            IndexType.parse(str(d["index_type"])),
            tuple(str(c) for c in d["columns"]),
            IndexOptions.parse(d.get("options")),
            str(d.get("id") or ""),
            str(d.get("created_at") or ""),
        )


def supports_type(index_type: IndexType, data_type: pa.DataType) -> bool:
    """Whether an index of `index_type` can index a column of `data_type`."""
    t = data_type.value_type if pa.types.is_dictionary(data_type) else data_type
    if index_type is IndexType.TEXT:
        return pa.types.is_string(t) or pa.types.is_large_string(t)
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_time(t)
        or pa.types.is_decimal(t)
    )


def new_definition(
    name: str,
    columns: str | Sequence[str],
    index_type: str | IndexType,
    options: Mapping[str, Any] | None,
    schema: pa.Schema | None,
    existing: Sequence[IndexDefinition],
    created_at: str = "",
) -> IndexDefinition:
    """Validate a new index against the table schema and the existing definitions."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError(
            f"index name {name!r} is not valid: start with a letter, then letters, digits, '_' or '-' (at most 64)"
        )
    if any(d.name == name for d in existing):
        raise IndexExistsError(f"an index named {name!r} already exists on the table; drop it first or pick another")
    kind = IndexType.parse(index_type)
    cols = (columns,) if isinstance(columns, str) else tuple(columns)
    if not cols:
        raise ConfigError(f"index {name!r} needs at least one column")
    if len(set(cols)) != len(cols):
        raise ConfigError(f"index {name!r} lists a column twice: {list(cols)}")
    if schema is None:
        raise ConfigError(f"cannot create index {name!r}: the table has no schema yet (write data first)")
    for column in cols:
        if column in META_COLUMNS:
            raise ConfigError(f"index {name!r}: meta column {column!r} cannot be indexed")
        if column not in schema.names:
            raise ConfigError(f"index {name!r}: column {column!r} is not in the table; it has {schema.names}")
        data_type = schema.field(column).type
        if not supports_type(kind, data_type):
            what = "string columns" if kind is IndexType.TEXT else "scalar columns (numbers, strings, dates, ...)"
            raise ConfigError(
                f"index {name!r}: column {column!r} has type {data_type}, which a {kind.value} index does not "
                f"support; {kind.value} indexes take {what}"
            )
    return IndexDefinition(name, kind, cols, IndexOptions.parse(options), uuid.uuid4().hex[:16], created_at)


def load_definitions(storage: Storage) -> list[IndexDefinition]:
    """The table's index definitions, in creation order ([] when none was ever created)."""
    try:
        data = storage.read_bytes(DEFINITIONS_PATH)
    except FileNotFoundError:
        return []
    try:
        doc = json.loads(data)
        return [IndexDefinition.from_json(d) for d in doc.get("indexes", [])]
    except (ValueError, KeyError, TypeError, ConfigError) as exc:
        raise CorruptTableError(f"{storage.uri_of(DEFINITIONS_PATH)} cannot be read: {exc}") from exc


def save_definitions(storage: Storage, definitions: Sequence[IndexDefinition]) -> None:
    """Replace the definitions document (whole, atomically: readers see the old or the new one)."""
    doc = {"version": DEFINITIONS_VERSION, "indexes": [d.to_json() for d in definitions]}
    storage.write_bytes(DEFINITIONS_PATH, json.dumps(doc, indent=2, sort_keys=True).encode())


def find_definition(definitions: Sequence[IndexDefinition], name: str) -> IndexDefinition:
    for d in definitions:
        if d.name == name:
            return d
    known = [d.name for d in definitions]
    raise IndexNotFoundError(f"no index named {name!r} on the table; its indexes: {known}")
