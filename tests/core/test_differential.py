"""Randomised differential test: a model of the table as a dict, against lakeward and hudi-rs.

Every step applies one write operation (insert, upsert with some `_hoodie_is_deleted`
rows, bulk_insert, delete by keys, insert_overwrite, insert_overwrite_table,
delete_partition) or a table service (compaction scheduled and run later, so writes
land while it is pending; clustering; clean; archival; a savepoint of the latest write
and a restore to the latest savepoint, which brings back the model's rows then) to a
lakeward table and, for writes, to `ExpectedTable` (tests/support/write_model.py). After
every step the snapshot read by lakeward and by hudi-rs must equal the model's rows (so no
key is ever read twice), and now and then a time-travel read to an earlier write must
equal the model's state then. At the end, time travel to every write still on the table
(archived ones too) must equal the model's rows then, and hudi-rs must read every
readable incremental range as lakeward does.

On table versions 6, 8 and 9 (Hudi 1.x: timeline layout 2, completion-time ranges, the
LSM history): one seed per version in the default run.

Configurations cover both table types and every index: BLOOM with a small saturated
filter (`hoodie.index.bloom.num_entries=60`, `fpp=0.2`, no range pruning: almost every
key is a candidate of every file), BLOOM at default settings, SIMPLE and BUCKET;
multi-field record keys whose values hold ',' and ':' (the complex key generator's
separators) and multi-field partition paths. The key states issue 18 is about arise by
construction: keys only in a log (BUCKET inserts into existing buckets on merge-on-read;
re-upserts around a pending compaction), keys deleted and re-inserted around a pending
compaction, keys in saturated bloom filters.

A fixed seed set runs by default; `-m slow` runs many more.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.config.properties import parse_properties
from lakeward.core.exceptions import InstantNotFoundError
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.table import Table
from tests.interop.compare import fail_on
from tests.support.hudi_rs_states import readable_mismatches
from tests.support.write_model import ExpectedTable

SMALL_BLOOM = {
    "hoodie.index.bloom.num_entries": "60",
    "hoodie.index.bloom.fpp": "0.2",
    "hoodie.bloom.index.prune.by.ranges": "false",
    # No small files: every insert starts file groups, so keys have many candidate files.
    "hoodie.parquet.small.file.limit": "0",
}
#: Record key values with the complex key generator's separators (',' between fields,
#: ':' between name and value). None contains ",k2:", so "k1:<v>,k2:<n>" stays unique.
KEY_TEXT = ["a", "a,b", "x:y", "c:,d", "e,f:g", ":", ","]
REGIONS = ["eu", "us", "ap"]
ZONES = ["x", "y-z"]
OPERATIONS = [
    ("upsert", 30),
    ("delete", 10),
    ("insert", 8),
    ("bulk_insert", 5),
    ("insert_overwrite", 3),
    ("insert_overwrite_table", 1),
    ("delete_partition", 2),
    ("schedule_compaction", 8),
    ("clustering", 3),
    ("clean", 3),
    ("archive", 2),
    ("savepoint", 2),
    ("restore", 1),
]


@dataclass(frozen=True)
class Setup:
    """One table configuration under test."""

    name: str
    table_type: str
    options: dict[str, str]
    multi: bool  # multi-field record key and partition path

    @property
    def key_fields(self) -> list[str]:
        return ["k1", "k2"] if self.multi else ["k1"]

    @property
    def partition_fields(self) -> list[str]:
        return ["p1", "p2"] if self.multi else ["p1"]

    @property
    def columns(self) -> list[str]:
        return [*self.key_fields, *self.partition_fields, "ts", "v"]


MOR, COW = "MERGE_ON_READ", "COPY_ON_WRITE"
SETUPS = [
    Setup("mor-bloom-small-multi", MOR, SMALL_BLOOM, True),
    Setup("mor-bloom-default", MOR, {}, False),
    Setup("cow-bloom-small", COW, SMALL_BLOOM, False),
    Setup("mor-simple-multi", MOR, {"hoodie.index.type": "SIMPLE"}, True),
    Setup("cow-simple", COW, {"hoodie.index.type": "SIMPLE"}, False),
    Setup("mor-bucket-multi", MOR, {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "3"}, True),
    Setup("cow-bucket", COW, {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "2"}, False),
]
COMMON = {
    "hoodie.cleaner.commits.retained": "4",
    # Archival keeps 5..7 instants active: long runs archive (into the LSM history on 8 and 9).
    "hoodie.keep.min.commits": "5",
    "hoodie.keep.max.commits": "7",
    # Small files stay small: inserts keep filling and rewriting a few groups.
    "hoodie.parquet.small.file.limit": str(1 << 20),
}
SCHEMA_EXTRA = {"ts": pa.int64(), "v": pa.string(), "_hoodie_is_deleted": pa.bool_()}


class ModelTable(ExpectedTable):
    """`ExpectedTable` keyed by every record key and partition field (the model of a complex key)."""

    def __init__(self, setup: Setup):
        super().__init__(key="k1", partition=None, ordering="ts")
        self.setup = setup

    def partition_path(self, row: Any) -> str:
        return "/".join(str(row[f]) for f in self.setup.partition_fields)

    def _id(self, row: Any) -> tuple[str, str]:
        return self.partition_path(row), ",".join(f"{f}:{row[f]}" for f in self.setup.key_fields)


@dataclass
class Run:
    setup: Setup
    path: str
    rng: random.Random
    model: ModelTable
    next_id: int = 0
    pending_compaction: str | None = None
    pending_for: int = 0
    #: Keys deleted, then upserted again while a compaction was pending: upserted again
    #: after it ran (the compacted base no longer holds them, their last write is in a log).
    revived: set[int] = field(default_factory=set)
    #: A write landed while the compaction was pending (its logs sit on top of the plan).
    writes_on_pending: bool = False
    #: (write instant, model rows then), for time travel.
    history: list[tuple[str, list[tuple[Any, ...]]]] = field(default_factory=list)
    #: Write instants made while logs sat on top of a pending compaction (hudi-rs is not asked).
    unasked: set[str] = field(default_factory=set)
    #: Instants archival moved out of the active timeline.
    archived: set[str] = field(default_factory=set)
    #: Savepointed write -> the model's rows then (what a restore to it brings back).
    saved: dict[str, dict[Any, Any]] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)

    def table(self) -> Table:
        return Table.open(self.path, options={**COMMON, **self.setup.options})

    # -- rows -------------------------------------------------------------------------------
    def key_fields_of(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {"k1": f"{KEY_TEXT[i % len(KEY_TEXT)]}{i}", "p1": REGIONS[i % len(REGIONS)]}
        if self.setup.multi:
            out |= {"k2": i % 3, "p2": ZONES[(i // 3) % len(ZONES)]}
        return out

    def row(self, i: int, step: int, deleted: bool = False) -> dict[str, Any]:
        return self.key_fields_of(i) | {"ts": step, "v": f"v{step}-{i}", "_hoodie_is_deleted": deleted}

    def new_ids(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def live_ids(self) -> list[int]:
        return sorted(r["_id"] for _, r in self.model.rows.values())

    def batch(self, rows: list[dict[str, Any]]) -> pa.Table:
        fields = [(f, pa.string()) for f in ("k1", "p1", "p2") if f in self.setup.columns]
        if self.setup.multi:
            fields.append(("k2", pa.int64()))
        schema = pa.schema(fields + list(SCHEMA_EXTRA.items()))
        return pa.Table.from_pylist([{k: v for k, v in r.items() if k != "_id"} for r in rows], schema=schema)

    # -- expected and actual ------------------------------------------------------------------
    def expected(self) -> list[tuple[Any, ...]]:
        return sorted(tuple(row[c] for c in self.setup.columns) for _, row in self.model.rows.values())

    def rows_of(self, data: pa.Table) -> list[tuple[Any, ...]]:
        return sorted(tuple(r[c] for c in self.setup.columns) for r in data.select(self.setup.columns).to_pylist())

    def lakeward_rows(self, as_of: str | None = None) -> list[tuple[Any, ...]]:
        table = Table.open(self.path)
        if table.schema() is None:  # nothing written yet: no columns to select
            return []
        return self.rows_of(table.read(as_of=as_of, columns=self.setup.columns))

    def hudi_rows(self, as_of: str | None = None) -> list[tuple[Any, ...]]:
        options = hudi.HudiReadOptions()
        if as_of is not None:
            options = options.with_as_of_timestamp(as_of)
        batches = hudi.HudiTableBuilder.from_base_uri(self.path).build().read(options)
        if not batches:
            return []
        return self.rows_of(pa.Table.from_batches(batches))

    def check(self) -> None:
        expected = self.expected()
        where = f"{self.setup.name} after: {' | '.join(self.log[-6:])}"
        assert self.lakeward_rows() == expected, f"lakeward snapshot differs from the model; {where}"
        # hudi-rs 0.5.0 hides log files written on top of a still-pending compaction (see
        # tests/interop/test_hudi_rs_mor_compaction.py): it is not asked while such logs exist.
        oracle = not self.writes_on_pending
        if oracle:
            assert self.hudi_rows() == expected, f"hudi-rs snapshot differs from the model; {where}"
        if len(self.history) > 1 and self.rng.random() < 0.3:
            instant, then = self.rng.choice(self.history[-3:-1])
            try:
                rows = self.lakeward_rows(instant)
            except InstantNotFoundError as exc:
                # Cleaning retains the slices of the last N commits of any action (compactions and
                # clusterings count), so a write a few steps back may be gone: that must be said, not
                # read as other rows.
                assert "clean True" in self.log and "no longer retained" in str(exc), f"{exc}; {where}"
                return
            assert rows == then, f"lakeward as of {instant} differs; {where}"
            if oracle:
                assert self.hudi_rows(instant) == then, f"hudi-rs as of {instant} differs; {where}"

    # -- one step -----------------------------------------------------------------------------
    def write(self, op: str, rows: list[dict[str, Any]], step: int, first_new: int = 1 << 62) -> None:
        """Apply one write to the table and the model; `first_new`: ids from here on were never written."""
        table = self.table()
        if op == "delete":
            keys = [{f: r[f] for f in (*self.setup.key_fields, *self.setup.partition_fields)} for r in rows]
            if not self.setup.multi:
                result = table.delete(keys=[k["k1"] for k in keys])
            else:
                result = table.delete(keys=keys)
        else:
            result = getattr(table, op)(self.batch(rows))
        live_before = set(self.model.rows)
        self.writes_on_pending |= self.pending_compaction is not None
        self.model.apply(op, rows)
        self.log.append(f"{op}({len(rows)}) -> {result.instant_time}")
        if op == "delete" and self.setup.options.get("hoodie.index.type") != "BUCKET":
            hits = sum(1 for r in rows if self.model._id(r) in live_before)
            assert result.num_deletes == hits, f"{self.setup.name}: delete counted {result.num_deletes}, not {hits}"
        if op == "upsert" and not any(r["_hoodie_is_deleted"] for r in rows):
            assert result.num_inserts + result.num_updates == len(rows)
        if op == "upsert" and self.setup.options.get("hoodie.index.type") != "BUCKET":
            # A key never written before is in no file: an insert (a deleted key a file group
            # still holds counts as an update of that group, as in Hudi).
            brand_new = sum(1 for r in rows if r["_id"] >= first_new)
            assert result.num_inserts >= brand_new, f"{self.setup.name}: new keys counted as updates"
        self.remember(result.instant_time)

    def remember(self, instant: str) -> None:
        """The model's rows as of write `instant`, for time travel."""
        self.history.append((instant, self.expected()))
        if self.writes_on_pending:
            self.unasked.add(instant)

    def final_check(self) -> None:
        """Time travel to every write (archived ones included) equals the model's rows then, read by
        lakeward and hudi-rs; then hudi-rs equals lakeward on every readable state (incremental too).

        Version 6 keeps no way to read an archived instant (lakeward refuses time travel to one,
        naming the earliest readable instant); 8 and 9 read it from the LSM history."""
        lsm = Table.open(self.path).version.lsm_history
        for instant, then in self.history:
            try:
                rows = self.lakeward_rows(instant)
            except InstantNotFoundError as exc:
                cleaned = "clean True" in self.log and "no longer retained" in str(exc)
                archived = not lsm and instant in self.archived and "earliest readable instant" in str(exc)
                assert cleaned or archived, f"{exc}; {self.setup.name}"
                continue
            assert rows == then, (
                f"{self.setup.name}: lakeward as of {instant} differs from the model (archived: "
                f"{instant in self.archived}; savepoints {sorted(self.saved)}; log: {' | '.join(self.log)})"
            )
            if instant not in self.unasked:
                assert self.hudi_rows(instant) == then, f"{self.setup.name}: hudi-rs as of {instant} differs"
        if not self.writes_on_pending and not self.unasked:
            fail_on(readable_mismatches(self.path, time_travel=False))

    def step(self, step: int) -> None:
        rng = self.rng
        ops, weights = zip(*OPERATIONS)
        # The first write sets the schema (a delete on an empty table would commit one of the key fields only).
        op = rng.choices(ops, weights)[0] if step else "upsert"
        live = self.live_ids()
        if self.pending_compaction is not None:
            self.pending_for -= 1
            if self.pending_for <= 0:
                self.table().run_compaction(self.pending_compaction)
                self.log.append(f"run_compaction {self.pending_compaction}")
                self.pending_compaction = None
                self.writes_on_pending = False
        if op == "upsert":
            first_new = self.next_id
            ids = rng.sample(live, min(len(live), rng.randint(0, 15))) + self.new_ids(rng.randint(0, 30))
            reinserted = self.recently_deleted(rng)
            if self.pending_compaction is not None:
                self.revived |= set(reinserted)
            elif self.revived:
                ids += sorted(self.revived & set(live))
                self.revived = set()
            ids += reinserted
            alive = set(live)
            rows = [self.row(i, step, i in alive and rng.random() < 0.1) | {"_id": i} for i in sorted(set(ids))]
            if rows:
                self.write("upsert", rows, step, first_new)
        elif op == "delete":
            ids = rng.sample(live, min(len(live), rng.randint(1, 6))) + self.new_ids(rng.randint(0, 2))
            self.write("delete", [self.row(i, step) | {"_id": i} for i in ids], step)
        elif op in ("insert", "bulk_insert"):
            self.write(op, [self.row(i, step) | {"_id": i} for i in self.new_ids(rng.randint(1, 30))], step)
        elif op == "insert_overwrite":
            ids = [i for i in self.new_ids(rng.randint(1, 12)) if self.key_fields_of(i)["p1"] == REGIONS[step % 3]]
            ids = ids or self.new_ids(1)
            self.write(op, [self.row(i, step) | {"_id": i} for i in ids], step)
        elif op == "insert_overwrite_table":
            self.write(op, [self.row(i, step) | {"_id": i} for i in self.new_ids(rng.randint(5, 25))], step)
        elif op == "delete_partition":
            paths = sorted({k[0] for k in self.model.rows})
            if len(paths) < 2:
                return
            chosen = [rng.choice(paths)]
            result = self.table().delete_partition(chosen)
            self.model.apply("delete_partition", partitions=chosen)
            self.log.append(f"delete_partition {chosen} -> {result.instant_time}")
            self.remember(result.instant_time)
        elif op == "schedule_compaction":
            if self.setup.table_type == MOR and self.pending_compaction is None:
                self.pending_compaction = self.table().schedule_compaction(force=True)
                self.pending_for = rng.randint(0, 3)
                self.log.append(f"schedule_compaction -> {self.pending_compaction}")
        elif op == "clustering":
            # A BUCKET-index table clusters bucket by bucket, each back into its own file
            # group, and only with sort columns (without, nothing is scheduled): sort there.
            bucketed = self.setup.options.get("hoodie.index.type") == "BUCKET"
            options = {**COMMON, **self.setup.options}
            if bucketed:
                options["hoodie.clustering.plan.strategy.sort.columns"] = "v"
            if self.pending_compaction is None:
                instant = Table.open(self.path, options=options).schedule_clustering()
                if instant is not None:
                    Table.open(self.path, options=options).run_clustering(instant)
                    self.log.append(f"clustering {instant}")
        elif op == "clean":
            cleaned = self.table().clean()
            self.log.append(f"clean {cleaned is not None}")
        elif op == "archive":
            archived = self.table().archive()
            self.archived |= {name.split(".")[0] for name in archived.archived}
            self.log.append(f"archive {len(archived.archived)}")
        elif op == "savepoint":
            if self.history and self.pending_compaction is None and self.history[-1][0] not in self.saved:
                instant = self.history[-1][0]  # the latest write: the model's rows now
                self.table().savepoint(instant)
                self.saved[instant] = dict(self.model.rows)
                self.log.append(f"savepoint {instant}")
        elif op == "restore" and self.saved:
            self.restore(max(self.saved))

    def restore(self, instant: str) -> None:
        """Restore the latest savepoint (no later savepoint is left dangling): every write, compaction
        and clustering after it is rolled back, the pending compaction too."""
        self.table().restore(instant)
        self.model.rows = dict(self.saved[instant])
        self.history = [(t, rows) for t, rows in self.history if t <= instant]
        self.pending_compaction, self.writes_on_pending, self.revived = None, False, set()
        self.log.append(f"restore {instant}")

    def recently_deleted(self, rng: random.Random) -> list[int]:
        """Some keys written before and deleted since: re-inserts (around pending compactions too)."""
        live = set(self.live_ids())
        gone = [i for i in range(max(0, self.next_id - 60), self.next_id) if i not in live]
        wanted = rng.randint(1, 4) if self.pending_compaction is not None else rng.randint(0, 3)
        return rng.sample(gone, min(len(gone), wanted))


