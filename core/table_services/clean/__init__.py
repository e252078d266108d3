"""Cleaning: delete file slices no reader, savepoint or pending plan needs any more (plan + idempotent execute).

- `schedule_clean`: under the table lock, plan by `hoodie.cleaner.policy` and write
  `<t>.clean.requested` (`HoodieCleanerPlan`).
- `run_clean`: `<t>.clean.inflight`, delete the planned files, complete `<t>.clean`
  (`HoodieCleanMetadata`, with `earliestCommitToRetain`).
- `check_as_of_retained` / `check_incremental_retained`: reads of cleaned instants fail clearly;
  `first_retained_begin`: where a range from "earliest" begins.
"""

from lakeward.core.table_services.clean.execute import CleanResult, run_clean
from lakeward.core.table_services.clean.plan import CleanPlan, pending_cleans, plan_clean, schedule_clean
from lakeward.core.table_services.clean.retention import (
    check_as_of_retained,
    check_incremental_retained,
    first_retained_begin,
    oldest_readable_instant,
)

__all__ = [
    "CleanPlan",
    "CleanResult",
    "check_as_of_retained",
    "check_incremental_retained",
    "first_retained_begin",
    "oldest_readable_instant",
    "pending_cleans",
    "plan_clean",
    "run_clean",
    "schedule_clean",
]
