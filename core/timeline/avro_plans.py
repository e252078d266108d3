"""Avro-serialised timeline content (plans and service metadata), as table version 6 stores it.

Each is an Avro object container file holding exactly one record, null codec, with the
writer schema embedded. Schemas are written here from the format facts (namespace
`org.apache.hudi.avro.model`); readers resolve fields by name, so files written by
Apache Hudi with slightly different revisions decode as well.
"""

from __future__ import annotations

import io
from typing import Any

from lakeward.core.exceptions import CorruptTableError

NS = "org.apache.hudi.avro.model"
STR = "string"


def _opt(name: str, type_: Any, default: Any = None) -> dict[str, Any]:
    return {"name": name, "type": ["null", type_], "default": default}


def _version() -> dict[str, Any]:
    return {"name": "version", "type": ["int", "null"], "default": 1}


_STR_MAP = {"type": "map", "values": STR}
INSTANT_INFO = {
    "type": "record",
    "name": "HoodieInstantInfo",
    "namespace": NS,
    "fields": [{"name": "commitTime", "type": STR}, {"name": "action", "type": STR}],
}

SLICE_INFO = {
    "type": "record",
    "name": "HoodieSliceInfo",
    "namespace": NS,
    "fields": [
        _opt("dataFilePath", STR),
        _opt("deltaFilePaths", {"type": "array", "items": STR}),
        {"name": "fileId", "type": ["null", STR]},
        _opt("partitionPath", STR),
        _opt("bootstrapFilePath", STR),
        _version(),
    ],
}

CLUSTERING_PLAN = {
    "type": "record",
    "name": "HoodieClusteringPlan",
    "namespace": NS,
    "fields": [
        _opt(
            "inputGroups",
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieClusteringGroup",
                    "fields": [
                        _opt("slices", {"type": "array", "items": SLICE_INFO}),
                        _opt("metrics", {"type": "map", "values": "double"}),
                        {"name": "numOutputFileGroups", "type": ["int", "null"], "default": 1},
                        _opt("extraMetadata", _STR_MAP),
                        _version(),
                    ],
                },
            },
        ),
        _opt(
            "strategy",
            {
                "type": "record",
                "name": "HoodieClusteringStrategy",
                "fields": [
                    _opt("strategyClassName", STR),
                    _opt("strategyParams", _STR_MAP),
                    _version(),
                ],
            },
        ),
        _opt("extraMetadata", _STR_MAP),
        _version(),
        _opt("preserveHoodieMetadata", "boolean"),
    ],
}

REQUESTED_REPLACE_METADATA = {
    "type": "record",
    "name": "HoodieRequestedReplaceMetadata",
    "namespace": NS,
    "fields": [
        _opt("operationType", STR),
        _opt("clusteringPlan", CLUSTERING_PLAN),
        _opt("extraMetadata", _STR_MAP),
        _version(),
    ],
}

COMPACTION_PLAN = {
    "type": "record",
    "name": "HoodieCompactionPlan",
    "namespace": NS,
    "fields": [
        _opt(
            "operations",
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieCompactionOperation",
                    "fields": [
                        {"name": "baseInstantTime", "type": ["null", STR]},
                        _opt("deltaFilePaths", {"type": "array", "items": STR}),
                        _opt("dataFilePath", STR),
                        {"name": "fileId", "type": ["null", STR]},
                        _opt("partitionPath", STR),
                        _opt("metrics", {"type": "map", "values": "double"}),
                        _opt("bootstrapFilePath", STR),
                    ],
                },
            },
        ),
        _opt("extraMetadata", _STR_MAP),
        _version(),
        _opt(
            "strategy",
            {
                "type": "record",
                "name": "HoodieCompactionStrategy",
                "fields": [
                    _opt("compactorClassName", STR),
                    _opt("strategyParams", _STR_MAP),
                    _version(),
                ],
            },
        ),
        _opt("preserveHoodieMetadata", "boolean"),
    ],
}

ROLLBACK_PLAN = {
    "type": "record",
    "name": "HoodieRollbackPlan",
    "namespace": NS,
    "fields": [
        _opt("instantToRollback", INSTANT_INFO),
        _opt(
            "RollbackRequests",
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "HoodieRollbackRequest",
                    "fields": [
                        {"name": "partitionPath", "type": STR},
                        _opt("fileId", STR),
                        _opt("latestBaseInstant", STR),
                        {
                            "name": "filesToBeDeleted",
                            "type": {"type": "array", "items": STR},
                            "default": [],
                        },
                        _opt("logBlocksToBeDeleted", {"type": "map", "values": "long"}),
                    ],
                },
            },
        ),
        _version(),
    ],
}