def _run(setup: Setup, seed: int, steps: int, tmp_path: Path, version: int = 6) -> None:
    path = str(tmp_path / f"{setup.name}-{seed}")
    Table.create(
        path,
        table_version=version,
        record_key=setup.key_fields,
        partition_by=setup.partition_fields,
        ordering_field="ts",
        table_type=setup.table_type,
        options={**COMMON, **setup.options},
    )
    run = Run(setup, path, random.Random(seed), ModelTable(setup))
    for step in range(steps):
        run.step(step)
        run.check()
    run.final_check()


CI_SEEDS = [11]
VERSIONS = [6, 8, 9]


@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
@pytest.mark.parametrize("seed", CI_SEEDS)
@pytest.mark.parametrize("version", VERSIONS)
def test_differential(setup: Setup, seed: int, version: int, tmp_path: Path) -> None:
    _run(setup, seed, 30, tmp_path, version)


#: Seeds of the long mode: two in the default run (CI), more with LAKEWARD_DIFFERENTIAL_SEEDS=N.
MANY_SEEDS = range(100, 100 + int(os.environ.get("LAKEWARD_DIFFERENTIAL_SEEDS", "2")))


@pytest.mark.slow
@pytest.mark.parametrize("setup", SETUPS, ids=[s.name for s in SETUPS])
@pytest.mark.parametrize("seed", MANY_SEEDS)
@pytest.mark.parametrize("version", VERSIONS)
def test_differential_many_seeds(setup: Setup, seed: int, version: int, tmp_path: Path) -> None:
    _run(setup, seed, 60, tmp_path, version)


