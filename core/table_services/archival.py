"""Archival: old completed instants move from `.hoodie/` to the archived timeline, as Hudi 0.14/0.15 do.

What is archived (Hudi's HoodieTimelineArchiver rules, table version 6):

- Only when the active timeline holds more than `hoodie.keep.max.commits` completed commits
  (commit, deltacommit, replacecommit, compaction commits); then the oldest ones go, so that
  `hoodie.keep.min.commits` stay.
- Never at or past a barrier: the earliest pending instant of any action (writes,
  compaction and clustering plans, cleans, rollbacks...), the first savepoint, the
  `earliestCommitToRetain` of the latest clean, and the oldest replacecommit whose replaced
  file groups still have files on disk (readers need its `partitionToReplaceFileIds`
  until the cleaner removed them), and (layout 2, lakeward's own rule) the oldest delta
  commit that completed after a compaction was planned while its log files remain
  (`_late_logs_remain`).
- Every other completed instant (clean, rollback, restore, indexing) older than the first
  commit that stays is archived with them, so the active timeline stays a suffix of the
  full one: readers (ours: `FileSystemView`; hudi-rs) take files older than the first
  active instant for committed, which is only right if nothing older is still active.
  (Hudi 0.14 archives cleans and rollbacks by their own count instead; 1.x by this rule.)

How (format doc 1.5, 6, 7.10): every timeline file of an archived instant (requested,
inflight, completed) becomes one `HoodieArchivedMetaEntry` record (`commitTime`,
`actionType`, `actionState` and its metadata: commit JSON converted to the Avro
`HoodieCommitMetadata` / `HoodieReplaceCommitMetadata`, Avro timeline files such as
clean, rollback, savepoint metadata and plans carried as they are, with their own writer
schema) in Avro data blocks (`hoodie.commits.archival.batch` records each, header `SCHEMA`
only, as Hudi writes them) of a new log file `.hoodie/archived/.commits_.archive.<N>_1-0-1`
(the next version: object stores cannot append, so each archival writes a new version,
as Hudi does on storage without append). Each block's writer schema lists the entry's
fixed fields and the metadata fields its records use (readers resolve by name; absent
fields read as null).

On table versions 8+ (timeline layout 2) the same instants go to the LSM history in
`.hoodie/timeline/history/` instead, one row per instant (`lsm_writer.py`, as Hudi 1.x's
`LSMTimelineWriter`): a layer-0 parquet file, then the next manifest and `_version_`.

Crash safety: the archive file is written first (one atomic create), then the archived
instants' timeline files are deleted, oldest instant first and each instant's completed
file last, so the active timeline is always a suffix of the full one. A re-run after a
crash in between does not write an entry twice (entries are keyed by time, action and
state and the archive is read first) and finishes deleting instants already archived.
"""

from __future__ import annotations

import io
import json
import logging
import posixpath
import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import fastavro

from lakeward.core.config.table import TableType
from lakeward.core.engine import Engine
from lakeward.core.exceptions import CorruptTableError, InstantExistsError
from lakeward.core.file_group.log_file import BlockType, HeaderKey, OpaqueBlock, encode_block
from lakeward.core.file_group.metadata_listing import (
    keeps_metadata_table,
    load_metadata_timeline,
    metadata_storage,
    read_table_properties,
)
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.metadata_table.compaction import (
    check_metadata_compaction,
    execute_metadata_compaction,
    pending_metadata_compactions,
    schedule_metadata_compaction,
)
from lakeward.core.storage import Storage
from lakeward.core.table_services.service import DirectService, ServiceReport
from lakeward.core.timeline import WRITE_ACTIONS, Action, Instant, State, Timeline, new_instant_time
from lakeward.core.timeline.archived import archive_folder, latest_archive_version, read_archived_entries
from lakeward.core.timeline.compaction_plan import pending_compaction_instants
from lakeward.core.timeline.lsm_history import load_archived_instants
from lakeward.core.timeline.lsm_writer import (
    TIMELINE_COMPACTION_BATCH,
    append_history_file,
    compact_and_clean,
    history_row,
)
from lakeward.core.timeline.metadata import COMPACT
from lakeward.core.timeline.transitions import instant_path, read_commit_metadata, read_instant
from lakeward.core.write.markers import delete_markers_of_archived

if TYPE_CHECKING:
    from lakeward.core.context import HoldsTableContext, TableContext

log = logging.getLogger(__name__)

