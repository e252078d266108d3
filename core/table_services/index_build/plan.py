"""The index build plan: which base files get which index files, fixed when the plan is scheduled.

On the timeline an index build is Hudi's `indexing` action: `<t>.indexing.requested` and
`.inflight` hold a `HoodieIndexPlan` and the completed `<t>.indexing` a
`HoodieIndexCommitMetadata` (Avro, as table version 6 stores them), with one
`HoodieIndexPartitionInfo` per secondary index (`metadataPartitionPath`
`lakeward_secondary_index/<name>`, `indexUptoInstant` the latest completed write the plan
saw). hudi-rs skips `indexing` instants and reads such tables unchanged.

HoodieIndexPlan has no place for a list of files, so the base files of the plan are in a
JSON sidecar, `.hoodie/.index/plans/<t>.json`, written before the requested instant and
never changed after: the plan is immutable and running it twice gives the same files.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from lakeward.core.exceptions import ConfigError, CorruptTableError
from lakeward.core.index.secondary.definitions import IndexDefinition
from lakeward.core.index.secondary.storage import PLANS_FOLDER
from lakeward.core.storage import Storage
from lakeward.core.timeline import avro_plans

NS = avro_plans.NS
PARTITION_PREFIX = "lakeward_secondary_index/"
OPERATION_TYPE = "INDEX"

INDEX_PARTITION_INFO: dict[str, Any] = {
    "type": "record",
    "name": "HoodieIndexPartitionInfo",
    "namespace": NS,
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "metadataPartitionPath", "type": ["null", "string"], "default": None},
        {"name": "indexUptoInstant", "type": ["null", avro_plans.INSTANT_INFO], "default": None},
    ],
}
INDEX_PLAN: dict[str, Any] = {
    "type": "record",
    "name": "HoodieIndexPlan",
    "namespace": NS,
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {
            "name": "indexPartitionInfos",
            "type": ["null", {"type": "array", "items": INDEX_PARTITION_INFO}],
            "default": None,
        },
    ],
}
INDEX_COMMIT_METADATA: dict[str, Any] = {
    "type": "record",
    "name": "HoodieIndexCommitMetadata",
    "namespace": NS,
    "fields": [
        {"name": "version", "type": ["int", "null"], "default": 1},
        {"name": "operationType", "type": ["null", "string"], "default": None},
        {
            "name": "indexPartitionInfos",
            "type": ["null", {"type": "array", "items": INDEX_PARTITION_INFO}],
            "default": None,
        },
    ],
}


class IndexBuildStrategy(str, Enum):
    """Which base files a plan takes."""

    #: Latest base files that lack an index file of some index (new files since the last build).
    INCREMENTAL = "INCREMENTAL"
    #: Every latest base file, every index (a rebuild).
    ALL = "ALL"

    @classmethod
    def parse(cls, value: str | IndexBuildStrategy) -> IndexBuildStrategy:
        if isinstance(value, IndexBuildStrategy):
            return value
        try:
            return cls(str(value).strip().upper())
        except ValueError:
            raise ConfigError(f"index build strategy {value!r} is not one of {[s.value for s in cls]}") from None


@dataclass(frozen=True)
class IndexBuildTask:
    """One base file and the indexes to build for it."""

    partition_path: str
    file_id: str
    base_file: str
    indexes: tuple[str, ...]


@dataclass(frozen=True)
class IndexBuildPlan:
    instant_time: str
    strategy: IndexBuildStrategy
    definitions: tuple[IndexDefinition, ...]
    tasks: tuple[IndexBuildTask, ...]
    upto_instant: str = ""
    upto_action: str = ""

    def to_json(self) -> bytes:
        doc = {
            "version": 1,
            "instant_time": self.instant_time,
            "strategy": self.strategy.value,
            "upto_instant": self.upto_instant,
            "upto_action": self.upto_action,
            "definitions": [d.to_json() for d in self.definitions],
            "tasks": [
                {
                    "partition": t.partition_path,
                    "file_id": t.file_id,
                    "base_file": t.base_file,
                    "indexes": list(t.indexes),
                }
                for t in self.tasks
            ],
        }
        return json.dumps(doc, indent=2).encode()

    @classmethod
    def from_json(cls, data: bytes) -> IndexBuildPlan:
        doc = json.loads(data)
        return cls(
            str(doc["instant_time"]),
            IndexBuildStrategy.parse(doc["strategy"]),
            tuple(IndexDefinition.from_json(d) for d in doc["definitions"]),
            tuple(
                IndexBuildTask(t["partition"], t["file_id"], t["base_file"], tuple(t["indexes"])) for t in doc["tasks"]
            ),
            str(doc.get("upto_instant") or ""),
            str(doc.get("upto_action") or ""),
        )

    def hudi_plan(self) -> dict[str, Any]:
        """The `HoodieIndexPlan` record of the requested and inflight instant files."""
        upto = {"commitTime": self.upto_instant, "action": self.upto_action} if self.upto_instant else None
        return {
            "version": 1,
            "indexPartitionInfos": [
                {"version": 1, "metadataPartitionPath": PARTITION_PREFIX + d.name, "indexUptoInstant": upto}
                for d in self.definitions
            ],
        }

    def commit_metadata(self) -> bytes:
        record = {**self.hudi_plan(), "operationType": OPERATION_TYPE}
        return avro_plans.serialize(INDEX_COMMIT_METADATA, record)


def plan_path(instant_time: str) -> str:
    return posixpath.join(PLANS_FOLDER, f"{instant_time}.json")


def write_plan(storage: Storage, plan: IndexBuildPlan) -> None:
    storage.write_bytes(plan_path(plan.instant_time), plan.to_json())


def read_plan(storage: Storage, instant_time: str) -> IndexBuildPlan:
    try:
        return IndexBuildPlan.from_json(storage.read_bytes(plan_path(instant_time)))
    except FileNotFoundError:
        raise CorruptTableError(
            f"index build {instant_time} has no plan file {plan_path(instant_time)}; roll it back"
        ) from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptTableError(f"index build plan {plan_path(instant_time)} cannot be read: {exc}") from exc


def planned_base_files(plans: Sequence[IndexBuildPlan]) -> set[tuple[str, str]]:
    """(base file, index name) pairs that pending plans will build."""
    return {(t.base_file, name) for p in plans for t in p.tasks for name in t.indexes}
