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

After each archival the tree is compacted and cleaned as `LSMTimelineWriter.compactAndClean`
does (`compact_and_clean`), so that a long-lived table's history stays a few files a reader
loads, not one file per archival run:

4. while a layer holds `hoodie.timeline.compaction.batch.size` files (default 10), its oldest
   ones (by name, which starts with the min instant; at most that many, and no more once
   they add up to over 1,000 MB) are merged, rows in file order, into
   `<min>_<max>_<layer + 1>.parquet`, published as the next manifest without them; then the
   next layer is looked at;
5. the newest 3 snapshots, plus one per merge just made, are kept: older manifests are
   deleted, then every data file none of the kept manifests lists, so a reader that loaded a
   slightly older manifest still finds its files.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lakeward.core.storage import Storage
from lakeward.core.timeline.instant import Action, Instant, State
from lakeward.core.timeline.lsm_history import (
    MANIFEST_PREFIX,
    VERSION_FILE,
    HistoryFile,
    data_file_names,
    latest_snapshot_version,
    manifest_files,
    read_history_file,
    snapshot_versions,
)
from lakeward.core.timeline.transitions import instant_path

log = logging.getLogger(__name__)

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
    _write_data_file(storage, posixpath.join(folder, name), pa.Table.from_pylist(rows, schema=LSM_INSTANT_SCHEMA))
    version = latest_snapshot_version(storage, folder) or 0
    listed = manifest_files(storage, folder, version) if version else []
    _publish_manifest(storage, folder, version, [f for f in listed if f.name != name], name)
    return posixpath.join(folder, name)


def _write_data_file(storage: Storage, path: str, rows: pa.Table) -> None:
    buffer = io.BytesIO()
    pq.write_table(rows, buffer)
    storage.write_bytes(path, buffer.getvalue())


def _publish_manifest(storage: Storage, folder: str, version: int, kept: Sequence[HistoryFile], added: str) -> int:
    """Write `manifest_<version + 1>` listing `kept` then `added`, and make it the latest; the new version."""
    # the sizes the last manifest gives (one request per file on S3 otherwise), the new file's measured
    entries = [
        {
            "fileName": f.name,
            "fileLen": f.length if f.length is not None else storage.size(posixpath.join(folder, f.name)),
        }
        for f in kept
    ]
    entries.append({"fileName": added, "fileLen": storage.size(posixpath.join(folder, added))})
    manifest = json.dumps({"files": entries}).encode()
    storage.write_bytes(posixpath.join(folder, f"{MANIFEST_PREFIX}{version + 1}"), manifest)
    publish_version(storage, folder, version + 1)
    return version + 1


#: `hoodie.timeline.compaction.batch.size`'s default: files of one layer merged at once.
TIMELINE_COMPACTION_BATCH = 10
#: Hudi's `LSMTimelineWriter.MAX_FILE_SIZE_IN_BYTES`: no more files are added to a merge past this size.
_MAX_MERGE_BYTES = 1024 * 1024 * 1000
#: Snapshots kept by a clean besides one per merge it follows (Hudi's constant).
_SNAPSHOTS_KEPT = 3


def compact_and_clean(storage: Storage, folder: str, batch: int = TIMELINE_COMPACTION_BATCH) -> list[str]:
    """Merge full layers of the LSM history in `folder`, then delete what no recent snapshot lists
    (module doc, steps 4-5), after writing `_version_` again if a killed run left it deleted; the
    paths of the merged files written. Call under the table lock, after an archival."""
    version = latest_snapshot_version(storage, folder)
    if version is None:
        return []
    if not storage.exists(posixpath.join(folder, VERSION_FILE)):
        # a run died between deleting `_version_` and writing it again: readers take the newest
        # manifest meanwhile, and so does this
        publish_version(storage, folder, version)
    files = manifest_files(storage, folder, version)
    written: list[str] = []
    layer = 0
    while True:
        merged = _candidates(sorted((f for f in files if f.layer == layer), key=lambda f: f.name), batch)
        if len(merged) < 2:
            break
        name = f"{min(f.min_instant for f in merged)}_{max(f.max_instant for f in merged)}_{layer + 1}.parquet"
        rows = [_read_history_rows(storage, posixpath.join(folder, f.name)) for f in merged]
        _write_data_file(storage, posixpath.join(folder, name), pa.concat_tables(rows))
        gone = {f.name for f in merged}
        version = _publish_manifest(storage, folder, version, [f for f in files if f.name not in gone], name)
        files = manifest_files(storage, folder, version)
        written.append(posixpath.join(folder, name))
        log.info("merged %d LSM history files of layer %d into %s", len(merged), layer, name)
        layer += 1
    _clean_history(storage, folder, _SNAPSHOTS_KEPT + len(written))
    return written


def _candidates(layer_files: Sequence[HistoryFile], batch: int) -> list[HistoryFile]:
    """The files of one layer (oldest first) to merge now: none until the layer holds `batch`;
    then the oldest `batch`, fewer once the ones taken add up to over `_MAX_MERGE_BYTES`."""
    if len(layer_files) < batch:
        return []
    taken: list[HistoryFile] = []
    total = 0
    for f in layer_files[:batch]:
        if total > _MAX_MERGE_BYTES:
            break
        total += f.length or 0
        taken.append(f)
    return taken


def _read_history_rows(storage: Storage, path: str) -> pa.Table:
    """Every row of a history data file, in `LSM_INSTANT_SCHEMA` (Hudi's files may differ in nullability)."""
    rows = read_history_file(storage, path)
    columns = [
        rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(rows.num_rows, f.type)
        for f in LSM_INSTANT_SCHEMA
    ]
    return pa.Table.from_arrays(columns, schema=LSM_INSTANT_SCHEMA)


def _clean_history(storage: Storage, folder: str, snapshots: int) -> None:
    """Keep the newest `snapshots` manifests and the data files they list; delete older manifests, then
    every other data file (merged away, or left unreferenced by a run that died)."""
    versions = sorted(snapshot_versions(storage, folder), reverse=True)
    if len(versions) <= snapshots:
        return
    kept = versions[:snapshots]
    listed = {f.name for v in kept for f in manifest_files(storage, folder, v)}
    for v in versions[snapshots:]:
        storage.delete_file(posixpath.join(folder, f"{MANIFEST_PREFIX}{v}"))
    for name in data_file_names(storage, folder):
        if name not in listed:
            storage.delete_file(posixpath.join(folder, name))


def publish_version(storage: Storage, folder: str, version: int) -> None:
    """Make snapshot `version` the history's latest: `_version_` deleted and written again, as Java does."""
    storage.delete_file(posixpath.join(folder, VERSION_FILE))
    storage.write_bytes(posixpath.join(folder, VERSION_FILE), str(version).encode())


__all__ = [
    "LSM_INSTANT_AVRO_SCHEMA",
    "LSM_INSTANT_SCHEMA",
    "TIMELINE_COMPACTION_BATCH",
    "append_history_file",
    "compact_and_clean",
    "history_row",
    "publish_version",
]
