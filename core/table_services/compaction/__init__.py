"""Compaction of merge-on-read tables: a plan (`<t>.compaction.requested`) and its idempotent execution.

- `schedule_compaction`: under the table lock, choose file slices with log files by the
  configured strategy and write the plan. Writers that come later append to new slices
  based on `<t>`; readers merge the old slice with those logs until `<t>` completes.
- `run_compaction`: fold every planned slice (base file + log files) into a new base
  file named with `<t>`, one task per slice on the engine, then complete `<t>` as a
  `commit`. Running a plan again after a crash gives the same result as running it once.
"""

from lakeward.core.table_services.compaction.execute import CompactionResult, compact_file_slice, run_compaction
from lakeward.core.table_services.compaction.schedule import pending_compactions, schedule_compaction

__all__ = ["CompactionResult", "compact_file_slice", "pending_compactions", "run_compaction", "schedule_compaction"]
