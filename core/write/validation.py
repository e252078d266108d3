"""Batch validation: the checks of a write's input that come before any instant exists.

A bad batch must fail with an error naming the column (and the value or the option) and
leave the table exactly as it was, so these checks run while a write is prepared, before
its requested instant is created. Both data planes call them: the local plane on the whole
Arrow batch, the Spark plane on each Arrow chunk inside its keying tasks. Record keys and
partition values are checked where they are computed (`keygen`), type changes where the
schema is evolved (`schema.evolve_schema`); both run in the same preparation.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from lakeward.core.config.table import TableConfig
from lakeward.core.exceptions import InvalidRecordError, SchemaError
from lakeward.core.write.operation import WriteOperation

#: The column that marks a row of an upsert as a delete (Hudi's `_hoodie_is_deleted`).
IS_DELETED = "_hoodie_is_deleted"


def check_batch_schema(schema: pa.Schema, operation: WriteOperation) -> None:
    """Fail on a batch schema no write can take: duplicated column names, a non-boolean `_hoodie_is_deleted`.

    Duplicated names make every by-name lookup ambiguous; Hudi (Spark) refuses them too.
    `_hoodie_is_deleted` must be a boolean (an all-null column is accepted as "no deletes").
    """
    duplicated = sorted(name for name, count in Counter(schema.names).items() if count > 1)
    if duplicated:
        raise SchemaError(
            f"the batch has the column {duplicated[0]!r} more than once"
            + (f" (duplicated columns: {duplicated})" if len(duplicated) > 1 else "")
            + "; column names must be unique"
        )
    if IS_DELETED in schema.names and operation is not WriteOperation.DELETE:
        typ = schema.field(IS_DELETED).type
        if not (pa.types.is_boolean(typ) or pa.types.is_null(typ)):
            raise SchemaError(
                f"the column {IS_DELETED!r} must be of type bool (true marks a row to delete), "
                f"but the batch has it as {typ}"
            )


def check_batch_rows(batch: pa.Table, config: TableConfig, operation: WriteOperation, whole_batch: bool = True) -> None:
    """Fail on rows no write can take: a null ordering (precombine) value.

    A row without an ordering value cannot be ordered against the stored row or the other
    rows of its key; Hudi refuses it ("The value of <field> can not be null"). Deletes by key
    carry no ordering value and are not checked. `whole_batch` is False when `batch` is one
    part of the write's batch (a Spark task's chunk): the counts are then that part's.
    """
    ordering = config.precombine_field
    if operation is WriteOperation.DELETE or ordering is None or ordering not in batch.column_names:
        return
    nulls = batch.column(ordering).null_count
    if nulls:
        scope = "the batch" if whole_batch else "one part (Spark task) of the batch"
        raise InvalidRecordError(
            f"{nulls} row(s) of {scope} have a null value in the ordering field {ordering!r} "
            f"(hoodie.table.precombine.field); {batch.num_rows - nulls} row(s) have one. "
            "Every row needs an ordering value to be merged with the stored row of its key"
        )


__all__ = [
    "IS_DELETED",
    "check_batch_rows",
    "check_batch_schema",
]
