"""Snapshot reads through secondary indexes: predicates -> row-id sets -> only those rows.

For every file slice of the read (after partition pruning):

1. the filters become an OR of ANDs of column predicates (`predicates.parse_filters`);
2. the slice's base file is looked up in the index catalog, per index whose columns the
   predicates use (only committed index files built for this very base file count);
3. each answerable predicate gives a set of row ids from its index file; an AND
   intersects the sets of its answerable predicates (the others are left to the exact
   filter), an OR unites its branches (a branch without any answerable predicate makes
   the slice a scan);
4. the slice is read through the index only when the set is at most `max_selectivity`
   of the file's rows: then only the Parquet row groups holding those rows are read, the
   rows are taken, and the exact filter is applied to them. Otherwise, and for base
   files without an index (not built yet), the slice is scanned as usual.

Merge-on-read slices with log files: the base rows the index selects plus every base row
whose key the visible log blocks touch are merged with the log, then filtered. A base
row the index leaves out does not match and no log record replaces it, so the merged
result is exactly that of a full merge and filter.

The index answers with a superset of the matching rows (exactly the matching rows for
the bitmap index, words ignoring case for the text index); the exact filter is always
applied to the rows read, so results equal a full scan's.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyroaring import BitMap

from lakeward.core.engine.local import LocalEngine
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.log_file import DataBlock, DeleteBlock
from lakeward.core.file_group.log_file.content import DELETE_RECORD_KEY
from lakeward.core.file_group.reader import (
    DICTIONARY_META_COLUMNS,
    MergeSettings,
    VisibleInstants,
    aligned_schema,
    dictionary_meta,
    merge_log_blocks,
    read_file_slices,
    visible_log_blocks,
)
from lakeward.core.index.secondary.bitmap import BitmapIndexFile
from lakeward.core.index.secondary.definitions import IndexDefinition, IndexType
from lakeward.core.index.secondary.predicates import (
    ColumnPredicate,
    Dnf,
    dnf_expression,
    filters_to_expression,
    parse_filters,
)
from lakeward.core.index.secondary.storage import IndexCatalog
from lakeward.core.index.secondary.text import TextIndexFile
from lakeward.core.merge import RECORD_KEY
from lakeward.core.schema import META_SCHEMA, with_meta
from lakeward.core.storage import Storage

#: Which operators each index type answers.
ANSWERS: dict[IndexType, frozenset[str]] = {
    IndexType.BITMAP: frozenset({"=", "!=", "in", "not in", "<", "<=", ">", ">=", "is null", "is not null", "like"}),
    IndexType.TEXT: frozenset({"match", "phrase", "like", "="}),
}

#: Up to this many candidate rows, taking them from decoded row groups costs no more than a scan.
FEW_ROWS = 64

INDEX = "index"
SCAN = "scan"
MERGE = "merge"
MERGE_INDEX = "merge+index"


@dataclass
class SliceChoice:
    """How one file slice is read, and why."""

    partition_path: str
    file_id: str
    base_file: str | None
    mode: str
    reason: str
    indexes: tuple[str, ...] = ()
    candidate_rows: int | None = None
    total_rows: int | None = None
    row_groups_read: int | None = None
    row_groups_total: int | None = None
    index_bytes_read: int = 0
    #: Filled by a read: rows decoded from Parquet for this slice (base file only).
    rows_decoded: int | None = None


@dataclass
class IndexReadExplain:
    """What a read chose per file slice (`Table.explain`)."""

    predicates: str
    slices: list[SliceChoice] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, mode: str) -> int:
        return sum(1 for s in self.slices if s.mode == mode)

    @property
    def uses_index(self) -> bool:
        return any(s.mode in (INDEX, MERGE_INDEX) for s in self.slices)

    def __str__(self) -> str:
        lines = [
            f"filters: {self.predicates}",
            f"file slices: {len(self.slices)} ({self.count(INDEX)} via index, {self.count(MERGE_INDEX)} merged via "
            f"index, {self.count(SCAN)} scanned, {self.count(MERGE)} merged)",
        ]
        for s in self.slices:
            where = f"{s.partition_path}/{s.file_id}" if s.partition_path else s.file_id
            extra = ""
            if s.candidate_rows is not None:
                extra = f" rows {s.candidate_rows}/{s.total_rows}"
            if s.row_groups_read is not None:
                extra += f" row groups {s.row_groups_read}/{s.row_groups_total}"
            used = f" [{', '.join(s.indexes)}]" if s.indexes else ""
            lines.append(f"  {where}: {s.mode}{used}{extra} - {s.reason}")
        return "\n".join(lines)


@dataclass
class SlicePlan:
    """How one file slice is read: the choice, and for index reads the row ids and row groups to read."""

    choice: SliceChoice
    file_slice: FileSlice
    rows: BitMap | None = None
    row_groups: list[int] = field(default_factory=list)


class _OpenIndexes:
    """Index files of one base file opened for one read (closed at the end)."""

    def __init__(self, storage: Storage):
        self.storage = storage
        self.files: dict[str, Any] = {}
        self.sources: list[Any] = []

    def open(self, definition: IndexDefinition, path: str, size: int) -> Any:
        found = self.files.get(path)
        if found is None:
            source = self.storage.open_input_file(path)
            self.sources.append(source)
            if definition.index_type is IndexType.BITMAP:
                found = BitmapIndexFile(source, size, path)
            else:
                found = TextIndexFile(source, size, path, self.storage.uri)
            self.files[path] = found
        return found

    @property
    def bytes_read(self) -> int:
        return sum(f.bytes_read for f in self.files.values())

    def close(self) -> None:
        for source in self.sources:
            source.close()


def _evaluate(
    dnf: Dnf,
    answerers: dict[str, list[tuple[IndexDefinition, Any]]],
    num_rows: int,
    max_rows: int,
    used: set[str],
) -> BitMap | None:
    """Row ids that may match `dnf` from the index files (None: some branch has no answerable predicate)."""
    result = BitMap()
    for conjunction in dnf:
        found: BitMap | None = None
        for predicate in conjunction:
            ids = _answer(predicate, answerers.get(predicate.column, []), max_rows, used)
            if ids is None:
                continue
            found = ids if found is None else found & ids
            if not found:
                break
        if found is None:
            return None
        result |= found
    return result


def _answer(
    p: ColumnPredicate, candidates: list[tuple[IndexDefinition, Any]], max_rows: int, used: set[str]
) -> BitMap | None:
    for definition, index_file in candidates:
        if p.op not in ANSWERS[definition.index_type]:
            continue
        if p.op in ("in", "not in") and len(p.value) > definition.options.max_in_values:
            continue
        ids = index_file.lookup(p, max_rows)
        if ids is not None:
            used.add(definition.name)
            return ids
    return None


def _row_groups_of(ids: BitMap, row_group_rows: Sequence[int]) -> list[int]:
    if not ids:
        return []
    starts = np.concatenate([[0], np.cumsum(row_group_rows)[:-1]]).astype(np.int64)
    positions = np.fromiter(iter(ids), dtype=np.int64, count=len(ids))
    groups = np.searchsorted(starts, positions, side="right") - 1
    return sorted(set(int(g) for g in np.unique(groups)))


def plan_slice(
    storage: Storage,
    file_slice: FileSlice,
    dnf: Dnf,
    definitions: Sequence[IndexDefinition],
    catalog: IndexCatalog,
    read_optimized: bool,
) -> SlicePlan:
    """Decide how to read one file slice; looks up the index files it would use."""
    base = file_slice.base_file
    has_logs = bool(file_slice.log_files) and not read_optimized
    fallback = MERGE if has_logs else SCAN
    choice = SliceChoice(file_slice.partition_path, file_slice.file_id, base.path if base else None, fallback, "")
    if base is None:
        choice.reason = "no base file yet (log files only)"
        return SlicePlan(choice, file_slice)
    columns = {p.column for conj in dnf for p in conj}
    relevant = [d for d in definitions if columns & set(d.columns)]
    if not relevant:
        choice.reason = "no index on the filtered columns"
        return SlicePlan(choice, file_slice)
    opened = _OpenIndexes(storage)
    try:
        answerers: dict[str, list[tuple[IndexDefinition, Any]]] = {}
        missing = []
        num_rows = None
        row_group_rows: list[int] = []
        for definition in relevant:
            found = catalog.find(definition.name, base)
            if found is None:
                missing.append(definition.name)
                continue
            index_file = opened.open(definition, found.path, found.size)
            if index_file.definition_id != definition.id:
                missing.append(definition.name)  # built for an earlier index of the same name
                continue
            num_rows = index_file.num_rows
            row_group_rows = index_file.row_groups
            for column in definition.columns:
                answerers.setdefault(column, []).append((definition, index_file))
        if num_rows is None:
            choice.reason = f"base file not indexed yet ({', '.join(missing)})"
            return SlicePlan(choice, file_slice)
        limit = max(d.options.max_selectivity for d in relevant)
        max_rows = int(limit * num_rows)
        used: set[str] = set()
        ids = _evaluate(dnf, answerers, num_rows, max_rows, used)
        choice.index_bytes_read = opened.bytes_read
        choice.total_rows = num_rows
        choice.row_groups_total = len(row_group_rows)
        if ids is None:
            choice.reason = "the indexes cannot answer every branch of the filters"
            return SlicePlan(choice, file_slice)
        choice.candidate_rows = len(ids)
        choice.indexes = tuple(sorted(used))
        if len(ids) > max_rows:
            choice.reason = f"index selects {len(ids)} of {num_rows} rows (more than max_selectivity {limit})"
            return SlicePlan(choice, file_slice)
        groups = _row_groups_of(ids, row_group_rows)
        choice.row_groups_read = len(groups)
        if not has_logs and len(ids) > FEW_ROWS and len(groups) == len(row_group_rows):
            # Every row group holds candidates: the index saves no reading, and the scan (which
            # filters as it decodes) is faster than decoding whole row groups to take many rows.
            choice.reason = f"the {len(ids)} candidate row(s) lie in every row group: nothing to skip"
            return SlicePlan(choice, file_slice)
        choice.mode = MERGE_INDEX if has_logs else INDEX
        choice.reason = "selective predicate on an indexed column"
        return SlicePlan(choice, file_slice, ids, groups)
    finally:
        opened.close()


def _conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` in `schema`: its columns cast, the ones it lacks as nulls."""
    arrays = []
    for f in schema:
        if f.name in table.column_names:
            column = table.column(f.name)
            arrays.append(column if column.type == f.type else column.cast(f.type))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