ROLLBACK_METADATA = {
    "type": "record",
    "name": "HoodieRollbackMetadata",
    "namespace": NS,
    "fields": [
        {"name": "startRollbackTime", "type": STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "commitsRollback", "type": {"type": "array", "items": STR}},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieRollbackPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": STR},
                        {"name": "successDeleteFiles", "type": {"type": "array", "items": STR}},
                        {"name": "failedDeleteFiles", "type": {"type": "array", "items": STR}},
                        _opt("rollbackLogFiles", {"type": "map", "values": "long"}),
                        _opt("logFilesFromFailedCommit", {"type": "map", "values": "long"}),
                    ],
                },
            },
        },
        _version(),
        {
            "name": "instantsRollback",
            "type": {"type": "array", "items": INSTANT_INFO},
            "default": [],
        },
    ],
}

_STR_ARRAY = {"type": "array", "items": STR}

CLEANER_PLAN = {
    "type": "record",
    "name": "HoodieCleanerPlan",
    "namespace": NS,
    "fields": [
        _opt(
            "earliestInstantToRetain",
            {
                "type": "record",
                "name": "HoodieActionInstant",
                "fields": [
                    {"name": "timestamp", "type": STR},
                    {"name": "action", "type": STR},
                    {"name": "state", "type": STR},
                ],
            },
        ),
        {"name": "lastCompletedCommitTimestamp", "type": STR, "default": ""},
        {"name": "policy", "type": STR},
        _opt("filesToBeDeletedPerPartition", {"type": "map", "values": _STR_ARRAY}),
        _version(),
        _opt(
            "filePathsToBeDeletedPerPartition",
            {
                "type": "map",
                "values": {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "HoodieCleanFileInfo",
                        "fields": [_opt("filePath", STR), _opt("isBootstrapBaseFile", "boolean")],
                    },
                },
            },
        ),
        _opt("partitionsToBeDeleted", _STR_ARRAY),
    ],
}

CLEAN_PARTITION_METADATA = {
    "type": "record",
    "name": "HoodieCleanPartitionMetadata",
    "namespace": NS,
    "fields": [
        {"name": "partitionPath", "type": STR},
        {"name": "policy", "type": STR},
        {"name": "deletePathPatterns", "type": _STR_ARRAY},
        {"name": "successDeleteFiles", "type": _STR_ARRAY},
        {"name": "failedDeleteFiles", "type": _STR_ARRAY},
        _opt("isPartitionDeleted", "boolean"),
    ],
}

CLEAN_METADATA = {
    "type": "record",
    "name": "HoodieCleanMetadata",
    "namespace": NS,
    "fields": [
        {"name": "startCleanTime", "type": STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "totalFilesDeleted", "type": "int"},
        {"name": "earliestCommitToRetain", "type": STR},
        {"name": "lastCompletedCommitTimestamp", "type": STR, "default": ""},
        {"name": "partitionMetadata", "type": {"type": "map", "values": CLEAN_PARTITION_METADATA}},
        _version(),
        _opt("bootstrapPartitionMetadata", {"type": "map", "values": "HoodieCleanPartitionMetadata"}),
    ],
}

SAVEPOINT_METADATA = {
    "type": "record",
    "name": "HoodieSavepointMetadata",
    "namespace": NS,
    "fields": [
        {"name": "savepointedBy", "type": STR},
        {"name": "savepointedAt", "type": "long"},
        {"name": "comments", "type": STR},
        {
            "name": "partitionMetadata",
            "type": {
                "type": "map",
                "values": {
                    "type": "record",
                    "name": "HoodieSavepointPartitionMetadata",
                    "fields": [
                        {"name": "partitionPath", "type": STR},
                        {"name": "savepointDataFile", "type": _STR_ARRAY},
                    ],
                },
            },
        },
        _version(),
    ],
}

RESTORE_PLAN = {
    "type": "record",
    "name": "HoodieRestorePlan",
    "namespace": NS,
    "fields": [
        {"name": "instantsToRollback", "type": {"type": "array", "items": INSTANT_INFO}, "default": []},
        _version(),
    ],
}

RESTORE_METADATA = {
    "type": "record",
    "name": "HoodieRestoreMetadata",
    "namespace": NS,
    "fields": [
        {"name": "startRestoreTime", "type": STR},
        {"name": "timeTakenInMillis", "type": "long"},
        {"name": "instantsToRollback", "type": _STR_ARRAY},
        {
            "name": "hoodieRestoreMetadata",
            "type": {"type": "map", "values": {"type": "array", "items": ["null", ROLLBACK_METADATA]}},
        },
        _version(),
        {"name": "restoreInstantInfo", "type": {"type": "array", "items": "HoodieInstantInfo"}, "default": []},
    ],
}

