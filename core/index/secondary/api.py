"""The standard secondary index API over a table: create, drop, show, build, status, read, explain.

`Table` exposes these as methods (`create_index`, `drop_index`, `indexes`, `index_status`,
`schedule_index_build`, `run_index_build`, `explain`); the CLI and the daemon call them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.view import FileSystemView
from lakeward.core.index.secondary.build import IndexFileStat, build_base_file_indexes
from lakeward.core.index.secondary.definitions import (
    IndexDefinition,
    find_definition,
    load_definitions,
    new_definition,
    save_definitions,
)
from lakeward.core.index.secondary.predicates import parse_filters
from lakeward.core.index.secondary.read import IndexReadExplain, SlicePlan, plan_read, read_planned
from lakeward.core.index.secondary.storage import (
    IndexCatalog,
    committed_instants,
    delete_index_files_named,
    list_index_files,
    pending_index_builds,
)
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline

if TYPE_CHECKING:
    from lakeward.core.context import HoldsTableContext

log = logging.getLogger(__name__)


def create_index(
    table: HoldsTableContext,
    schema: pa.Schema | None,
    name: str,
    columns: str | Sequence[str],
    index_type: str,
    options: Mapping[str, Any] | None,
) -> IndexDefinition:
    """Define a new index (under the table lock). Its files are built by index builds (or auto_build).

    Refused on a table without meta fields (virtual keys): index files map values to the stored
    `_hoodie_record_key`, which such tables leave null.
    """
    ctx = table.table_context
    if not ctx.config.populate_meta_fields:
        raise ConfigError(
            f"table {ctx.storage.uri} is written without meta fields (hoodie.populate.meta.fields=false): "
            "secondary indexes need the stored record keys; nothing was created"
        )
    storage = ctx.storage
    with ctx.lock:
        existing = load_definitions(storage)
        latest = ctx.timeline().latest_time() or ""
        definition = new_definition(name, columns, index_type, options, schema, existing, latest)
        save_definitions(storage, [*existing, definition])
    log.info("created %s index %s on %s", definition.index_type.value, name, list(definition.columns))
    return definition


def drop_index(table: HoldsTableContext, name: str) -> list[str]:
    """Remove an index definition, then its files; returns the files removed."""
    ctx = table.table_context
    storage = ctx.storage
    with ctx.lock:
        existing = load_definitions(storage)
        find_definition(existing, name)
        save_definitions(storage, [d for d in existing if d.name != name])
    removed = delete_index_files_named(storage, [name])
    log.info("dropped index %s (%d file(s) removed)", name, len(removed))
    return removed


@dataclass(frozen=True)
class BaseFileIndexStatus:
    partition_path: str
    file_id: str
    base_file: str
    #: index name -> the instant whose index file covers this base file (None: not indexed yet)
    indexed_by: dict[str, str | None]


@dataclass(frozen=True)
class IndexStatus:
    """Which latest base files are indexed by which index, and which are not yet."""

    indexes: tuple[IndexDefinition, ...]
    base_files: tuple[BaseFileIndexStatus, ...]
    pending_builds: tuple[str, ...] = ()
    index_bytes: dict[str, int] = field(default_factory=dict)

    def indexed(self, name: str) -> list[str]:
        return [b.base_file for b in self.base_files if b.indexed_by.get(name)]

    def missing(self, name: str | None = None) -> list[str]:
        """Base files lacking an index file of `name` (any index, when None)."""
        names = [name] if name is not None else [d.name for d in self.indexes]
        return [b.base_file for b in self.base_files if any(not b.indexed_by.get(n) for n in names)]

    def summary(self) -> list[dict[str, Any]]:
        """One row per index: name, type, columns, base files indexed / total, bytes."""
        total = len(self.base_files)
        return [
            {
                "name": d.name,
                "index_type": d.index_type.value,
                "columns": list(d.columns),
                "auto_build": d.options.auto_build,
                "indexed_base_files": len(self.indexed(d.name)),
                "base_files": total,
                "index_bytes": self.index_bytes.get(d.name, 0),
            }
            for d in self.indexes
        ]


def index_status(storage: Storage, timeline: Timeline) -> IndexStatus:
    definitions = load_definitions(storage)
    files = list_index_files(storage)
    catalog = IndexCatalog(files, _committed(timeline))
    view = FileSystemView.load(storage, timeline)
    rows = []
    for s in view.latest_file_slices():
        if s.base_file is None:
            continue
        covered: dict[str, str | None] = {}
        for d in definitions:
            found = catalog.find(d.name, s.base_file)
            covered[d.name] = found.instant_time if found is not None else None
        rows.append(BaseFileIndexStatus(s.partition_path, s.file_id, s.base_file.path, covered))
    sizes: dict[str, int] = {}
    for f in files:
        sizes[f.index_name] = sizes.get(f.index_name, 0) + f.size
    return IndexStatus(tuple(definitions), tuple(rows), tuple(pending_index_builds(timeline)), sizes)


def _committed(timeline: Timeline) -> Any:
    return committed_instants(timeline)


@dataclass(frozen=True)
class IndexRead:
    """How a read goes through the secondary indexes: each slice's choice and, for the slices
    read through an index, the row ids and row groups to read (a row selection)."""

    explain: IndexReadExplain
    plans: tuple[SlicePlan, ...]


def plan_index_read(
    storage: Storage,
    timeline: Timeline,
    slices: Sequence[FileSlice],
    filters: Any,
    read_optimized: bool = False,
    *,
    use_index: bool = True,
    explain: bool = False,
) -> IndexRead | None:
    """How the indexes would serve a read of `slices` with `filters` (index files are consulted, no data read).

    None when no index can apply (no filters, no index defined, filters that are not DNF
    tuples): the read scans every slice. With `explain`, always the per-slice choices, each
    saying why (a table without indexes included).
    """
    if explain:
        definitions = load_definitions(storage)
    else:
        definitions = load_definitions(storage) if use_index and filters is not None else []
        if not definitions or parse_filters(filters) is None:
            return None
    catalog = IndexCatalog.load(storage, timeline)
    choices, plans = plan_read(storage, slices, filters, definitions, catalog, read_optimized)
    return IndexRead(choices, tuple(plans))


def read_slices(
    storage: Storage,
    timeline: Timeline,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None,
    filters: Any,
    *,
    use_index: bool = True,
    **read_options: Any,
) -> pa.Table:
    """A snapshot read of `slices` (local engine), through the table's secondary indexes when they apply.

    `read_options`: `instants`, `merge`, `read_optimized`, as `read_planned` takes them.
    """
    read_optimized = bool(read_options.get("read_optimized"))
    planned = plan_index_read(storage, timeline, slices, filters, read_optimized, use_index=use_index)
    plans = planned.plans if planned is not None else ()
    return read_planned(storage, slices, plans, schema, columns, filters, **read_options)


def explain(
    storage: Storage, timeline: Timeline, slices: Sequence[FileSlice], filters: Any, read_optimized: bool = False
) -> IndexReadExplain:
    """How a read of `slices` with `filters` would read each slice: through an index or by scanning, and why."""
    planned = plan_index_read(storage, timeline, slices, filters, read_optimized, explain=True)
    assert planned is not None
    return planned.explain


def build_indexes_of_written_files(
    storage: Storage, instant_time: str, paths: Sequence[str], engine: Engine
) -> list[IndexFileStat]:
    """Compaction and clustering: build the `auto_build` indexes of the base files an instant wrote.

    Called before the instant completes, so its index files are committed with its base files.
    """
    definitions = tuple(d for d in load_definitions(storage) if d.options.auto_build)
    bases = [p for p in paths if p.endswith(".parquet")]
    if not definitions or not bases:
        return []
    uri, options = storage.uri, tuple(sorted(storage.options.items()))

    def task(path: str) -> list[IndexFileStat]:
        return build_base_file_indexes(Storage.for_uri(uri, dict(options)), path, definitions, instant_time)

    per_file = engine.map(task, bases, f"auto-build indexes of {instant_time}")
    stats = [s for file_stats in per_file for s in file_stats]
    log.info("instant %s: built %d index file(s) for %d base file(s)", instant_time, len(stats), len(bases))
    return stats