_FOOTERS: OrderedDict[tuple[str, str], pq.FileMetaData] = OrderedDict()
_FOOTERS_LOCK = threading.Lock()
_FOOTERS_MAX = 64


def _footer(storage: Storage, path: str) -> pq.FileMetaData:
    """A base file's Parquet footer, cached: base files never change, and Hudi's footers carry
    a bloom filter (often a megabyte) that would otherwise be read again for every lookup."""
    key = (storage.uri, path)
    with _FOOTERS_LOCK:
        found = _FOOTERS.get(key)
        if found is not None:
            _FOOTERS.move_to_end(key)
            return found
    with storage.open_input_file(path) as source:
        found = pq.read_metadata(source)
    with _FOOTERS_LOCK:
        _FOOTERS[key] = found
        while len(_FOOTERS) > _FOOTERS_MAX:
            _FOOTERS.popitem(last=False)
    return found


def _read_rows(storage: Storage, path: str, ids: BitMap, groups: list[int], columns: list[str] | None) -> pa.Table:
    """Rows `ids` of a base file: only the row groups holding them are decoded."""
    footer = _footer(storage, path)
    with storage.open_input_file(path) as source:
        parquet = pq.ParquetFile(source, metadata=footer, read_dictionary=list(DICTIONARY_META_COLUMNS))
        present = parquet.schema_arrow.names
        wanted = present if columns is None else [c for c in present if c in set(columns)]
        metadata = parquet.metadata
        sizes = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
        if not groups:
            return parquet.schema_arrow.empty_table().select(wanted)
        table = parquet.read_row_groups(groups, columns=wanted)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    positions = np.fromiter(iter(ids), dtype=np.int64, count=len(ids))
    group_of = np.searchsorted(starts, positions, side="right") - 1
    offsets_in_read = {g: off for g, off in zip(groups, np.concatenate([[0], np.cumsum([sizes[g] for g in groups])]))}
    local = positions - starts[group_of] + np.array([offsets_in_read[int(g)] for g in group_of], dtype=np.int64)
    return table.take(pa.array(local))