NS = "org.apache.hudi.avro.model"
ARCHIVE_FILE_ID = "commits"
ARCHIVE_WRITE_TOKEN = "1-0-1"
_AVRO_CONTAINER_MAGIC = b"Obj\x01"


def archive_file_name(version: int, token: str = ARCHIVE_WRITE_TOKEN) -> str:
    """`.commits_.archive.<version>_<token>`: a log file with file id `commits`, no base instant."""
    return f".{ARCHIVE_FILE_ID}_.archive.{version}_{token}"


# -- Avro forms of the JSON commit metadata ---------------------------------------------------
_LONG_STAT_FIELDS = (
    "numWrites",
    "numDeletes",
    "numUpdateWrites",
    "totalWriteBytes",
    "totalWriteErrors",
    "totalLogRecords",
    "totalLogFiles",
    "totalUpdatedRecordsCompacted",
    "numInserts",
    "totalLogBlocks",
    "totalCorruptLogBlock",
    "totalRollbackBlocks",
    "fileSizeInBytes",
)
_STAT_FIELD_ORDER = (
    "fileId",
    "path",
    "prevCommit",
    "prevFilePathOverwritten",
    "numWrites",
    "numDeletes",
    "numUpdateWrites",
    "totalWriteBytes",
    "totalWriteErrors",
    "partitionPath",
    "totalLogRecords",
    "totalLogFiles",
    "totalUpdatedRecordsCompacted",
    "numInserts",
    "totalLogBlocks",
    "totalCorruptLogBlock",
    "totalRollbackBlocks",
    "fileSizeInBytes",
)


def _nullable(name: str, type_: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", type_], "default": None}


WRITE_STAT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieWriteStat",
    "namespace": NS,
    "fields": [_nullable(f, "long" if f in _LONG_STAT_FIELDS else "string") for f in _STAT_FIELD_ORDER],
}
#: Both commit schemas define `HoodieWriteStat` in full: a block's schema holds only the metadata types its
#: entries use, and `entry_schema` (`_dedupe_names`) turns a second definition into a reference.
_STATS_MAP = {"type": "map", "values": {"type": "array", "items": WRITE_STAT_SCHEMA}}
_VERSION_FIELD = {"name": "version", "type": ["int", "null"], "default": 1}
COMMIT_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieCommitMetadata",
    "namespace": NS,
    "fields": [
        _nullable("partitionToWriteStats", _STATS_MAP),
        _nullable("extraMetadata", {"type": "map", "values": "string"}),
        _VERSION_FIELD,
        _nullable("operationType", "string"),
    ],
}
REPLACE_COMMIT_METADATA_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieReplaceCommitMetadata",
    "namespace": NS,
    "fields": [
        _nullable("partitionToWriteStats", _STATS_MAP),
        _nullable("extraMetadata", {"type": "map", "values": "string"}),
        _VERSION_FIELD,
        _nullable("operationType", "string"),
        _nullable("partitionToReplaceFileIds", {"type": "map", "values": {"type": "array", "items": "string"}}),
    ],
}

#: HoodieArchivedMetaEntry's fields in schema order (0.14 adds `hoodieInflightReplaceMetadata`).
_ENTRY_FIELDS = (
    "hoodieCommitMetadata",
    "hoodieCleanMetadata",
    "hoodieCompactionMetadata",
    "hoodieRollbackMetadata",
    "hoodieSavePointMetadata",
    "commitTime",
    "actionType",
    "version",
    "hoodieCompactionPlan",
    "hoodieCleanerPlan",
    "actionState",
    "hoodieReplaceCommitMetadata",
    "hoodieRequestedReplaceMetadata",
    "hoodieInflightReplaceMetadata",
)
_STRING_FIELDS = ("commitTime", "actionType", "actionState")


