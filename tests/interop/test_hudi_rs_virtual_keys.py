"""hudi-rs reads the virtual-key tables lakeward writes (`hoodie.populate.meta.fields=false`) to a model's rows.

For table versions 6, 8 and 9, copy-on-write and merge-on-read: a small randomised sequence
of inserts, upserts (updates, new keys, older ordering values) and deletes, then compaction
(merge-on-read) or clustering (copy-on-write), then more writes. After every step hudi-rs's
snapshot must hold the model's rows, and at the end lakeward and hudi-rs must agree on time
travel to every instant. The model is plain Python dicts, never lakeward's output.
Incremental reads are not compared: Hudi does not support them without meta fields.
"""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest

from lakeward import Table
from tests.interop.compare import comparable_rows, fail_on, hudi_snapshot, hudi_table, snapshot_mismatches

Row = dict[str, object]
OPTIONS = {"hoodie.populate.meta.fields": "false", "hoodie.parquet.small.file.limit": "0"}


def _batch(rows: list[Row]) -> pa.Table:
    return pa.table(
        {
            "key": pa.array([r["key"] for r in rows], pa.string()),
            "city": pa.array([r["city"] for r in rows], pa.string()),
            "ts": pa.array([r["ts"] for r in rows], pa.int64()),
            "amount": pa.array([r["amount"] for r in rows], pa.float64()),
        }
    )


def _data(rows: pa.Table | list[pa.RecordBatch]) -> list[Row]:
    """Data columns only: without meta fields neither reader returns the `_hoodie_*` columns' values."""
    got = comparable_rows(rows)
    return sorted(({k: v for k, v in r.items() if not k.startswith("_hoodie")} for r in got), key=repr)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("version", [6, 8, 9])
def test_hudi_rs_reads_virtual_key_writes_as_the_model(tmp_path: Path, version: int, table_type: str) -> None:
    rng = random.Random(f"{version}-{table_type}")
    path = str(tmp_path / "t")
    table = Table.create(
        path,
        record_key="key",
        partition_by="city",
        ordering_field="ts",
        table_type=table_type,
        table_version=version,
        options={
            **OPTIONS,
            "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
        },
    )
    model: dict[str, Row] = {}
    serial = 0

    def new_rows(n: int, ts: int) -> list[Row]:
        nonlocal serial
        rows = [
            {
                "key": f"k{serial + i:04d}",
                "city": rng.choice(["sf", "nyc", "la"]),
                "ts": ts,
                "amount": float(rng.randint(1, 999)),
            }
            for i in range(n)
        ]
        serial += n
        return rows

    def apply(rows: list[Row]) -> None:
        for r in rows:  # event-time ordering: the larger ts wins, ties go to the later write
            old = model.get(str(r["key"]))
            if old is None or int(r["ts"]) >= int(old["ts"]):  # type: ignore[call-overload]
                model[str(r["key"])] = r

    def agree(step: str) -> None:
        want = sorted(({k: r[k] for k in sorted(r)} for r in model.values()), key=repr)
        assert _data(Table.open(path).read()) == want, f"lakeward after {step}"
        assert _data(hudi_snapshot(hudi_table(path))) == want, f"hudi-rs after {step}"

    def random_write(ts: int) -> None:
        choice = rng.choice(["upsert", "upsert", "delete", "insert"]) if model else "insert"
        if choice == "insert":
            rows = new_rows(rng.randint(4, 10), ts)
            table.insert(_batch(rows))
            apply(rows)
        elif choice == "upsert":
            picked = rng.sample(sorted(model), k=min(len(model), rng.randint(1, 5)))
            # some updates carry an older ordering value: they lose, as in Hudi's DefaultHoodieRecordPayload
            rows = [{**model[k], "ts": ts if rng.random() < 0.8 else -1, "amount": float(ts)} for k in picked]
            rows += new_rows(rng.randint(0, 3), ts)
            table.upsert(_batch(rows))
            apply(rows)
        else:
            picked = rng.sample(sorted(model), k=min(len(model), rng.randint(1, 3)))
            table.delete(_batch([model[k] for k in picked]))
            for k in picked:
                del model[k]
        agree(f"{choice} at ts {ts}")

    for ts in range(1, 7):
        random_write(ts)
    if table_type == "MERGE_ON_READ":
        assert any(".log." in p.name for p in Path(path).rglob(".*")), "hudi-rs merged log records"
        instant = table.schedule_compaction(force=True)
        assert instant is not None
        table.run_compaction(instant)
        agree("compaction")
    else:
        instant = table.schedule_clustering()
        assert instant is not None
        table.run_clustering(instant)
        agree("clustering")
    for ts in range(7, 10):
        random_write(ts)

    instants = [i.time for i in Table.open(path).completed_instants()]
    fail_on(snapshot_mismatches(path, [None, *instants]))