class StatsRun(Run):
    """A run on a table whose metadata table keeps `column_stats` and `partition_stats`: after every
    step, filtered reads that skip slices through them give the model's rows, and `files` matches
    a storage listing."""

    def check(self) -> None:
        super().check()
        table = Table.open(self.path)
        if table.schema() is None:
            return
        diff = compare_files_partition(table.storage)
        assert diff.ok, str(diff)
        step = max((r[self.setup.columns.index("ts")] for r in self.expected()), default=0)
        for filters in ([("ts", ">=", step)], [("v", "<", "v1")], [("p1", "=", REGIONS[0]), ("ts", "<", step)]):
            model = sorted(
                r for r in self.expected() if _matches(dict(zip(self.setup.columns, r, strict=True)), filters)
            )
            skipping = table.scan(filters=filters, columns=self.setup.columns)
            assert self.rows_of(skipping.to_arrow()) == model, (filters, self.log[-6:])


def _matches(row: dict[str, Any], filters: list[tuple[str, str, Any]]) -> bool:
    ops = {">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "=": lambda a, b: a == b}
    return all(row[c] is not None and ops[op](row[c], v) for c, op, v in filters)


@pytest.mark.parametrize("setup", [SETUPS[1], SETUPS[4]], ids=[SETUPS[1].name, SETUPS[4].name])
def test_differential_with_column_stats(setup: Setup, tmp_path: Path) -> None:
    """The model run on a version 9 table with a metadata table keeping column and partition stats."""
    stats = {"hoodie.metadata.index.column.stats.enable": "true"}
    setup = Setup(f"{setup.name}-stats", setup.table_type, {**setup.options, **stats}, setup.multi)
    path = str(tmp_path / f"{setup.name}-11")
    table = Table.create(
        path,
        table_version=9,
        record_key=setup.key_fields,
        partition_by=setup.partition_fields,
        ordering_field="ts",
        table_type=setup.table_type,
        options={**COMMON, **setup.options},
    )
    table.initialize_metadata_table()
    run = StatsRun(setup, path, random.Random(11), ModelTable(setup))
    for step in range(30):
        run.step(step)
        run.check()
    run.final_check()
    partitions = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert partitions["hoodie.table.metadata.partitions"] == "column_stats,files,partition_stats"
