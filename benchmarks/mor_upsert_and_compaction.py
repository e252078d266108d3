"""Merge-on-read benchmark: upsert, snapshot read after 1 and 5 rounds, and compaction.

One run, the same seeded data as ``upsert_and_read.py`` (2,000,000 rows, 200,000-row
upserts: half updates, half new keys in round 1; later rounds update the same keys):

* upsert: lakeward MOR on the local engine and on the Spark engine (local[2]) against
  delta-rs ``merge`` (the foundation's peer), each on its own fresh table;
* snapshot read of the same lakeward MOR table after 1 and after 5 upsert rounds, by
  lakeward and by hudi-rs (both results checked to be the same rows count and sums);
* compaction of that table against the raw floor: pyarrow reading every latest base
  file and writing it again (no merging at all).

Run ``--help`` for flags. Figures: best of ``--read-repeat`` for reads, one run each for
writes (a write changes the table).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from upsert_and_read import SEED, aggregates, make_dataset, timed, verify  # noqa: E402 -- the sibling benchmark's data


def rounds(data: Any, n: int) -> list[pa.Table]:
    """Upsert batches: round 1 is the standard batch; each later round updates the same keys (newer ts)."""
    out = []
    for k in range(n):
        batch = data.upsert
        out.append(batch.set_column(batch.schema.get_field_index("ts"), "ts", pc.add(batch["ts"], k)))
    return out


def interleaved_reads(path: str, repeat: int, label: str) -> tuple[dict[str, float], pa.Table, pa.Table]:
    """Snapshot reads by lakeward and hudi-rs, alternating, `repeat` each: best and median wall and CPU seconds."""
    from lakeward import Table

    readers = {"lakeward": lambda: Table.open(path).read(), "hudi-rs": lambda: hudi_read(path)}
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in readers}
    results: dict[str, pa.Table] = {}
    for _ in range(repeat):
        for name, read in readers.items():
            gc.collect()
            wall, cpu = time.perf_counter(), time.process_time()
            results[name] = read()
            timings[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    out = {}
    for name, runs in timings.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        out[f"lakeward MOR read {label} ({name})"] = min(walls)
        out[f"lakeward MOR read {label} ({name}) wall median"] = statistics.median(walls)
        out[f"lakeward MOR read {label} ({name}) cpu best"] = min(cpus)
        out[f"lakeward MOR read {label} ({name}) cpu median"] = statistics.median(cpus)
    return out, results["lakeward"], results["hudi-rs"]


def hudi_read(path: str) -> pa.Table:
    import hudi

    table = hudi.HudiTableBuilder.from_base_uri(path).build()
    return pa.Table.from_batches(table.read(), schema=table.get_schema_with_meta_fields())


def same(label: str, ours: pa.Table, theirs: pa.Table) -> None:
    """Both readers returned the same table (row count and column sums)."""
    verify(label, ours, aggregates(theirs))


def cpu_timed(fn: Any) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process, all threads) of one call."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


@dataclass(frozen=True)
class FloorSlice:
    """One file slice as the raw floor sees it: its base file and its log records as plain Avro files."""

    base: str
    logs: list[str]


def floor_inputs(root: Path, path: str) -> list[FloorSlice]:
    """The latest slices of the table, each log block's records written once as a plain Avro file.

    Untimed set-up: the floor reads the same records in the same encoding (Avro binary)
    without Hudi's log framing, which is the least any reader of Hudi logs decodes.
    """
    import polars as pl

    from lakeward import Table
    from lakeward.core.file_group.reader import VisibleInstants, visible_log_blocks

    table = Table.open(path)
    visible = VisibleInstants.from_timeline(table.timeline())
    out = []
    for i, file_slice in enumerate(table.file_slices()):
        assert file_slice.base_file is not None
        logs = []
        for j, block in enumerate(visible_log_blocks(table.storage, file_slice.log_files, visible)):
            target = str(root / f"floor-log-{i}-{j}.avro")
            pl.from_arrow(block.records).write_avro(target)  # type: ignore[union-attr]
            logs.append(target)
        out.append(FloorSlice(str(Path(path) / file_slice.base_file.path), logs))
    return out


def floor_merge(slices: list[FloorSlice], out_dir: Path) -> None:
    """The raw floor of a compaction: per slice read the base file and the logs, merge, write one file.

    Commit-time merge without any Hudi logic: the last log record of a key replaces the
    base record; no ordering check, no deletes, no meta column rewritten, no bloom filter.
    """
    import polars as pl

    for i, item in enumerate(slices):
        base = pq.read_table(item.base)
        logged = pa.concat_tables([pl.read_avro(f).to_arrow() for f in item.logs]).cast(base.schema)
        rank = pa.array(np.arange(logged.num_rows), pa.int64())
        keys = logged.column("_hoodie_record_key")
        latest = pa.table({"k": keys, "r": rank}).group_by("k", use_threads=False).aggregate([("r", "max")])
        winners = logged.take(pa.array(np.sort(latest.column("r_max").to_numpy())))
        replaced = pc.is_in(base.column("_hoodie_record_key"), value_set=winners.column("_hoodie_record_key"))
        kept = base.filter(pc.invert(replaced))
        pq.write_table(
            pa.concat_tables([kept, winners]), str(out_dir / f"floor-merge-{i}.parquet"), compression="snappy"
        )


def floor_rewrite(base_files: list[str], out_dir: Path) -> None:
    """Base files only, read and written again: no logs, no merge (the floor of earlier figures)."""
    for i, f in enumerate(base_files):
        pq.write_table(pq.read_table(f), str(out_dir / f"floor-{i}.parquet"), compression="snappy")


def compaction_against_floors(root: Path, path: str, expected: dict[str, Any], repeat: int) -> dict[str, float]:
    """Compaction of the 5-round table, `repeat` times (each on a fresh copy), interleaved with both floors.

    Returns the best and median wall and CPU seconds of each. CPU time (all threads of this
    process) is the steadier figure on a shared machine.
    """
    from lakeward import Table

    slices = floor_inputs(root, path)
    runs: dict[str, list[tuple[float, float]]] = {"lakeward compaction": [], "floor merge": [], "floor rewrite": []}
    for k in range(repeat):
        copy = str(root / f"compact-{k}")
        shutil.copytree(path, copy)
        instant = Table.open(copy).schedule_compaction(force=True)
        assert instant is not None
        runs["floor merge"].append(cpu_timed(lambda: floor_merge(slices, root)))
        runs["lakeward compaction"].append(cpu_timed(lambda c=copy, i=instant: Table.open(c).run_compaction(i)))
        runs["floor rewrite"].append(cpu_timed(lambda: floor_rewrite([s.base for s in slices], root)))
        if k == 0:
            verify("lakeward compaction", Table.open(copy).read(), expected)
        shutil.rmtree(copy)
    out = {}
    for name, timings in runs.items():
        walls, cpus = [w for w, _ in timings], [c for _, c in timings]
        out[f"{name} wall best"], out[f"{name} wall median"] = min(walls), statistics.median(walls)
        out[f"{name} cpu best"], out[f"{name} cpu median"] = min(cpus), statistics.median(cpus)
    return out


def run(args: argparse.Namespace) -> dict[str, float]:
    from lakeward import Table

    data = make_dataset(args.rows, args.upsert_rows, SEED)
    batches = rounds(data, 5)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="lakeward-mor-bench-") as tmp:
        root = Path(tmp)
        options = {"hoodie.compact.inline.max.delta.commits": 1}

        def create(name: str) -> Any:
            table = Table.create(
                str(root / name),
                record_key="id",
                partition_by="part",
                ordering_field="ts",
                table_type="MERGE_ON_READ",
                options=options,
            )
            table.bulk_insert(data.initial)
            return table

        # -- upsert: lakeward local engine, and the read / compaction table --------------
        path = str(root / "mor-local")
        create("mor-local")
        out["lakeward MOR upsert (local)"], _ = timed(lambda: Table.open(path).upsert(batches[0]))
        timings, ours, theirs = interleaved_reads(path, args.read_repeat, "after 1")
        out.update(timings)
        verify("lakeward MOR upsert (local)", ours, data.expected)
        same("after 1 round", ours, theirs)
        del ours, theirs
        for k, batch in enumerate(batches[1:], start=2):
            t, _ = timed(lambda batch=batch: Table.open(path).upsert(batch))
            out[f"lakeward MOR upsert round {k} (local)"] = t
        timings, ours, theirs = interleaved_reads(path, args.read_repeat, "after 5")
        out.update(timings)
        same("after 5 rounds", ours, theirs)
        expected = aggregates(ours)
        del ours, theirs

        out.update(compaction_against_floors(root, path, expected, args.compaction_repeat))

        # -- delta-rs merge on the same data ------------------------------------------------
        try:
            from deltalake import DeltaTable, write_deltalake

            dpath = str(root / "delta")
            write_deltalake(dpath, data.initial, partition_by=["part"])

            def merge() -> None:
                (
                    DeltaTable(dpath)
                    .merge(batches[0], predicate="t.id = s.id", source_alias="s", target_alias="t")
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )

            out["delta-rs merge"], _ = timed(merge)
        except ImportError as exc:
            print(f"deltalake unavailable: {exc}")

        # -- upsert on the Spark engine ------------------------------------------------------
        if not args.no_spark:
            from spark_upsert import cached, spark_session

            from lakeward.spark import SparkEngine

            spark = spark_session(args.cores, args.memory)
            engine = SparkEngine(spark)
            warm = str(root / "warm")
            Table.create(warm, record_key="id", partition_by="part", ordering_field="ts", table_type="MERGE_ON_READ")
            Table.open(warm).bulk_insert(data.initial.slice(0, 2000))
            Table.open(warm, engine=engine).upsert(cached(spark, data.upsert.slice(0, 200)))
            create("mor-spark")
            batch = cached(spark, batches[0])
            spath = str(root / "mor-spark")
            out["lakeward MOR upsert (spark)"], _ = timed(lambda: Table.open(spath, engine=engine).upsert(batch))
            verify("lakeward MOR upsert (spark)", Table.open(spath).read(), data.expected)
            again = cached(spark, batches[1])
            out["lakeward MOR upsert round 2 (spark)"], _ = timed(
                lambda: Table.open(spath, engine=engine).upsert(again)
            )
            spark.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--upsert-rows", type=int, default=200_000)
    p.add_argument("--read-repeat", type=int, default=3)
    p.add_argument("--compaction-repeat", type=int, default=3, help="compactions, each of a fresh copy of the table")
    p.add_argument("--cores", type=int, default=2)
    p.add_argument("--memory", default="6g")
    p.add_argument("--no-spark", action="store_true")
    args = p.parse_args(argv)
    print(f"data: rows={args.rows:,} upsert={args.upsert_rows:,}", flush=True)
    out = run(args)
    width = max(len(k) for k in out)
    for name, seconds in out.items():
        print(f"{name:<{width}}  {seconds:8.3f}s")
    delta = out.get("delta-rs merge")
    appends = [out[f"lakeward MOR upsert round {k} (local)"] for k in range(2, 6)]
    steady = sum(appends) / len(appends)
    print(f"lakeward MOR upsert, log appends (mean of rounds 2-5, local): {steady:.3f}s")
    if delta:
        print(f"  / delta-rs merge: {steady / delta:.2f}x (target <= 0.5x)")
        print(
            f"lakeward MOR upsert round 1 (local; rewrites the small base files it inserts into): "
            f"{out['lakeward MOR upsert (local)'] / delta:.2f}x delta-rs merge"
        )
        for key in ("lakeward MOR upsert (spark)", "lakeward MOR upsert round 2 (spark)"):
            if key in out:
                print(f"{key} / delta-rs merge: {out[key] / delta:.2f}x")
    for n, target in ((1, "1.0"), (5, "0.8")):
        for stat in ("", " wall median", " cpu best", " cpu median"):
            ours = out[f"lakeward MOR read after {n} (lakeward){stat}"]
            theirs = out[f"lakeward MOR read after {n} (hudi-rs){stat}"]
            print(
                f"MOR read after {n} round(s){stat or ' wall best'}: lakeward / hudi-rs = "
                f"{ours / theirs:.2f}x (target <= {target}x)"
            )
    for clock in ("wall", "cpu"):
        for stat in ("best", "median"):
            ours = out[f"lakeward compaction {clock} {stat}"]
            merge, rewrite = out[f"floor merge {clock} {stat}"], out[f"floor rewrite {clock} {stat}"]
            print(
                f"compaction {clock} {stat}: {ours:.3f}s = {ours / merge:.2f}x the merge floor "
                f"(read base + logs, merge, write; target <= 1.3x), {ours / rewrite:.2f}x the base-file rewrite"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
