import datetime as dt
import tempfile

import pyarrow as pa

from lakeward import Table

base = tempfile.mkdtemp()  # any folder, or a URI: s3://bucket/..., gs://..., hdfs://...
trips = Table.create(
    f"{base}/trips",
    record_key="trip_id",  # one field, or several: ["id", "name"]
    partition_by="city",  # optional
    ordering_field="ts",  # the largest value wins when a key repeats
)
first = trips.upsert(pa.table({"trip_id": ["t1", "t2"], "city": ["sf", "nyc"], "fare": [19.1, 27.7], "ts": [1, 1]}))
second = trips.upsert(pa.table({"trip_id": ["t2", "t3"], "city": ["nyc", "sf"], "fare": [30.0, 8.5], "ts": [2, 2]}))
print(second.num_updates, second.num_inserts)  # 1 1

print(trips.read(columns=["trip_id", "fare"]).sort_by("trip_id").to_pylist())  # the latest state
commits = trips.completed_instants()  # the timeline: Instant objects, oldest first
print(trips.read(as_of=commits[0]).num_rows)  # time travel to the first commit: 2
print(trips.read(as_of=dt.datetime.now()).num_rows)  # ... or to a moment: the latest commit before it: 3
print(trips.read_incremental(first.instant_time).column("trip_id").to_pylist())  # changed since: t2, t3
print(trips.read(filters=[("city", "=", "sf")]).num_rows)  # partition pruning: 2

trips.delete(keys=["t1"])
print(sorted(trips.read().column("trip_id").to_pylist()))  # ['t2', 't3']