#: `HoodieWriteStat` as Hudi 1.x writes it in commit metadata (format doc v8/v9 5.1): every
#: field optional, numbers long except `logVersion`.
_LONG = "long"
WRITE_STAT_FIELDS: tuple[tuple[str, Any], ...] = (
    ("fileId", STR),
    ("path", STR),
    ("prevCommit", STR),
    ("numWrites", _LONG),
    ("numDeletes", _LONG),
    ("numUpdateWrites", _LONG),
    ("totalWriteBytes", _LONG),
    ("totalWriteErrors", _LONG),
    ("partitionPath", STR),
    ("totalLogRecords", _LONG),
    ("totalLogFiles", _LONG),
    ("totalUpdatedRecordsCompacted", _LONG),
    ("numInserts", _LONG),
    ("totalLogBlocks", _LONG),
    ("totalCorruptLogBlock", _LONG),
    ("totalRollbackBlocks", _LONG),
    ("fileSizeInBytes", _LONG),
    ("logVersion", "int"),
    ("logOffset", _LONG),
    ("baseFile", STR),
    ("logFiles", {"type": "array", "items": STR}),
    ("cdcStats", {"type": "map", "values": _LONG}),
    ("prevBaseFile", STR),
    ("minEventTime", _LONG),
    ("maxEventTime", _LONG),
    (
        "runtimeStats",
        {
            "type": "record",
            "name": "HoodieRuntimeStats",
            "fields": [_opt(n, _LONG) for n in ("totalScanTime", "totalCreateTime", "totalUpsertTime")],
        },
    ),
    ("totalLogFilesCompacted", _LONG),
    ("totalLogReadTimeMs", _LONG),
    ("totalLogSizeCompacted", _LONG),
    ("tempPath", STR),
    ("numUpdates", _LONG),
)
_WRITE_STAT = {"type": "record", "name": "HoodieWriteStat", "fields": [_opt(n, t) for n, t in WRITE_STAT_FIELDS]}


def _commit_metadata_fields(write_stat: Any) -> list[dict[str, Any]]:
    return [
        _opt("partitionToWriteStats", {"type": "map", "values": {"type": "array", "items": write_stat}}),
        _opt("compacted", "boolean"),
        _opt("extraMetadata", _STR_MAP),
        _version(),
        _opt("operationType", STR),
    ]


#: `HoodieCommitMetadata`: completed commits and delta commits, and inflight workload profiles.
COMMIT_METADATA = {
    "type": "record",
    "name": "HoodieCommitMetadata",
    "namespace": NS,
    "fields": _commit_metadata_fields(_WRITE_STAT),
}
#: `HoodieReplaceCommitMetadata`: completed replace commits (insert overwrite, clustering).
REPLACE_COMMIT_METADATA = {
    "type": "record",
    "name": "HoodieReplaceCommitMetadata",
    "namespace": NS,
    "fields": [
        *_commit_metadata_fields(_WRITE_STAT),
        _opt("partitionToReplaceFileIds", {"type": "map", "values": {"type": "array", "items": STR}}),
    ],
}

_PARSED: dict[str, Any] = {}


# fastavro is imported by the functions that use it: table version 6 keeps commit metadata as JSON, so
# opening a table and listing its timeline (`lakeward show`, `timeline`) need no Avro (start-up, issue 23).


def _parsed(schema: dict[str, Any]) -> Any:
    import fastavro  # lazy: see above

    name = schema["name"]
    if name not in _PARSED:
        _PARSED[name] = fastavro.parse_schema(schema)
    return _PARSED[name]


def serialize(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """One record in an Avro object container (null codec), as Hudi's timeline stores it."""
    import fastavro  # lazy: see _parsed

    buf = io.BytesIO()
    fastavro.writer(buf, _parsed(schema), [record], codec="null")
    return buf.getvalue()


def deserialize(data: bytes, what: str = "timeline file") -> dict[str, Any]:
    """The single record of an Avro container written by lakeward or Apache Hudi."""
    import fastavro  # lazy: see _parsed

    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except Exception as exc:  # fastavro raises several unrelated types on bad input
        raise CorruptTableError(f"{what} is not an Avro container: {exc}") from exc
    if len(records) != 1:
        raise CorruptTableError(f"{what} holds {len(records)} records, expected 1")
    return records[0]  # type: ignore[return-value]