def _touched_keys(blocks: Sequence[DataBlock | DeleteBlock]) -> pa.Array:
    keys = []
    for block in blocks:
        if isinstance(block, DataBlock):
            keys.append(block.records.column(RECORD_KEY).combine_chunks().cast(pa.string()))
        else:
            keys.append(block.records.column(DELETE_RECORD_KEY).combine_chunks().cast(pa.string()))
    return pc.unique(pa.concat_arrays(keys)) if keys else pa.array([], pa.string())


def _dataset_schema(storage: Storage, slices: Sequence[FileSlice], schema: pa.Schema | None) -> pa.Schema:
    """The schema `read_file_slices` gives these slices (the newest base file's, plus missing table columns)."""
    paths = [s.base_file.path for s in slices if s.base_file is not None]
    if paths:
        newest = max(paths, key=lambda p: p.rsplit("_", 1)[-1]) if schema is not None else paths[-1]
        physical = _footer(storage, newest).schema.to_arrow_schema().remove_metadata()
        return dictionary_meta(physical) if schema is None else aligned_schema(physical, schema)
    return dictionary_meta(with_meta(schema) if schema is not None else META_SCHEMA)


def _read_planned(
    storage: Storage,
    plan: SlicePlan,
    dataset_schema: pa.Schema,
    wanted: list[str] | None,
    expression: pc.Expression,
    filter_columns: set[str],
    instants: VisibleInstants | None,
    merge: MergeSettings,
) -> pa.Table:
    base = plan.file_slice.base_file
    assert base is not None and plan.rows is not None
    if plan.choice.mode == INDEX:
        needed = None
        if wanted is not None:
            needed = [c for c in dataset_schema.names if c in set(wanted) | filter_columns]
        if not plan.rows:  # no row of this file can match: not even its footer is read
            plan.choice.rows_decoded = 0
            empty = dataset_schema.empty_table()
            return empty.select(wanted) if wanted is not None else empty
        rows = _read_rows(storage, base.path, plan.rows, plan.row_groups, needed)
        plan.choice.rows_decoded = _rows_in(storage, base.path, plan.row_groups)
        target = dataset_schema if needed is None else pa.schema([dataset_schema.field(c) for c in needed])
        rows = _conform(rows, target).filter(expression)
        return rows.select(wanted) if wanted is not None else rows
    assert instants is not None
    blocks = visible_log_blocks(storage, plan.file_slice.log_files, instants)
    touched = _touched_keys(blocks)
    ids = BitMap(plan.rows)
    if len(touched):
        with storage.open_input_file(base.path) as source:
            keys = pq.ParquetFile(source).read(columns=[RECORD_KEY]).column(RECORD_KEY)
        hit = pc.is_in(keys, value_set=touched).to_numpy(zero_copy_only=False)
        ids.update(np.flatnonzero(hit).astype(np.uint32))
    groups = _row_groups_of(ids, _group_sizes(storage, base.path))
    base_rows = _read_rows(storage, base.path, ids, groups, None)
    plan.choice.rows_decoded = _rows_in(storage, base.path, groups)
    merged = merge_log_blocks(base_rows, blocks, dataset_schema, merge).cast(dataset_schema).filter(expression)
    return merged.select(wanted) if wanted is not None else merged


