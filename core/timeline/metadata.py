"""Commit metadata JSON (`HoodieCommitMetadata`, `HoodieReplaceCommitMetadata`) as Hudi writes it."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field, fields
from typing import Any

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.table_version import MetadataEncoding
from lakeward.core.timeline.avro_plans import (
    COMMIT_METADATA,
    REPLACE_COMMIT_METADATA,
    WRITE_STAT_FIELDS,
    deserialize,
    serialize,
)

#: Magic bytes of an Avro object container: commit metadata of timeline layout 2 (table
#: versions 8+) is Avro, of layout 1 JSON; readers tell them apart by content, as Java does
#: for legacy instants on an upgraded timeline.
AVRO_MAGIC = b"Obj\x01"

#: Operation types (Hudi's `WriteOperationType`) of the writes that rewrite records without
#: changing any: compaction (of base and logs, or of logs only) and clustering.
COMPACT = "COMPACT"
LOG_COMPACT = "LOG_COMPACT"
CLUSTER = "CLUSTER"
REWRITE_OPERATIONS = frozenset({COMPACT, LOG_COMPACT, CLUSTER})


def rewrites_only(operation_type: str | None) -> bool:
    """Whether a write of this operation type (its commit metadata's `operationType`, any case)
    changed no record: a compaction or a clustering."""
    return str(operation_type or "").upper() in REWRITE_OPERATIONS


_FIELD_NAMES: dict[type, frozenset[str]] = {}


def _field_names(cls: type) -> frozenset[str]:
    """The field names of a dataclass, computed once (`dataclasses.fields` is slow for one call per write stat)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls))
    return names


#: Fields of `HoodieDeltaWriteStat` (a merge-on-read log append), after the common ones.
DELTA_FIELDS = ("logVersion", "logOffset", "baseFile", "logFiles", "recordsStats")


