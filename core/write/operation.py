"""Write operations, by the names Hudi records in `operationType`."""

from __future__ import annotations

from enum import Enum

from lakeward.core.timeline import Action


class WriteOperation(str, Enum):
    INSERT = "INSERT"
    UPSERT = "UPSERT"
    BULK_INSERT = "BULK_INSERT"
    DELETE = "DELETE"
    INSERT_OVERWRITE = "INSERT_OVERWRITE"
    INSERT_OVERWRITE_TABLE = "INSERT_OVERWRITE_TABLE"
    DELETE_PARTITION = "DELETE_PARTITION"

    @property
    def replaces(self) -> bool:
        return self in (
            WriteOperation.INSERT_OVERWRITE,
            WriteOperation.INSERT_OVERWRITE_TABLE,
            WriteOperation.DELETE_PARTITION,
        )

    @property
    def action(self) -> Action:
        return Action.REPLACE_COMMIT if self.replaces else Action.COMMIT
