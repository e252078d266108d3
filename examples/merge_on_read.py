import tempfile

import pyarrow as pa

from lakeward import Table

events = Table.create(f"{tempfile.mkdtemp()}/events", record_key="id", ordering_field="ts", table_type="MERGE_ON_READ")
events.upsert(pa.table({"id": [1, 2], "v": ["a", "b"], "ts": [1, 1]}))
events.upsert(pa.table({"id": [2], "v": ["B"], "ts": [2]}))  # appended to a log file, not rewritten
print(sorted(events.read().column("v").to_pylist()))  # ['B', 'a']: base files merged with their logs
print(sorted(events.read(read_optimized=True).column("v").to_pylist()))  # ['a', 'b']: base files only

plan = events.schedule_compaction(force=True)  # a compaction plan on the timeline (None when none is due)
events.run_compaction(plan)  # what the daemon does for you, by policy
print(sorted(events.read(read_optimized=True).column("v").to_pylist()))  # ['B', 'a']
