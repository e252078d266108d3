"""Persisting the changes of merge-on-read delta commits into `.cdc` files.

A delta commit's log append writes no change data; its changes are inferred from the log
when read (LOG_FILE). Compaction, which folds those logs into a new base file, and the
change-tracking service persist them first, one `.cdc` file per file group with one
block per delta commit, so CDC queries read them as they are (AS_IS) and the logs may be
cleaned with their slice.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import pyarrow as pa

from lakeward.core.cdc.changes import fold_log_changes
from lakeward.core.cdc.records import cdc_block, write_cdc_file
from lakeward.core.config.cdc import SupplementalLoggingMode
from lakeward.core.file_group.file_group import FileSlice
from lakeward.core.file_group.reader import MergeSettings, SliceContents, VisibleInstants, read_slice_contents
from lakeward.core.storage import Storage


def persist_slice_changes(
    storage: Storage,
    file_slice: FileSlice,
    visible: VisibleInstants,
    full_schema: pa.Schema,
    settings: MergeSettings,
    mode: SupplementalLoggingMode,
    table_avro_schema_json: str,
    *,
    keep: Callable[[str], bool],
    base_instant_time: str,
    write_token: str,
    before_create: Callable[[str], None] | None = None,
    instants: Collection[str] | None = None,
    version: int = 1,
    contents: SliceContents | None = None,
) -> tuple[str, int, list[str]] | None:
    """Write the changes of the slice's delta commits that `keep` accepts into one `.cdc` file.

    The file is named for the slice at `base_instant_time` (the slice itself, or the new
    slice a compaction writes) with `write_token`. Returns (path, size, instants persisted),
    or None when no kept delta commit changed anything. `instants` limits the fold's output
    to those instants (all blocks are still applied in order). `contents`: the slice as a
    caller already read it (compaction), so its files are not read a second time.
    """
    if contents is None:
        contents = read_slice_contents(storage, file_slice, visible)
    by_instant = fold_log_changes(
        contents.base, contents.blocks, full_schema, settings, frozenset(instants) if instants is not None else None
    )
    kept = [(t, changes) for t, changes in sorted(by_instant.items()) if keep(t) and changes.num_rows]
    if not kept:
        return None
    cdc_blocks = [cdc_block(changes, t, mode, table_avro_schema_json) for t, changes in kept]
    path, size = write_cdc_file(
        storage,
        file_slice.partition_path,
        file_slice.file_id,
        base_instant_time,
        write_token,
        cdc_blocks,
        before_create,
        version,
    )
    return path, size, [t for t, _ in kept]