def _stat_to_avro(stat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _STAT_FIELD_ORDER:
        value = stat.get(name)
        if value is None:
            out[name] = None
        elif name in _LONG_STAT_FIELDS:
            out[name] = int(value)
        else:
            out[name] = str(value)
    return out


def commit_metadata_to_avro(raw: dict[str, Any], replace: bool = False) -> dict[str, Any]:
    """The Avro form of commit metadata JSON (Hudi converts it with Jackson the same way)."""
    stats = {
        str(p): [_stat_to_avro(s) for s in (lst or [])]
        for p, lst in (raw.get("partitionToWriteStats") or {}).items()
        if p is not None
    }
    operation = raw.get("operationType")
    if raw.get("compacted"):
        operation = COMPACT
    out: dict[str, Any] = {
        "partitionToWriteStats": stats,
        "extraMetadata": {str(k): "" if v is None else str(v) for k, v in (raw.get("extraMetadata") or {}).items()},
        "version": 1,
        "operationType": None if operation is None else str(operation),
    }
    if replace:
        out["partitionToReplaceFileIds"] = {
            str(p): [str(f) for f in ids] for p, ids in (raw.get("partitionToReplaceFileIds") or {}).items()
        }
    return out


# -- archive entries -------------------------------------------------------------------------
@dataclass(frozen=True)
class ArchiveEntry:
    """One `HoodieArchivedMetaEntry`: an instant in one state, with at most one metadata field set."""

    commit_time: str
    action_type: str
    action_state: str
    #: (entry field name, writer schema, record) of the metadata, if any.
    metadata: tuple[str, dict[str, Any], dict[str, Any]] | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.commit_time, self.action_type, self.action_state)


