"""Secondary index builds as a table service: a plan (`<t>.indexing.requested`) and its idempotent execution.

See `execute` for the life cycle and `plan` for how the plan is stored.
"""

from lakeward.core.table_services.index_build.execute import (
    IndexBuildResult,
    pending_index_builds,
    rollback_index_build,
    run_index_build,
    schedule_index_build,
)
from lakeward.core.table_services.index_build.plan import IndexBuildPlan, IndexBuildStrategy, read_plan

__all__ = [
    "IndexBuildPlan",
    "IndexBuildResult",
    "IndexBuildStrategy",
    "pending_index_builds",
    "read_plan",
    "rollback_index_build",
    "run_index_build",
    "schedule_index_build",
]
