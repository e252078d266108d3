"""Clustering: rewrite small file slices into fewer, larger (optionally sorted) file groups.

- `schedule_clustering`: under the table lock, group the small file slices of each
  partition (`hoodie.clustering.plan.strategy.*`) and write the plan as
  `<t>.replacecommit.requested` (`HoodieRequestedReplaceMetadata`, operationType CLUSTER).
- `run_clustering`: one task per group writes its merged rows into new file groups named
  with `<t>` (records keep their commit times), then completes `<t>.replacecommit` with
  `partitionToReplaceFileIds`: readers stop seeing the input file groups from `<t>` on.
  Running a plan again after a crash gives the same result as running it once.
"""

from lakeward.core.table_services.clustering.execute import ClusteringResult, cluster_group, run_clustering
from lakeward.core.table_services.clustering.schedule import pending_clustering, plan_groups, schedule_clustering

__all__ = [
    "ClusteringResult",
    "cluster_group",
    "pending_clustering",
    "plan_groups",
    "run_clustering",
    "schedule_clustering",
]
