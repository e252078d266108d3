"""Run one upsert and freeze at a chosen point of the commit protocol, for a SIGKILL test.

Usage: python crash_writer.py <table path> <point> <batch.parquet>

The hooks are installed in this (child) process only, by wrapping module attributes of
lakeward from the outside. When the writer reaches `<point>` the script prints
`REACHED <point>` on stdout and sleeps until the parent test kills it with SIGKILL. If the
write finishes without reaching the point, it prints `FINISHED` and exits with status 3.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import pyarrow.parquet as pq
from freeze_points import after, before  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.metadata_table.compaction as mdt_compaction_mod
import lakeward.core.metadata_table.delta_commit as mdt_writer_mod
import lakeward.core.table_services.rollback as rollback_mod
import lakeward.core.write.client as client_mod
import lakeward.core.write.handles as handles_mod
import lakeward.core.write.plane.local as local_plane_mod
from lakeward.core.table import Table

HOOKS: dict[str, Callable[[str], None]] = {
    # the requested instant exists, nothing else
    "after_requested": lambda p: setattr(client_mod, "create_requested", after(p, client_mod.create_requested)),
    # the inflight instant exists, no data file yet
    "after_inflight": lambda p: setattr(
        client_mod, "transition_to_inflight", after(p, client_mod.transition_to_inflight)
    ),
    # one data file written, the second one has a marker but no file yet
    "marker_without_file": lambda p: setattr(handles_mod, "create_marker", after(p, handles_mod.create_marker, 2)),
    # the first base file's rows written into its stream, its footer not
    "mid_base_file": lambda p: setattr(pq.ParquetWriter, "write_table", after(p, pq.ParquetWriter.write_table)),
    # merge-on-read: the first log file appended, more file groups to come
    "after_first_log_file": lambda p: setattr(handles_mod, "append_to_log", after(p, handles_mod.append_to_log)),
    # two data files written (of more), before completion
    "after_two_files": lambda p: setattr(
        local_plane_mod, "write_file_group", after(p, local_plane_mod.write_file_group, 2)
    ),
    # every data file written, right before the completed instant is published
    "before_complete": lambda p: setattr(client_mod, "complete", before(p, client_mod.complete)),
    # a rollback of an earlier failed write: its files deleted, its instant files not yet
    "rollback_files_deleted": lambda p: setattr(
        rollback_mod, "delete_pending_files", before(p, rollback_mod.delete_pending_files)
    ),
    # a rollback of an earlier failed write, right before the rollback instant completes
    "rollback_before_complete": lambda p: setattr(rollback_mod, "complete", before(p, rollback_mod.complete)),
    # metadata table: its delta commit of the write is requested, nothing else
    "mdt_requested": lambda p: setattr(mdt_writer_mod, "create_requested", after(p, mdt_writer_mod.create_requested)),
    # metadata table: its log file of the write is written, its delta commit not completed
    "mdt_log_written": lambda p: setattr(mdt_writer_mod, "complete", before(p, mdt_writer_mod.complete)),
    # (`before_complete` on a table with a metadata table: its delta commit completed, the write's not)
    # a rollback of an earlier failed write: the metadata table's delta commit rolled back (its
    # rollback instant completed), the data table's rollback not completed
    "rollback_mdt_rolled_back": lambda p: setattr(rollback_mod, "complete", after(p, rollback_mod.complete)),
    # the write completed; the metadata table's inline compaction is planned (requested), not run
    "mdt_compaction_requested": lambda p: setattr(
        mdt_compaction_mod, "create_requested", after(p, mdt_compaction_mod.create_requested)
    ),
    # the metadata compaction's base HFile is written, its commit not completed
    "mdt_compaction_base_written": lambda p: setattr(
        mdt_compaction_mod, "complete", before(p, mdt_compaction_mod.complete)
    ),
}


def main() -> int:
    path, point, batch_path = sys.argv[1:4]
    HOOKS[point](point)
    # One write thread: the order of file-group writes (and so the hook's n-th call) is fixed.
    table = Table.open(path, options={"hoodie.upsert.shuffle.parallelism": 1})
    table.upsert(pq.read_table(batch_path))
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