def _group_sizes(storage: Storage, path: str) -> list[int]:
    metadata = _footer(storage, path)
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def _rows_in(storage: Storage, path: str, groups: Sequence[int]) -> int:
    sizes = _group_sizes(storage, path)
    return sum(sizes[g] for g in groups)


def plan_read(
    storage: Storage,
    slices: Sequence[FileSlice],
    filters: Any,
    definitions: Sequence[IndexDefinition],
    catalog: IndexCatalog,
    read_optimized: bool = False,
) -> tuple[IndexReadExplain, list[SlicePlan]]:
    """How each slice would be read (index files are consulted; no data is read)."""
    started = time.monotonic()
    dnf = parse_filters(filters)
    text = "none" if filters is None else ("expression (not used with indexes)" if dnf is None else _dnf_text(dnf))
    explain = IndexReadExplain(text)
    if dnf is None or not definitions:
        for s in slices:
            mode = MERGE if s.log_files and not read_optimized else SCAN
            reason = "no secondary index on the table" if not definitions else "no DNF filters to answer"
            choice = SliceChoice(s.partition_path, s.file_id, s.base_file.path if s.base_file else None, mode, reason)
            explain.slices.append(choice)
        return explain, [SlicePlan(c, s) for c, s in zip(explain.slices, slices)]
    plans = LocalEngine().map(
        lambda s: plan_slice(storage, s, dnf, definitions, catalog, read_optimized), list(slices), "plan index read"
    )
    explain.slices = [p.choice for p in plans]
    explain.seconds = time.monotonic() - started
    return explain, plans


