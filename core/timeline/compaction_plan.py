"""Compaction plans (`HoodieCompactionPlan` in `<t>.compaction.requested`), as table version 6 stores them.

A plan names, per file slice, the base file and the log files to fold into a new base
file whose instant is the compaction's. Version 2 plans (what Hudi 0.14 writes) give
file names relative to the partition; version 1 plans give paths, which are read too.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from lakeward.core.exceptions import CorruptTableError
from lakeward.core.file_group.file_group import BaseFile, FileSlice, LogFile
from lakeward.core.file_group.naming import parse_base_file_name, parse_log_file_name
from lakeward.core.storage import Storage
from lakeward.core.table_version import TimelineLayout
from lakeward.core.timeline import avro_plans
from lakeward.core.timeline.instant import Action, Instant, State
from lakeward.core.timeline.timeline import Timeline
from lakeward.core.timeline.transitions import read_instant

PLAN_VERSION = 2


@dataclass(frozen=True)
class CompactionOperation:
    """One file slice to compact: its base file (if any) and log files, by name within the partition."""

    partition_path: str
    file_id: str
    base_instant_time: str
    base_file_name: str | None
    log_file_names: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)

    @classmethod
    def of_slice(cls, file_slice: FileSlice) -> CompactionOperation:
        logs = tuple(f.name for f in file_slice.log_files)
        return cls(
            file_slice.partition_path,
            file_slice.file_id,
            file_slice.base_instant_time,
            file_slice.base_file.name if file_slice.base_file is not None else None,
            logs,
            {
                "TOTAL_LOG_FILES": float(len(logs)),
                "TOTAL_LOG_FILES_SIZE": float(sum(f.size for f in file_slice.log_files)),
                "TOTAL_IO_READ_MB": float(file_slice.size // (1024 * 1024)),
            },
        )

    def _path(self, name: str) -> str:
        return posixpath.join(self.partition_path, name) if self.partition_path else name

    def file_slice(self) -> FileSlice:
        """The slice to read (file sizes are not recorded in plans: 0)."""
        base = None
        if self.base_file_name:
            parsed = parse_base_file_name(self.base_file_name)
            if parsed is None:
                raise CorruptTableError(f"compaction plan names an unparsable base file {self.base_file_name!r}")
            base = BaseFile(self._path(self.base_file_name), self.file_id, parsed.instant_time, 0)
        logs = []
        for name in self.log_file_names:
            log = parse_log_file_name(name)
            if log is None:
                raise CorruptTableError(f"compaction plan names an unparsable log file {name!r}")
            logs.append(LogFile(self._path(name), self.file_id, log.base_instant_time, log.version, log.write_token, 0))
        return FileSlice(self.partition_path, self.file_id, self.base_instant_time, base, tuple(logs))


@dataclass(frozen=True)
class CompactionPlan:
    operations: tuple[CompactionOperation, ...]
    strategy: str = ""
    extra_metadata: dict[str, str] = field(default_factory=dict)

    def file_groups(self) -> set[tuple[str, str]]:
        return {(op.partition_path, op.file_id) for op in self.operations}

    def to_bytes(self) -> bytes:
        record = {
            "operations": [
                {
                    "baseInstantTime": op.base_instant_time,
                    "deltaFilePaths": list(op.log_file_names),
                    "dataFilePath": op.base_file_name,
                    "fileId": op.file_id,
                    "partitionPath": op.partition_path,
                    "metrics": dict(op.metrics),
                    "bootstrapFilePath": None,
                }
                for op in self.operations
            ],
            "extraMetadata": dict(self.extra_metadata) or None,
            "version": PLAN_VERSION,
            "strategy": {"compactorClassName": self.strategy or None, "strategyParams": None, "version": 1},
            "preserveHoodieMetadata": True,
        }
        return avro_plans.serialize(avro_plans.COMPACTION_PLAN, record)

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "compaction plan") -> CompactionPlan:
        record = avro_plans.deserialize(data, what)
        operations = []
        for op in record.get("operations") or []:
            partition = op.get("partitionPath") or ""
            base = op.get("dataFilePath")
            operations.append(
                CompactionOperation(
                    partition,
                    op.get("fileId") or "",
                    op.get("baseInstantTime") or "",
                    posixpath.basename(base) if base else None,
                    tuple(posixpath.basename(p) for p in op.get("deltaFilePaths") or []),
                    dict(op.get("metrics") or {}),
                )
            )
        strategy = (record.get("strategy") or {}).get("compactorClassName") or ""
        return cls(tuple(operations), strategy, dict(record.get("extraMetadata") or {}))


def pending_compaction_instants(timeline: Timeline) -> list[Instant]:
    """Requested or inflight compactions, oldest first (the timeline keeps one entry per instant time)."""
    return timeline.pending(Action.COMPACTION)


def read_compaction_plan(
    storage: Storage, time: str, layout: TimelineLayout = TimelineLayout.V1, action: Action = Action.COMPACTION
) -> CompactionPlan:
    """The plan of compaction `time`, from its requested file in the `layout` timeline folder.
    `action`: `Action.LOG_COMPACTION` for a Hudi log compaction's plan (the same record)."""
    requested = Instant(time, action, State.REQUESTED, layout=layout)
    return CompactionPlan.from_bytes(read_instant(storage, requested), requested.file_name)


def pending_compaction_file_groups(
    storage: Storage, timeline: Timeline, action: Action = Action.COMPACTION
) -> dict[tuple[str, str], str]:
    """(partition, file id) -> instant time of the pending compaction that will rewrite it (`action`
    `Action.LOG_COMPACTION`: of the pending Hudi log compaction that will rewrite its log files)."""
    out: dict[tuple[str, str], str] = {}
    for instant in timeline.pending(action):
        for key in read_compaction_plan(storage, instant.time, timeline.layout, action).file_groups():
            out[key] = instant.time
    return out