@dataclass
class WriteStat:
    """One file written by an instant. Field order is Jackson's, for byte-level familiarity.

    A log append (merge-on-read) is Hudi's `HoodieDeltaWriteStat`: `path` is the log file
    written, `prevCommit` the slice's base instant, plus `logVersion`, `logOffset`,
    `baseFile` (file name of the slice's base file, "" for a log-only slice) and `logFiles`
    (names of the log files the append wrote; Hudi 0.x also names the slice's other log files). A
    stat is a delta stat when `logFiles` is set; the delta fields are only serialised then.
    """

    fileId: str
    path: str
    cdcStats: dict[str, int] | None = None
    prevCommit: str = "null"
    numWrites: int = 0
    numDeletes: int = 0
    numUpdateWrites: int = 0
    numInserts: int = 0
    totalWriteBytes: int = 0
    totalWriteErrors: int = 0
    tempPath: str | None = None
    partitionPath: str = ""
    totalLogRecords: int = 0
    totalLogFilesCompacted: int = 0
    totalLogSizeCompacted: int = 0
    totalUpdatedRecordsCompacted: int = 0
    totalLogBlocks: int = 0
    totalCorruptLogBlock: int = 0
    totalRollbackBlocks: int = 0
    fileSizeInBytes: int = 0
    minEventTime: int | None = None
    maxEventTime: int | None = None
    runtimeStats: dict[str, int] | None = None
    logVersion: int | None = None
    logOffset: int | None = None
    baseFile: str | None = None
    logFiles: list[str] | None = None
    #: Column statistics of the records (Hudi writes Jackson's empty Option: `{"val": null}`).
    recordsStats: dict[str, Any] | None = None

    @property
    def is_delta(self) -> bool:
        """A merge-on-read log append (`HoodieDeltaWriteStat`)."""
        return self.logFiles is not None

    def files(self) -> list[str]:
        """Paths (relative to the base path) of the files this stat vouches for: `path`, and
        for a log append every file in `logFiles` (a write that rolled over to several log
        files lists them all there), and the CDC log files in `cdcStats`."""
        out = [self.path] if self.path else []
        if self.logFiles:
            folder = self.partitionPath or posixpath.dirname(self.path)
            out += [posixpath.join(folder, name) if folder else name for name in self.logFiles]
        out += list(self.cdcStats or {})
        return list(dict.fromkeys(out))

    def to_json_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if self.is_delta or f.name not in DELTA_FIELDS}

    @classmethod
    def from_json_dict(cls, data: dict[str, Any]) -> WriteStat:
        known = _field_names(cls)
        if "fileId" not in data:
            raise CorruptTableError(f"write stat without fileId: {data}")
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class CommitMetadata:
    """Metadata of a completed commit, deltacommit or replacecommit."""

    partitionToWriteStats: dict[str, list[WriteStat]] = field(default_factory=dict)
    compacted: bool = False
    extraMetadata: dict[str, str] = field(default_factory=dict)
    operationType: str = "UNKNOWN"
    #: Only for replacecommits: partition -> file ids this instant replaces.
    partitionToReplaceFileIds: dict[str, list[str]] | None = None

    @property
    def schema(self) -> str | None:
        return self.extraMetadata.get("schema")

    def write_stats(self) -> list[WriteStat]:
        return [s for stats in self.partitionToWriteStats.values() for s in stats]

    def file_paths(self) -> list[str]:
        return [s.path for s in self.write_stats()]

    def touched_partitions(self) -> set[str]:
        """The partition paths this commit wrote files in or replaced file groups of."""
        written = {
            s.partitionPath if s.partitionPath is not None else posixpath.dirname(s.path or "")
            for s in self.write_stats()
        }
        return written | set(self.partitionToReplaceFileIds or {})

    def to_json(self) -> str:
        body: dict[str, Any] = {
            "partitionToWriteStats": {
                p: [s.to_json_dict() for s in stats] for p, stats in self.partitionToWriteStats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extraMetadata),
            "operationType": self.operationType,
        }
        if self.partitionToReplaceFileIds is not None:
            body["partitionToReplaceFileIds"] = self.partitionToReplaceFileIds
        return json.dumps(body, indent=2, separators=(",", " : "))

    def to_bytes(self, encoding: MetadataEncoding = MetadataEncoding.JSON) -> bytes:
        """The file content in the table version's encoding: JSON (v6) or an Avro container (v8+)."""
        if encoding is MetadataEncoding.AVRO:
            return self.to_avro()
        return self.to_json().encode()

    def to_avro(self) -> bytes:
        """`HoodieCommitMetadata` (or, with replaced file ids, `HoodieReplaceCommitMetadata`) as an
        Avro container, as Hudi 1.x writes it; `version` is null, as 1.0/1.1 write it."""
        record: dict[str, Any] = {
            "partitionToWriteStats": {
                p: [{name: getattr(s, name, None) for name, _ in WRITE_STAT_FIELDS} for s in stats]
                for p, stats in self.partitionToWriteStats.items()
            },
            "compacted": self.compacted,
            "extraMetadata": dict(self.extraMetadata),
            "version": None,
            "operationType": self.operationType,
        }
        if self.partitionToReplaceFileIds is not None:
            record["partitionToReplaceFileIds"] = self.partitionToReplaceFileIds
            return serialize(REPLACE_COMMIT_METADATA, record)
        return serialize(COMMIT_METADATA, record)

    @classmethod
    def from_bytes(cls, data: bytes, name: str = "commit metadata") -> CommitMetadata:
        """Decode commit metadata: JSON (table version 6) or an Avro container (versions 8+)."""
        if not data.strip():
            return cls()
        if data.startswith(AVRO_MAGIC):
            return cls.from_avro_record(deserialize(data, name))
        try:
            raw = json.loads(data)
        except ValueError as exc:
            raise CorruptTableError(f"{name} is not valid JSON: {exc}") from exc
        return cls._from_raw(raw)

    @classmethod
    def from_avro_record(cls, record: dict[str, Any]) -> CommitMetadata:
        """From a decoded `HoodieCommitMetadata` / `HoodieReplaceCommitMetadata` Avro record.

        Null Avro fields take the JSON defaults (a null `numWrites` is 0), so one model
        serves both encodings.
        """
        stats = {
            p: [{k: v for k, v in s.items() if v is not None} for s in (lst or [])]
            for p, lst in (record.get("partitionToWriteStats") or {}).items()
        }
        raw = {**record, "partitionToWriteStats": stats}
        raw["extraMetadata"] = {k: v for k, v in (record.get("extraMetadata") or {}).items() if v is not None}
        return cls._from_raw(raw)

    @classmethod
    def _from_raw(cls, raw: dict[str, Any]) -> CommitMetadata:
        stats = {
            p: [WriteStat.from_json_dict(s) for s in (lst or [])]
            for p, lst in (raw.get("partitionToWriteStats") or {}).items()
        }
        return cls(
            partitionToWriteStats=stats,
            compacted=bool(raw.get("compacted", False)),
            extraMetadata={k: str(v) for k, v in (raw.get("extraMetadata") or {}).items()},
            operationType=raw.get("operationType") or "UNKNOWN",
            partitionToReplaceFileIds=raw.get("partitionToReplaceFileIds"),
        )