def _read_container(data: bytes) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(writer schema, record) of a one-record Avro container file; None when `data` is not one."""
    if not data.startswith(_AVRO_CONTAINER_MAGIC):
        return None
    reader = fastavro.reader(io.BytesIO(data))
    schema = json.loads(reader.metadata["avro.schema"])
    record = next(iter(reader), None)
    return (schema, record) if isinstance(record, dict) else None


def _json(data: bytes) -> dict[str, Any] | None:
    if not data.strip():
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _metadata_field(instant: Instant) -> str | None:
    """Which entry field holds the metadata of an instant file (MetadataConversionUtils' mapping)."""
    a, s = instant.action, instant.state
    if a in (Action.COMMIT, Action.DELTA_COMMIT) or (a is Action.COMPACTION and s is State.COMPLETED):
        return "hoodieCommitMetadata"
    if a is Action.REPLACE_COMMIT:
        return {
            State.COMPLETED: "hoodieReplaceCommitMetadata",
            State.INFLIGHT: "hoodieInflightReplaceMetadata",
            State.REQUESTED: "hoodieRequestedReplaceMetadata",
        }[s]
    if a is Action.CLEAN:
        return "hoodieCleanMetadata" if s is State.COMPLETED else "hoodieCleanerPlan"
    if a is Action.ROLLBACK and s is State.COMPLETED:
        return "hoodieRollbackMetadata"
    if a is Action.SAVEPOINT and s is State.COMPLETED:
        return "hoodieSavePointMetadata"
    if a in (Action.COMPACTION, Action.LOG_COMPACTION) and s is not State.COMPLETED:
        return "hoodieCompactionPlan"
    return None


def entry_of(storage: Storage, instant: Instant) -> ArchiveEntry:
    """The archive entry of one timeline file."""
    action = instant.action.completed_action.value if instant.is_completed else instant.action.value
    entry = ArchiveEntry(instant.time, action, instant.state.name)
    field = _metadata_field(instant)
    if field is None:
        return entry
    data = read_instant(storage, instant)
    if field in ("hoodieCommitMetadata", "hoodieInflightReplaceMetadata", "hoodieReplaceCommitMetadata"):
        raw = _json(data)
        if raw is None:
            return entry
        if field == "hoodieReplaceCommitMetadata":
            return ArchiveEntry(*entry.key, (field, REPLACE_COMMIT_METADATA_SCHEMA, commit_metadata_to_avro(raw, True)))
        return ArchiveEntry(*entry.key, (field, COMMIT_METADATA_SCHEMA, commit_metadata_to_avro(raw)))
    container = _read_container(data)
    if container is None:
        return entry
    return ArchiveEntry(*entry.key, (field, container[0], container[1]))


def _dedupe_names(node: Any, namespace: str | None, seen: set[str]) -> Any:
    """A schema in which each named type is defined once; later definitions become references."""
    if isinstance(node, list):
        return [_dedupe_names(n, namespace, seen) for n in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        name = str(node["name"])
        ns = name.rsplit(".", 1)[0] if "." in name else node.get("namespace", namespace)
        full = name if "." in name else (f"{ns}.{name}" if ns else name)
        if full in seen:
            return full
        seen.add(full)
        if kind in ("record", "error"):
            fields = [{**f, "type": _dedupe_names(f["type"], ns, seen)} for f in node["fields"]]
            return {**node, "fields": fields}
        return node
    if kind == "array":
        return {**node, "items": _dedupe_names(node["items"], namespace, seen)}
    if kind == "map":
        return {**node, "values": _dedupe_names(node["values"], namespace, seen)}
    if isinstance(kind, dict | list):
        return {**node, "type": _dedupe_names(kind, namespace, seen)}
    return node


def entry_schema(metadata_types: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The writer schema of a block: the fixed fields and the metadata fields its records use."""
    fields: list[dict[str, Any]] = []
    for name in _ENTRY_FIELDS:
        if name in _STRING_FIELDS:
            fields.append(_nullable(name, "string"))
        elif name == "version":
            fields.append(dict(_VERSION_FIELD))
        elif name in metadata_types:
            fields.append(_nullable(name, metadata_types[name]))
    schema = {"type": "record", "name": "HoodieArchivedMetaEntry", "namespace": NS, "fields": fields}
    return dict(_dedupe_names(schema, NS, set()))


def _record_of(entry: ArchiveEntry) -> dict[str, Any]:
    record: dict[str, Any] = {
        "commitTime": entry.commit_time,
        "actionType": entry.action_type,
        "actionState": entry.action_state,
        "version": 1,
    }
    if entry.metadata is not None:
        record[entry.metadata[0]] = entry.metadata[2]
    return record


def _blocks(entries: list[ArchiveEntry], batch: int) -> Iterator[tuple[dict[str, Any], list[ArchiveEntry]]]:
    """Entries in blocks of at most `batch`; a block changes when a field's writer schema would differ."""
    types: dict[str, dict[str, Any]] = {}
    signatures: dict[str, str] = {}
    current: list[ArchiveEntry] = []
    for entry in entries:
        clash = False
        if entry.metadata is not None:
            name, schema, _ = entry.metadata
            signature = json.dumps(schema, sort_keys=True)
            clash = name in signatures and signatures[name] != signature
        if current and (len(current) >= batch or clash):
            yield entry_schema(types), current
            types, signatures, current = {}, {}, []
        if entry.metadata is not None:
            name, schema, _ = entry.metadata
            types[name] = schema
            signatures[name] = json.dumps(schema, sort_keys=True)
        current.append(entry)
    if current:
        yield entry_schema(types), current


def encode_archive_block(schema: dict[str, Any], entries: list[ArchiveEntry]) -> bytes:
    """One Avro data block (content version 3: count, then length-prefixed records)."""
    parsed = fastavro.parse_schema(schema)
    parts = [struct.pack(">ii", 3, len(entries))]
    for entry in entries:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, _record_of(entry))
        raw = buf.getvalue()
        parts.append(struct.pack(">i", len(raw)))
        parts.append(raw)
    block = OpaqueBlock(
        header={HeaderKey.SCHEMA: json.dumps(schema)}, kind=BlockType.AVRO_DATA, raw_content=b"".join(parts)
    )
    return encode_block(block)


# -- what to archive -------------------------------------------------------------------------
def _latest_clean_retain(storage: Storage, timeline: Timeline) -> str | None:
    cleans = timeline.completed(Action.CLEAN)
    return clean_retain_of(storage, cleans[-1]) if cleans else None


def clean_retain_of(storage: Storage, clean: Instant) -> str | None:
    """The earliest commit a completed clean retained (`earliestCommitToRetain`): archival keeps every
    write from there on, until a newer clean moves the bound (None: the clean names none)."""
    container = _read_container(read_instant(storage, clean))
    value = container[1].get("earliestCommitToRetain") if container else None
    return str(value) if value else None


def _replaced_files_remain(storage: Storage, instant: Instant, listings: dict[str, set[str]]) -> bool:
    replaced = read_commit_metadata(storage, instant).partitionToReplaceFileIds or {}
    for partition, ids in replaced.items():
        if partition not in listings:
            names = set()
            for e in storage.list_dir(partition):
                parsed = parse_base_file_name(e.name) or parse_log_file_name(e.name)
                if parsed is not None and not e.is_dir:
                    names.add(parsed.file_id)
            listings[partition] = names
        if any(f in listings[partition] for f in ids):
            return True
    return False


def _late_logs_remain(storage: Storage, timeline: Timeline, instant: Instant, names: dict[str, set[str]]) -> bool:
    """Whether `instant` is a delta commit that completed after a compaction was planned and its log
    files are still on storage. Slicing by completion time (versions 8+) puts those logs in the
    compaction's new file slice; a reader without the LSM history (hudi-rs) knows no completion time
    for an archived instant and places them by instant time, in the slice before, where they are
    not read: such a delta commit stays active until the cleaner removed its logs. `names`: the
    file names listed per partition, shared across calls."""
    if instant.action is not Action.DELTA_COMMIT or instant.completion_time is None:
        return False
    done = instant.completion_time
    compactions = [i.time for i in pending_compaction_instants(timeline)]
    compactions += [i.time for i in timeline.completed(Action.COMMIT) if timeline.was_compaction(i.time)]
    if not any(instant.time < c < done for c in compactions):
        return False
    for stat in read_commit_metadata(storage, instant).write_stats():
        if not stat.path:
            continue
        partition = posixpath.dirname(stat.path)
        if partition not in names:
            names[partition] = {e.name for e in storage.list_dir(partition) if not e.is_dir}
        if posixpath.basename(stat.path) in names[partition]:
            return True
    return False


def _metadata_table_barrier(storage: Storage, commits: list[Instant], compacted_at: str | None = None) -> str | None:
    """With a metadata table, Hudi archives only commits that completed before its latest compaction
    (`findInstantsModifiedAfterByCompletionTime`): the first of `commits` that completed after it is
    the barrier (nothing when the metadata table was never compacted: "" bars every instant). None
    without a metadata table. `compacted_at`: as if its latest compaction were at that instant time."""
    if not keeps_metadata_table(read_table_properties(storage)):
        return None
    if compacted_at is None:
        compactions = load_metadata_timeline(metadata_storage(storage)).completed(Action.COMMIT)
        if not compactions:
            return ""
        compacted_at = compactions[-1].time
    return min((i.time for i in commits if i.ordering_time > compacted_at), default=compacted_at)


def instants_to_archive(
    storage: Storage,
    timeline: Timeline,
    keep_min: int,
    keep_max: int,
    more_barriers: Sequence[str] = (),
    *,
    metadata_barrier: bool = True,
    metadata_compacted_at: str | None = None,
    compaction_delta_commits: int | None = None,
) -> list[Instant]:
    """The completed instants Hudi's rules archive now, oldest first (see the module doc); `more_barriers`:
    more instant times at or after which nothing is archived (the metadata table's own rules);
    `metadata_barrier` False: as if the metadata table were compacted up to now; `metadata_compacted_at`:
    as if its latest compaction were at that instant time; `compaction_delta_commits`: on a merge-on-read
    table, the delta commits that trigger a compaction (`hoodie.compact.inline.max.delta.commits`)."""
    commits = timeline.completed_writes()
    if len(commits) <= keep_max:
        return []
    barriers = [*more_barriers, *_timeline_barriers(timeline, commits, compaction_delta_commits).values()]
    retain = _latest_clean_retain(storage, timeline)
    if retain:
        barriers.append(retain)
    compacted = _metadata_table_barrier(storage, commits, metadata_compacted_at) if metadata_barrier else None
    if compacted is not None:
        barriers.append(compacted)
    barrier = min(barriers) if barriers else None
    chosen: list[Instant] = []
    listings: dict[str, set[str]] = {}
    names: dict[str, set[str]] = {}
    for instant in commits[: len(commits) - keep_min]:
        if barrier is not None and instant.time >= barrier:
            break
        if instant.action is Action.REPLACE_COMMIT and _replaced_files_remain(storage, instant, listings):
            break
        if _late_logs_remain(storage, timeline, instant, names):
            break
        chosen.append(instant)
    if not chosen:
        return []
    first_kept = commits[len(chosen)].time
    others = [
        i
        for i in timeline.completed()
        if i.action not in WRITE_ACTIONS and i.action is not Action.SAVEPOINT and i.time < first_kept
    ]
    return sorted(chosen + others, key=Instant.sort_key)


def _timeline_barriers(
    timeline: Timeline, commits: Sequence[Instant], compaction_delta_commits: int | None
) -> dict[str, str]:
    """What the timeline alone keeps from archival, each with the instant time from which it keeps
    every write: the first pending instant, the first savepoint (a pending one is after the first
    pending instant) and, on a merge-on-read table, the delta commits its compaction waits for."""
    barriers: dict[str, str] = {}
    for pending in timeline.pending()[:1]:
        barriers[f"pending {pending.action.value} {pending.time}"] = pending.time
    for savepoint in timeline.completed(Action.SAVEPOINT)[:1]:
        barriers[f"savepoint {savepoint.time}"] = savepoint.time
    if compaction_delta_commits is not None:
        kept = _compaction_retain(commits, compaction_delta_commits)
        if kept is not None:
            what = f"the delta commits from {kept} on, which the next compaction waits for"
            barriers[f"{what} (hoodie.compact.inline.max.delta.commits={compaction_delta_commits})"] = kept
    return barriers


@dataclass(frozen=True)
class ArchivalOutlook:
    """What the timeline alone says an archival would take: a planner's check, so that no run is
    spent on a table where archival finds nothing. A run checks more (replaced files and late log
    files still on storage)."""

    #: completed writes on the active timeline (what `hoodie.keep.max.commits` counts)
    writes: int
    #: of them, the oldest that archival may take
    movable: int
    #: what keeps the oldest write, when none may go ("" otherwise, or when keep_min does)
    held_back_by: str = ""


def archival_outlook(
    timeline: Timeline,
    keep_min: int,
    keep_max: int,
    compaction_delta_commits: int | None = None,
    metadata_bound: str | None = None,
    clean_retain: str | None = None,
) -> ArchivalOutlook:
    """`instants_to_archive`'s rules that need only the timeline (the same arguments), the metadata
    table's (`metadata_bound`: `MetadataCompactionCheck.archival_bound`; None: no metadata table, or
    nothing it keeps) and the last clean's (`clean_retain`: `clean_retain_of` the latest completed clean)."""
    commits = timeline.completed_writes()
    if len(commits) <= keep_max:
        return ArchivalOutlook(len(commits), 0)
    barriers = _timeline_barriers(timeline, commits, compaction_delta_commits)
    if clean_retain is not None:
        cleans = timeline.completed(Action.CLEAN)
        last = f"the last clean {cleans[-1].time}" if cleans else "the last clean"
        barriers[f"{last}, which retains every write from {clean_retain} on (a newer clean moves it)"] = clean_retain
    if metadata_bound is not None:
        first = min((i.time for i in commits if i.ordering_time > metadata_bound), default=None)
        if first is not None:
            compacted = f"its compaction at {metadata_bound}" if metadata_bound else "it was never compacted"
            what = f"the metadata table, which holds the writes that completed after {compacted}"
            barriers[f"{what} and cannot be compacted further now (see metadata_compaction)"] = first
    first = min(barriers.items(), key=lambda b: b[1]) if barriers else None
    movable = [i for i in commits[: max(0, len(commits) - keep_min)] if first is None or i.time < first[1]]
    held = first[0] if first is not None and not movable and len(commits) > keep_min else ""
    return ArchivalOutlook(len(commits), len(movable), held)


def _compaction_retain(commits: Sequence[Instant], max_delta_commits: int) -> str | None:
    """The first instant a merge-on-read table keeps for its compaction trigger (Hudi's
    `getEarliestInstantToRetainForCompaction`): the delta commits since the last compaction are what
    "compact after N delta commits" counts, so archiving them would keep a compaction from ever being
    due. Fewer than N: from the last compaction (else the first delta commit) on; else the N newest."""
    compactions = [i for i in commits if i.action is Action.COMMIT]
    since = [
        i for i in commits if i.action is Action.DELTA_COMMIT and (not compactions or i.time > compactions[-1].time)
    ]
    if not since:
        return None
    if len(since) < max_delta_commits:
        return compactions[-1].time if compactions else since[0].time
    return since[len(since) - max_delta_commits].time


def _files_by_instant(timeline: Timeline) -> dict[tuple[str, Action], list[Instant]]:
    """Every timeline file, grouped by (time, completed action), requested first and completed last."""
    grouped: dict[tuple[str, Action], list[Instant]] = {}
    for name in timeline.files:
        parsed = Instant.parse(name, timeline.layout)
        if parsed is not None:
            grouped.setdefault((parsed.time, parsed.action.completed_action), []).append(parsed)
    for files in grouped.values():
        files.sort(key=lambda i: i.state.rank)
    return grouped


@dataclass(frozen=True)
class ArchiveResult:
    """What one archival did."""

    #: Archived instants, `<time>.<action>`, oldest first (including ones a crashed run archived).
    archived: tuple[str, ...]
    #: The archive file written (relative to the base path), None when no new entry was needed.
    archive_file: str | None
    num_entries: int
    seconds: float
    #: The instant files deleted from the active timeline (relative paths), oldest instant first.
    instant_files: tuple[str, ...] = ()
    #: True: nothing was written or deleted; the result says what an archival would do now.
    dry_run: bool = False


def archive(table: HoldsTableContext, *, dry_run: bool = False) -> ArchiveResult:
    """Archive the instants Hudi's rules allow (`hoodie.keep.min.commits` / `.max.commits`), under the table lock
    (confirmed still held before anything moves: LockError, and nothing archived, when it was lost).

    `dry_run`: decide the same way, write and delete nothing; the result lists the instants and
    instant files a real archival would move now.
    """
    ctx = table.table_context
    storage, wc = ctx.storage, ctx.write_config
    with ctx.lock:
        timeline = ctx.timeline()
        trigger = _compaction_trigger(ctx)

        def plan(compacted_at: str | None = None) -> list[Instant]:
            return instants_to_archive(
                storage,
                timeline,
                wc.keep_min_commits,
                wc.keep_max_commits,
                metadata_compacted_at=compacted_at,
                compaction_delta_commits=trigger,
            )

        planned = plan()
        if dry_run:  # what the real run archives after the metadata compaction it runs first
            compacted_at = _metadata_compaction_first(ctx, timeline, planned)
            if compacted_at is not None:
                planned = plan(compacted_at)
        elif _compact_metadata_table_first(ctx, timeline, planned):
            planned = plan()
        if not dry_run:
            ctx.lock.ensure_held()  # a ZooKeeper session that expired meanwhile: archive nothing
        return archive_instants(
            storage,
            timeline,
            planned,
            history=ctx.config.version.history_folder,
            folder=ctx.config.archive_folder,
            batch=wc.archival_batch,
            timeline_compaction_batch=wc.timeline_compaction_batch,
            dry_run=dry_run,
        )


def _compaction_trigger(ctx: TableContext) -> int | None:
    """The delta commits a compaction waits for, which archival keeps, on a merge-on-read table."""
    if ctx.config.table_type is not TableType.MERGE_ON_READ:
        return None
    return ctx.write_config.compact_max_delta_commits


def _archivable_past_metadata_table(ctx: TableContext, timeline: Timeline) -> list[Instant]:
    """What archival would take if the metadata table's last compaction held nothing back."""
    wc = ctx.write_config
    return instants_to_archive(
        ctx.storage,
        timeline,
        wc.keep_min_commits,
        wc.keep_max_commits,
        metadata_barrier=False,
        compaction_delta_commits=_compaction_trigger(ctx),
    )


def _metadata_compaction_first(ctx: TableContext, timeline: Timeline, planned: Sequence[Instant]) -> str | None:
    """The instant time of the metadata compaction a real archival would run first
    (`_compact_metadata_table_first`), for a dry run; None when it would run none."""
    wc = ctx.write_config
    if len(_archivable_past_metadata_table(ctx, timeline)) <= len(planned):
        return None
    check = check_metadata_compaction(ctx.storage, timeline, wc.metadata_compact_max_delta_commits)
    if check.pending:
        return max(check.pending)
    if check.eligible == 0:
        return None
    # a new plan: at the instant the check names (Hudi 0.x's rule, or before a blocking instant), else now
    return check.instant_time or new_instant_time(timeline.latest_time(), ctx.config.timeline_timezone)


def _compact_metadata_table_first(ctx: TableContext, timeline: Timeline, planned: Sequence[Instant]) -> bool:
    """When only the metadata table's last compaction holds instants back (Hudi archives nothing newer, and
    tables have a metadata table by default), compact it now, as its next due compaction would: it
    folds the delta commits those instants left in its log files, after which they may go. Whether it
    ran; call under the table lock."""
    wc = ctx.write_config
    if len(_archivable_past_metadata_table(ctx, timeline)) <= len(planned):
        return False
    # one a run left pending first (it holds a new one back), as the metadata services pass does
    instants = pending_metadata_compactions(ctx.storage)
    if not instants:
        scheduled = schedule_metadata_compaction(
            ctx.storage, timeline, wc.metadata_compact_max_delta_commits, ctx.config.timeline_timezone, force=True
        )
        instants = [scheduled] if scheduled is not None else []
    for instant in instants:
        execute_metadata_compaction(
            ctx.storage,
            instant,
            ctx.config.timeline_timezone,
            ctx.lock.confirmed,
            deflate_level=wc.metadata_compact_deflate_level,
        )
    return bool(instants)


def archive_instants(
    storage: Storage,
    timeline: Timeline,
    planned: Sequence[Instant],
    *,
    history: str | None,
    folder: str,
    batch: int,
    timeline_compaction_batch: int = TIMELINE_COMPACTION_BATCH,
    dry_run: bool = False,
) -> ArchiveResult:
    """Move `planned` (and the instants a crashed run archived but did not delete) from the active
    timeline of the table at `storage` to its LSM history `history` (v8+) or archive `folder` (v6),
    then delete their timeline files (module doc). Call under the table lock. Shared by the data
    table's archival and the metadata table's (`metadata_table.archival`)."""
    started = time.monotonic()
    if history is not None:
        archived = {(i.time, i.action.value) for i in load_archived_instants(storage, history)}
    else:
        existing = read_archived_entries(storage, folder)
        done = {(str(r.get("commitTime")), str(r.get("actionType")), str(r.get("actionState"))) for r in existing}
        archived = {(t, a) for t, a, s in done if s == State.COMPLETED.name}
    # Instants a crashed run archived but did not delete (their completed entry is archived).
    leftover = [
        i for i in timeline.completed() if (i.time, i.action.completed_action.value) in archived and i not in planned
    ]
    to_archive = sorted(set(planned) | set(leftover), key=Instant.sort_key)
    files = _files_by_instant(timeline)
    state_files = [files.get((i.time, i.action.completed_action), [i]) for i in to_archive]
    names = tuple(f"{i.time}.{i.action.completed_action.value}" for i in to_archive)
    if history is not None:
        rows = [
            history_row(storage, group)
            for i, group in zip(to_archive, state_files, strict=True)
            if (i.time, i.action.completed_action.value) not in archived
        ]
        new_count = len(rows)
    else:
        entries = [entry_of(storage, f) for group in state_files for f in group]
        new_entries = [e for e in entries if e.key not in done]
        new_count = len(new_entries)
    if dry_run:
        instant_files = tuple(instant_path(f) for group in state_files for f in group)
        return ArchiveResult(names, None, new_count, time.monotonic() - started, instant_files, True)
    if history is not None:
        written = append_history_file(storage, history, rows) if rows else None
    else:
        written = _write_archive_file(storage, folder, new_entries, batch) if new_entries else None
    deleted: list[str] = []
    for group in state_files:  # oldest instant first, its completed file last
        for f in group:
            deleted.append(instant_path(f))
            storage.delete_file(deleted[-1])
    delete_markers_of_archived(storage, (i.time for i in to_archive))
    if history is not None:
        # as Hudi's archiver, once the instants left the active timeline: merge full layers of the
        # history, then drop what no recent snapshot lists (also after a run that archived nothing:
        # it finishes what a killed run left)
        compact_and_clean(storage, history, timeline_compaction_batch)
    elapsed = time.monotonic() - started
    if to_archive:
        log.info(
            "archived %d instant(s) of %s (%s .. %s), %d new entries in %s, in %.2fs",
            len(to_archive),
            storage.uri,
            to_archive[0].time,
            to_archive[-1].time,
            new_count,
            written,
            elapsed,
        )
    return ArchiveResult(names, written, new_count, elapsed, tuple(deleted))


class ArchivalService(DirectService[ArchiveResult]):
    """Archival as a table service: each run archives what Hudi's rules allow (no plan)."""

    action = "archival"

    def execute(self, instant_time: str | None = None, *, engine: Engine | None = None) -> ArchiveResult:
        return archive(self.ctx)

    def report(self, result: ArchiveResult) -> ServiceReport:
        return ServiceReport(
            None, nothing_to_do=not result.archived, detail=f"{len(result.archived)} instant(s) archived"
        )


def _write_archive_file(storage: Storage, folder: str, entries: list[ArchiveEntry], batch: int) -> str:
    data = b"".join(encode_archive_block(schema, block) for schema, block in _blocks(entries, batch))
    base = archive_folder(folder)
    version = latest_archive_version(storage, folder)
    for attempt in range(100):
        path = posixpath.join(base, archive_file_name(version + 1 + attempt))
        try:
            storage.create_if_absent(path, data)
            return path
        except InstantExistsError:
            continue
    raise CorruptTableError(f"could not find a free archive file version in {base}")
