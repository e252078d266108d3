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
from lakeward.core.index.secondary.predicates import filters_to_expression, parse_filters
from lakeward.core.index.secondary.read import IndexReadExplain, plan_read, read_with_indexes
from lakeward.core.index.secondary.storage import (
    IndexCatalog,
    committed_instants,
    delete_index_files_named,
    list_index_files,
    pending_index_builds,
)
from lakeward.core.read.merge_on_read import MergeSettings, VisibleInstants
from lakeward.core.read.snapshot import read_file_slices
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline

if TYPE_CHECKING:
    from lakeward.core.write.client import WriteClient

log = logging.getLogger(__name__)


def create_index(
    client: WriteClient,
    schema: pa.Schema | None,
    name: str,
    columns: str | Sequence[str],
    index_type: str,
    options: Mapping[str, Any] | None,
) -> IndexDefinition:
    """Define a new index (under the table lock). Its files are built by index builds (or auto_build)."""
    storage = client.storage
    with client.lock:
        existing = load_definitions(storage)
        latest = Timeline.load(storage).latest_time() or ""
        definition = new_definition(name, columns, index_type, options, schema, existing, latest)
        save_definitions(storage, [*existing, definition])
    log.info("created %s index %s on %s", definition.index_type.value, name, list(definition.columns))
    return definition


def drop_index(client: WriteClient, name: str) -> list[str]:
    """Remove an index definition, then its files; returns the files removed."""
    storage = client.storage
    with client.lock:
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


def read_slices(
    storage: Storage,
    timeline: Timeline,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None,
    filters: Any,
    *,
    instants: VisibleInstants | None = None,
    merge: MergeSettings | None = None,
    read_optimized: bool = False,
    use_index: bool = True,
) -> pa.Table:
    """A snapshot read of `slices` (local engine), through the table's secondary indexes when they apply."""
    definitions = load_definitions(storage) if use_index and filters is not None else []
    if not definitions or parse_filters(filters) is None:
        return read_file_slices(
            storage,
            slices,
            schema,
            columns,
            filters_to_expression(filters),
            instants=instants,
            merge=merge,
            read_optimized=read_optimized,
        )
    catalog = IndexCatalog.load(storage, timeline)
    table, _ = read_with_indexes(
        storage,
        slices,
        schema,
        columns,
        filters,
        definitions,
        catalog,
        instants=instants,
        merge=merge,
        read_optimized=read_optimized,
    )
    return table


def explain(
    storage: Storage, timeline: Timeline, slices: Sequence[FileSlice], filters: Any, read_optimized: bool = False
) -> IndexReadExplain:
    definitions = load_definitions(storage)
    catalog = IndexCatalog.load(storage, timeline)
    result, _ = plan_read(storage, slices, filters, definitions, catalog, read_optimized)
    return result


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
