"""The LSM archived timeline of timeline layout 2 (`.hoodie/timeline/history/`): write side.

Archival on table versions 8+ appends instants to the LSM tree as Hudi 1.x's
`LSMTimelineWriter` does (format reference §2.6; the read side is `lsm_history.py`):

1. one layer-0 data file `<first instant>_<last instant>_0.parquet` holding one
   `HoodieLSMTimelineInstant` row per archived instant (`MetadataConversionUtils.
   createLSMTimelineInstant`: `action` is the completed action, `metadata` the completed
   file's bytes or null when empty, `plan` the requested plan of a clean, compaction, log
   compaction, clustering or replacecommit — for the last two the inflight content instead
   when that is not empty), written with Avro write support (the Avro schema in the footer
   under `parquet.avro.schema`);
2. `manifest_<N+1>`: the previous manifest's files plus the new one, `{"files": [{"fileName",
   "fileLen"}]}`;
3. `_version_` = N+1, deleted and recreated.

Each step is only visible through the next one, so a writer killed in between leaves an
unreferenced data file or manifest that the rerun overwrites (it runs under the table lock).
LSM compaction of layer-0 files into higher layers is left to Hudi (readers take any number
of layer-0 files).
"""

from __future__ import annotations

import io
import json
import posixpath
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.storage import Storage
from lakeward.core.timeline.instant import Action, Instant, State
from lakeward.core.timeline.lsm_history import (
    MANIFEST_PREFIX,
    VERSION_FILE,
    latest_snapshot_version,
    manifest_files,
)
from lakeward.core.timeline.transitions import instant_path

#: `HoodieLSMTimelineInstant.avsc` (version 1), as Hudi 1.x writes it.
LSM_INSTANT_AVRO_SCHEMA = {
    "type": "record",
    "name": "HoodieLSMTimelineInstant",
    "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "instantTime", "type": ["null", "string"], "default": None},
        {"name": "completionTime", "type": ["null", "string"], "default": None},
        {"name": "action", "type": ["null", "string"], "default": None},
        {"name": "metadata", "type": ["null", "bytes"], "default": None},
        {"name": "plan", "type": ["null", "bytes"], "default": None},
        {"name": "version", "type": "int", "default": 1},
    ],
}
#: The parquet schema parquet-avro derives from it (optional columns, a required int32 `version`).
LSM_INSTANT_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ],
    metadata={"parquet.avro.schema": json.dumps(LSM_INSTANT_AVRO_SCHEMA), "writer.model.name": "avro"},
)
LSM_INSTANT_VERSION = 1

#: Pending actions whose requested file is the instant's plan in the history.
_PLANNED = frozenset({Action.CLEAN, Action.COMPACTION, Action.LOG_COMPACTION, Action.CLUSTERING, Action.REPLACE_COMMIT})
_INFLIGHT_PLAN = frozenset({Action.CLUSTERING, Action.REPLACE_COMMIT})


def _read_or_none(storage: Storage, instant: Instant) -> bytes | None:
    try:
        return storage.read_bytes(instant_path(instant)) or None
    except FileNotFoundError:
        return None


def history_row(storage: Storage, files: Sequence[Instant]) -> dict[str, object]:
    """The history row of one completed instant from its timeline files (requested .. completed)."""
    completed = next(f for f in files if f.state is State.COMPLETED)
    plan = None
    for f in files:
        if f.action in _PLANNED and f.state is State.REQUESTED and plan is None:
            plan = _read_or_none(storage, f)
        if f.action in _INFLIGHT_PLAN and f.state is State.INFLIGHT:
            plan = _read_or_none(storage, f) or plan
    return {
        "instantTime": completed.time,
        "completionTime": completed.completion_time,
        "action": completed.action.completed_action.value,
        "metadata": _read_or_none(storage, completed),
        "plan": plan,
        "version": LSM_INSTANT_VERSION,
    }


def append_history_file(storage: Storage, folder: str, rows: list[dict[str, object]]) -> str:
    """Write `rows` (oldest first) as a new layer-0 file of the LSM history in `folder`, then
    the next manifest and `_version_`; the data file's path (relative to the base path)."""
    name = f"{rows[0]['instantTime']}_{rows[-1]['instantTime']}_0.parquet"
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=LSM_INSTANT_SCHEMA), buffer)
    path = posixpath.join(folder, name)
    storage.write_bytes(path, buffer.getvalue())
    version = latest_snapshot_version(storage, folder) or 0
    listed = manifest_files(storage, folder, version) if version else []
    # the sizes the last manifest gives (one request per file on S3 otherwise), the new file's measured
    sizes = {f.name: f.length for f in listed if f.name != name}
    sizes[name] = None
    entries = [
        {"fileName": n, "fileLen": size if size is not None else storage.size(posixpath.join(folder, n))}
        for n, size in sizes.items()
    ]
    manifest = json.dumps({"files": entries}).encode()
    storage.write_bytes(posixpath.join(folder, f"{MANIFEST_PREFIX}{version + 1}"), manifest)
    publish_version(storage, folder, version + 1)
    return path


def publish_version(storage: Storage, folder: str, version: int) -> None:
    """Make snapshot `version` the history's latest: `_version_` deleted and written again, as Java does."""
    storage.delete_file(posixpath.join(folder, VERSION_FILE))
    storage.write_bytes(posixpath.join(folder, VERSION_FILE), str(version).encode())


__all__ = ["LSM_INSTANT_AVRO_SCHEMA", "LSM_INSTANT_SCHEMA", "append_history_file", "history_row", "publish_version"]