def _dnf_text(dnf: Dnf) -> str:
    return " OR ".join("(" + " AND ".join(str(p) for p in conj) + ")" for conj in dnf)


def read_with_indexes(
    storage: Storage,
    slices: Sequence[FileSlice],
    schema: pa.Schema | None,
    columns: Sequence[str] | None,
    filters: Any,
    definitions: Sequence[IndexDefinition],
    catalog: IndexCatalog,
    *,
    instants: VisibleInstants | None = None,
    merge: MergeSettings | None = None,
    read_optimized: bool = False,
) -> tuple[pa.Table, IndexReadExplain]:
    """The rows of `slices` that match `filters`, read through the indexes where they pay, and what was chosen.

    The result equals `read_file_slices(storage, slices, schema, columns, filters_to_expression(filters), ...)`
    (up to row order).
    """
    explain, plans = plan_read(storage, slices, filters, definitions, catalog, read_optimized)
    table = read_planned(
        storage,
        slices,
        plans,
        schema,
        columns,
        filters,
        instants=instants,
        merge=merge,
        read_optimized=read_optimized,
    )
    return table, explain


def read_planned(
    storage: Storage,
    slices: Sequence[FileSlice],
    plans: Sequence[SlicePlan],
    schema: pa.Schema | None,
    columns: Sequence[str] | None,
    filters: Any,
    *,
    instants: VisibleInstants | None = None,
    merge: MergeSettings | None = None,
    read_optimized: bool = False,
) -> pa.Table:
    """The rows of `slices` matching `filters`, each slice read as `plans` (from `plan_read`)
    chose: through its index, or scanned."""
    indexed = [p for p in plans if p.choice.mode in (INDEX, MERGE_INDEX)]
    if not indexed:
        expression = filters_to_expression(filters)
        return read_file_slices(
            storage, slices, schema, columns, expression, instants=instants, merge=merge, read_optimized=read_optimized
        )
    dnf = parse_filters(filters)
    assert dnf is not None
    exact = dnf_expression(dnf)
    filter_columns = {p.column for conj in dnf for p in conj}
    dataset_schema = _dataset_schema(storage, slices, schema)
    wanted = list(columns) if columns is not None else None
    settings = merge or MergeSettings()
    rest = [p.file_slice for p in plans if p.choice.mode not in (INDEX, MERGE_INDEX)]
    parts: list[pa.Table] = []
    if rest:
        scanned = read_file_slices(
            storage, rest, schema, columns, exact, instants=instants, merge=settings, read_optimized=read_optimized
        )
        target = dataset_schema if wanted is None else pa.schema([dataset_schema.field(c) for c in wanted])
        parts.append(_conform(scanned, target))
    parts.extend(
        LocalEngine().map(
            lambda p: _read_planned(storage, p, dataset_schema, wanted, exact, filter_columns, instants, settings),
            indexed,
            "read via secondary index",
        )
    )
    table = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    return table.replace_schema_metadata(None)
