"""Clustering: rewrite small file slices into fewer, larger (optionally sorted) file groups.

- `schedule_clustering`: under the table lock, group the small file slices of each
  partition (`hoodie.clustering.plan.strategy.*`) and write the plan as
  `<t>.replacecommit.requested` (`HoodieRequestedReplaceMetadata`, operationType CLUSTER).
- `run_clustering`: one task per group writes its merged rows into new file groups named
  with `<t>` (records keep their commit times), then completes `<t>.replacecommit` with
  `partitionToReplaceFileIds`: readers stop seeing the input file groups from `<t>` on.
  Running a plan again after a crash gives the same result as running it once.
- BUCKET-index tables: each bucket's slice is clustered alone, back into its own file
  group (Hudi's single-file sort strategy), and only with sort columns; buckets are never
  merged, since a key's file group is fixed by its bucket.
"""

from lakeward.core.table_services.clustering.execute import ClusteringResult, cluster_group, run_clustering
from lakeward.core.table_services.clustering.schedule import (
    pending_clustering,
    plan_bucket_groups,
    plan_groups,
    schedule_clustering,
)

__all__ = [
    "ClusteringResult",
    "cluster_group",
    "pending_clustering",
    "plan_bucket_groups",
    "plan_groups",
    "run_clustering",
    "schedule_clustering",
]
