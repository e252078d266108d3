"""CDC queries: every change of every completed commit in (begin, end], one row per change.

The range is in instant time on table version 6 and in completion time on 8+ (Hudi 1.x):
the plan (`extract.plan_change_splits`) picks the commits, and each one's changes are all
kept, whatever their `ts_ms` (on 8+ it may be at or before `begin`).

Output columns (as Hudi's CDC query): `op` (`i`, `u`, `d`), `ts_ms` (the commit's
instant time), `before` and `after` (row images without `_hoodie_*` columns; JSON
strings by default, typed structs with `images="struct"`), ordered by commit time, then
record key (a delete before an insert of the same key in one commit).

The range is checked first (`check_change_range`): only completed, active, retained
instants after CDC was switched on can be queried, and errors say which can.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from lakeward.core.cdc.changes import AFTER, BEFORE, KEY, OP, OP_RANK, TS, empty_changes
from lakeward.core.cdc.extract import ChangeSplit, by_file_group, file_group_changes
from lakeward.core.config.cdc import CDC_ENABLED_KEY, SupplementalLoggingMode
from lakeward.core.config.table import TableConfig
from lakeward.core.engine import Engine
from lakeward.core.exceptions import ConfigError, InstantNotFoundError
from lakeward.core.file_group.reader import MergeSettings
from lakeward.core.schema import META_COLUMNS, with_meta
from lakeward.core.storage import Storage
from lakeward.core.timeline import Timeline

Images = Literal["json", "struct"]
#: `begin` values meaning "from the start of the queryable history" (Hudi users pass "000").
EARLIEST = "earliest"


def is_earliest(begin: str) -> bool:
    return begin == EARLIEST or (begin.isdigit() and set(begin) == {"0"})


def check_change_range(
    timeline: Timeline, config: TableConfig, begin: str, end: str | None, archived: bool
) -> tuple[str, str | None]:
    """Validate a CDC range and resolve "earliest"; returns (begin, end) as instant times.

    `archived`: the table has an archived timeline (instants before the active one are gone).
    """
    if not config.cdc_enabled:
        raise ConfigError(
            f"table {config.name} does not have CDC enabled ({CDC_ENABLED_KEY}=false): create it with "
            f"{CDC_ENABLED_KEY}=true or call Table.enable_cdc(); until then only latest_state incremental "
            "reads are possible"
        )
    completed = [i.time for i in timeline.completed_writes()]
    first_active = timeline.instants[0].time if timeline.instants else None
    floor = config.cdc_since or ""
    if archived and first_active is not None:
        floor = max(floor, first_active)
    queryable = [t for t in completed if t >= floor]
    span = f"{queryable[0]} .. {queryable[-1]}" if queryable else "none yet"
    from_earliest = is_earliest(begin)
    if from_earliest:
        begin = floor or "0" * 17
        if archived and floor == first_active and completed and completed[0] == first_active:
            begin = _just_before(first_active)  # the first active commit is retained: the range holds it
    if end is not None and end < begin:
        raise InstantNotFoundError(f"CDC range is empty: begin {begin} is after end {end}")
    pending = {i.time for i in timeline.pending_writes()}
    if begin in pending:
        raise InstantNotFoundError(
            f"begin instant {begin} is not completed yet; completed instants that can begin a CDC query: {span}"
        )
    if config.cdc_since and begin < config.cdc_since:
        raise InstantNotFoundError(
            f"CDC was enabled on table {config.name} after instant {config.cdc_since}; changes before it were "
            f"not captured: begin at or after {config.cdc_since} (queryable instants: {span})"
        )
    if archived and first_active is not None and begin < first_active and not from_earliest:
        raise InstantNotFoundError(
            f"begin instant {begin} is archived (the active timeline starts at {first_active}); only active "
            f"instants can begin a CDC query: {span}"
        )
    if end is not None and end in pending:
        raise InstantNotFoundError(f"end instant {end} is not completed yet; completed instants: {span}")
    return begin, end


def _just_before(instant_time: str) -> str:
    """The greatest time of the same width below `instant_time`: an exclusive begin that keeps it."""
    return str(int(instant_time) - 1).zfill(len(instant_time))


def folds_logs(config: TableConfig) -> bool:
    """Whether merge-on-read changes are folded from retained logs even where `.cdc` files hold
    them: when the logging mode persists no after-images, which the logs would be read for anyway."""
    return config.cdc_mode is not SupplementalLoggingMode.DATA_BEFORE_AFTER


@dataclass(frozen=True)
class _FileGroupTask:
    """The changes of one file group's splits (each file read once), picklable for Spark tasks."""

    storage_uri: str
    storage_options: tuple[tuple[str, str], ...]
    full_schema: pa.Schema
    settings: MergeSettings

    def __call__(self, splits: tuple[ChangeSplit, ...]) -> pa.Table:
        storage = Storage.for_uri(self.storage_uri, dict(self.storage_options))
        return file_group_changes(storage, splits, self.full_schema, self.settings)


