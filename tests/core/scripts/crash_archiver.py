"""Run one archival and freeze at a chosen point, for a SIGKILL test.

Usage: python crash_archiver.py <table path> <point> <options json> [<rows json>]

With `<rows json>` the script upserts those rows instead, and the points are those of the
archival of the metadata table the write's inline metadata-table services run (after the data
commit completed): `after_history_file` and `after_some_deletes`.

Points: `after_archive_file` (the archive file is written, no timeline file deleted yet),
`after_some_deletes` (a few of the archived instants' timeline files are deleted); on table
versions 8+ (the LSM history): `after_history_file` (data file, manifest and `_version_`
written, no timeline file deleted), `before_version_file` (data file and manifest written,
`_version_` still naming the previous snapshot), `before_merge_manifest` (the LSM compaction
after the archival wrote its merged file, not the manifest that lists it), `before_history_clean`
(the merge is published, the files it replaced are still on storage). The
script prints `REACHED <point>` and sleeps until the parent kills it; `FINISHED` (exit 3)
if the archival ended without reaching the point.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pyarrow as pa
from freeze_points import after, before, freeze  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.archival as archival_mod
import lakeward.core.timeline.lsm_writer as lsm_writer_mod
from lakeward.core.table import Table


def _deleting(point: str, nth: int) -> None:
    calls = [0]
    original = archival_mod.instant_path

    def wrapper(instant: Any) -> str:
        calls[0] += 1
        if calls[0] == nth:  # the (nth-1) files before this one are deleted
            freeze(point)
        return original(instant)

    archival_mod.instant_path = wrapper  # type: ignore[assignment]


def main() -> int:
    path, point, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    rows = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
    if point == "after_archive_file":
        archival_mod._write_archive_file = after(point, archival_mod._write_archive_file)  # type: ignore[assignment]
    elif point == "after_history_file":
        archival_mod.append_history_file = after(point, archival_mod.append_history_file)  # type: ignore[assignment]
    elif point == "before_version_file":
        lsm_writer_mod.publish_version = before(point, lsm_writer_mod.publish_version)  # type: ignore[assignment]
    elif point == "before_merge_manifest":  # the archival's own manifest is the first one published
        lsm_writer_mod._publish_manifest = before(point, lsm_writer_mod._publish_manifest, nth=2)  # type: ignore[assignment]
    elif point == "before_history_clean":
        lsm_writer_mod._clean_history = before(point, lsm_writer_mod._clean_history)  # type: ignore[assignment]
    elif point == "after_some_deletes":
        _deleting(point, 5)
    else:
        raise SystemExit(f"unknown point {point}")
    if rows is None:
        Table.open(path, options=options).archive()
    else:
        Table.open(path, options=options).upsert(pa.Table.from_pylist(rows))
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
