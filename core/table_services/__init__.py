"""Table services, each a plan written on the timeline plus an idempotent execute: compaction, clustering,
cleaning, rollback, savepoint/restore, archival, change tracking and index builds; and the table-version
upgrade/downgrade (`upgrade`), which runs those services first as Hudi's upgrade handlers do."""

from lakeward.core.lazy import on_first_use

__getattr__ = on_first_use(__name__)  # submodules load when first used (start-up time, issue 23)