def collect_changes(
    storage: Storage,
    config: TableConfig,
    schema: pa.Schema,
    begin: str,
    end: str | None,
    splits: Sequence[ChangeSplit],
    engine: Engine,
) -> pa.Table:
    """The changes (`changes.change_schema`, images without `_hoodie_*` columns: `shown_images`) of
    the planned `splits` (`plan_change_splits`) of completed commits in (begin, end], sorted; each
    file group's splits run as one `engine` task. The plan decides which commits are in the
    range (on 8+ by completion time): rows are not compared with `begin` and `end`, whose
    `ts_ms` is the commit's instant time (`extract.of_planned_instants`)."""
    full_schema = with_meta(schema)
    task = _FileGroupTask(
        storage.uri, tuple(sorted(storage.options.items())), full_schema, MergeSettings.from_config(config)
    )
    groups = by_file_group(splits, pack_new=True)
    parts = engine.map(task, groups, f"CDC ({begin}, {end or 'latest'}]") if groups else []
    changes = pa.concat_tables([empty_changes(full_schema), *parts])
    changes = shown_images(changes)
    changes = changes.combine_chunks()
    return changes.take(change_order(changes))


def change_order(changes: pa.Table) -> pa.Array:
    """The indices that sort `changes` by commit time, then record key, then op (`OP_RANK`).

    The commit times are sorted as their positions among the distinct times (a query spans a
    few commits): comparing small integers first, not 17-character strings, and sorting
    columns of one chunk each, takes ~35% less CPU than the string sort over the chunks
    (~0.16 -> 0.10 s for 300,000 changes); the order is the same.
    """
    times = changes.column(TS).combine_chunks()
    distinct = pc.unique(times)
    distinct = distinct.take(pc.sort_indices(distinct))
    rank = pc.fill_null(pc.index_in(changes.column(OP), value_set=pa.array(list(OP_RANK))), 9)
    keys = pa.table(
        {TS: pc.index_in(times, value_set=distinct), KEY: changes.column(KEY).combine_chunks(), "_rank": rank}
    )
    return pc.sort_indices(keys, sort_keys=[(TS, "ascending"), (KEY, "ascending"), ("_rank", "ascending")])


def shown_images(changes: pa.Table) -> pa.Table:
    """`changes` with images holding only the columns a CDC query shows (no `_hoodie_*` columns):
    what the sort and the output then carry."""
    image_type = changes.schema.field(BEFORE).type
    data_names = [f.name for f in image_type if f.name not in META_COLUMNS]
    if len(data_names) == image_type.num_fields:
        return changes
    for name in (BEFORE, AFTER):
        images = changes.column(name)
        # One chunk: each chunk's struct costs ~0.1 ms of Arrow calls, and a query has a chunk
        # per split (the sort combines them afterwards anyway).
        chunks = [images.combine_chunks()] if images.num_chunks > 1 else images.chunks
        shown = [_data_images(chunk, data_names) for chunk in chunks]
        changes = changes.set_column(
            changes.schema.get_field_index(name), name, pa.chunked_array(shown, _image_type(image_type, data_names))
        )
    return changes


def _image_type(image_type: pa.StructType, data_names: list[str]) -> pa.StructType:
    return pa.struct([image_type.field(n) for n in data_names])


def _data_images(images: pa.Array, data_names: list[str]) -> pa.StructArray:
    struct = images if isinstance(images, pa.StructArray) else pa.array(images)
    fields = [struct.type.field(n) for n in data_names]
    arrays = [struct.field(n) for n in data_names]
    return pa.StructArray.from_arrays(arrays, fields=fields, mask=pc.invert(pc.is_valid(struct)))


def _json(images: pa.StructArray) -> pa.Array:
    if len(images) == 0:
        return pa.array([], pa.string())
    import polars as pl  # lazy: polars takes ~0.15 s to import, too slow for CLI start-up

    encoded = pl.Series(values=pl.from_arrow(images)).struct.json_encode().to_arrow()
    return pc.if_else(pc.is_valid(images), pc.cast(encoded, pa.string()), pa.scalar(None, pa.string()))


def format_changes(changes: pa.Table, images: Images = "json") -> pa.Table:
    """The user-facing columns `op`, `ts_ms`, `before`, `after` (images without meta columns)."""
    if images not in ("json", "struct"):
        raise ConfigError(f"images={images!r} must be 'json' or 'struct'")
    changes = shown_images(changes)
    columns: dict[str, pa.Array] = {OP: changes.column(OP).combine_chunks(), TS: changes.column(TS).combine_chunks()}
    for name in (BEFORE, AFTER):
        data = changes.column(name).combine_chunks()
        columns[name] = _json(data) if images == "json" else data
    return pa.table(columns)
