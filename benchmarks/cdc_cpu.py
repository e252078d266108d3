"""CDC query CPU time against delta-rs `load_cdf`, interleaved, on tables built once (issue 19 target 1).

`cdc.py` measures wall time in one long run; on a machine shared by many jobs its ratios
measure the load. This script builds `cdc.py`'s tables once (`build`: copy-on-write and
merge-on-read in every logging mode, merge-on-read also after change tracking, and delta-rs
with the change data feed, all with the same commits) under a directory that survives
runs, then (`measure`) times each lakeward query in CPU time (`time.process_time`: every
thread of the process, delta-rs's Rust threads included), each followed by a delta-rs
`load_cdf` over the same commits, and prints best and median of each and their ratios.
Every result is checked first against the workload (`cdc.check_changes`) and every mode's
images against DATA_BEFORE_AFTER's (`cdc.check_same_images`); `--save` keeps the results as
references that later runs must equal exactly (Arrow IPC files next to the tables).

    python benchmarks/cdc_cpu.py build --rows 53334
    python benchmarks/cdc_cpu.py measure --rows 53334 --repeat 7
    python benchmarks/cdc_cpu.py delete-blocks --repeat 7   # delete-block decode alone
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

sys.path.insert(0, str(Path(__file__).resolve().parent))

import cdc  # noqa: E402 -- the sibling benchmark's workload, tables and checks


def build(root: Path, rows: int) -> None:
    """`cdc.py`'s tables for `rows`, with `meta.json` (paths, query range) and the workload's expectations."""
    from lakeward import Table

    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    wl = cdc.make_workload(rows, 10, 0.01, 0.0025, 0.0025)
    lake = []
    for tt in cdc.TABLE_TYPES:
        for mode in cdc.MODES:
            v = cdc.Variant(f"{tt} {mode}", str(root / f"{tt}-{mode.lower()}"), "lakeward", tt, mode)
            cdc.create_lakeward(v, wl.initial)
            lake.append(v)
    delta = cdc.Variant("delta", str(root / "delta"), "delta", mode="cdf")
    cdc.create_delta(delta, wl.initial, "snappy")
    for batch in wl.commits:
        for v in lake:
            cdc.commit_lakeward(v, batch)
        cdc.commit_delta(delta, batch, "snappy")
    meta: dict[str, Any] = {"delta": {"path": delta.path}}
    for v in lake:
        meta[v.name] = {"path": v.path, "begin": v.begin, "end": v.instants[-1]}
        if v.table_type == "mor":
            tracked = v.path + "-tracked"
            shutil.copytree(v.path, tracked)
            table = Table.open(tracked, options=v.write_options)
            table.run_change_tracking(table.schedule_change_tracking())  # type: ignore[arg-type]
            meta[v.name + " tracked"] = {"path": tracked, "begin": v.begin, "end": v.instants[-1]}
    (root / "meta.json").write_text(json.dumps(meta, indent=1))
    (root / "expected.pkl").write_bytes(pickle.dumps(wl.expected))


def cpu(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(root: Path, repeat: int, only: str, save: bool) -> int:
    from deltalake import DeltaTable

    from lakeward import Table

    meta = json.loads((root / "meta.json").read_text())
    expected = pickle.loads((root / "expected.pkl").read_bytes())

    def lake(name: str) -> pa.Table:
        m = meta[name]
        return Table.open(m["path"]).read_changes(m["begin"], m["end"], images="struct")

    def delta() -> pa.Table:
        cdf = DeltaTable(meta["delta"]["path"]).load_cdf(starting_version=1, ending_version=10)
        return pa.RecordBatchReader.from_stream(cdf).read_all()

    names = sorted((n for n in meta if n != "delta" and only in n), key=lambda n: "DATA_BEFORE_AFTER" not in n)
    failures = 0
    reference: dict[str, pa.Table] = {}
    for name in names:  # warm-up and checks
        out = lake(name)
        try:
            cdc.check_changes(name, out, expected)
            table_type = name.split()[0]
            if table_type in reference:
                cdc.check_same_images(name, out, reference[table_type])
            elif "DATA_BEFORE_AFTER" in name:
                reference[table_type] = out
            saved = root / f"{name.replace(' ', '_')}.arrow"
            if save:
                with ipc.new_file(saved, out.schema) as writer:
                    writer.write_table(out)
            elif saved.exists() and not out.equals(ipc.open_file(saved).read_all()):
                raise cdc.CheckFailed(f"{name}: differs from the saved reference {saved}")
        except cdc.CheckFailed as exc:
            print(f"CHECK FAILED: {exc}")
            failures += 1
    delta()
    times: dict[str, list[float]] = {n: [] for n in names}
    delta_times: list[float] = []
    for _ in range(repeat):
        for name in names:
            times[name].append(cpu(lambda name=name: lake(name)))  # type: ignore[misc]
            delta_times.append(cpu(delta))
    best, median = min(delta_times), statistics.median(delta_times)
    print(
        f"{root.name}: load average {os.getloadavg()[0]:.1f}; delta-rs load_cdf CPU best {best * 1e3:.1f} ms, ", end=""
    )
    print(f"median {median * 1e3:.1f} ms")
    for name in names:
        b, m = min(times[name]), statistics.median(times[name])
        print(f"{name:<32} best {b * 1e3:8.1f} ms ({b / best:5.2f}x)  median {m * 1e3:8.1f} ms ({m / median:5.2f}x)")
    return 1 if failures else 0


def delete_blocks(sizes: list[int], repeat: int) -> int:
    """CPU time of decoding one delete block of each size: entry by entry (fastavro, the decoder
    before issue 19's fifth round and still the fallback) against column-wise (polars), for the
    ordering wrappers lakeward and Hudi write most (LongWrapper, Spark SQL's IntWrapper 0) and
    none. Both results are checked equal first."""
    from lakeward.core.file_group.log_file import content

    print(f"load average {os.getloadavg()[0]:.1f}; CPU per block, best of {repeat}")
    failures = 0
    for n in sizes:
        keys = [f"{i:08x}-7f3a-4c1e-9b2d-{i * 7919 % 10**12:012d}" for i in range(n)]
        cases = {
            "LongWrapper": pa.array([1_700_000_000_000 + i * 37 for i in range(n)], pa.int64()),
            "IntWrapper 0": pa.array([0] * n, pa.int32()),
            "no ordering": pa.nulls(n),
        }
        for label, ordering in cases.items():
            records = pa.table(
                {"record_key": keys, "partition_path": [f"city={i % 3}" for i in range(n)], "ordering_value": ordering}
            )
            block = content.encode_delete_records(records)
            old = content._decode_deletes_with_fastavro(block[8:])
            new = content.decode_delete_records(block)
            if not new.equals(old) or content._decode_deletes_column_wise(block[8:]) is None:
                print(f"CHECK FAILED: {n} entries, {label}: the column-wise decode differs or was not taken")
                failures += 1
            before = min(cpu(partial(content._decode_deletes_with_fastavro, block[8:])) for _ in range(repeat))
            after = min(cpu(partial(content.decode_delete_records, block)) for _ in range(repeat))
            print(
                f"{n:>7} entries, {label:<13} fastavro {before * 1e3:8.2f} ms  column-wise {after * 1e3:7.2f} ms"
                f"  ({before / after:5.1f}x)"
            )
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "measure", "delete-blocks"])
    parser.add_argument("--rows", type=int, default=cdc.SMALL_ROWS)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", default="", help="measure only the tables whose name contains this")
    parser.add_argument("--save", action="store_true", help="keep the results as the references of later runs")
    parser.add_argument("--workdir", default="/tmp/lakeward-cdc-cpu")
    parser.add_argument("--entries", default="10000,100000", help="delete-blocks: entries per block")
    args = parser.parse_args()
    if args.action == "delete-blocks":
        return delete_blocks([int(n) for n in args.entries.split(",")], args.repeat)
    root = Path(args.workdir) / f"rows{args.rows}"
    if args.action == "build":
        build(root, args.rows)
        return 0
    return measure(root, args.repeat, args.only, args.save)


if __name__ == "__main__":
    sys.exit(main())
