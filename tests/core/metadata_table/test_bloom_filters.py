"""The metadata table's `bloom_filters` partition and BLOOM lookups from it (issue 17).

The partition is built for an existing table when a writer enables it, kept by every write and
table service (new base files' footer filters, bit-identical; tombstones for cleaned files),
merged by the metadata table's own compaction, and read by BLOOM tagging with
`hoodie.bloom.index.use.metadata`: the same candidates as the footers' filters, so the same
tagging (checked against the footer path and a model), without reading the footers' filters.
hudi-rs reads the table to the model's rows throughout.
"""

from __future__ import annotations

import posixpath
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward import Table
from lakeward.core.config.properties import parse_properties
from lakeward.core.engine import LocalEngine
from lakeward.core.engine.spark import SparkEngine
from lakeward.core.file_group import base_file
from lakeward.core.file_group.hfile import HFileReader
from lakeward.core.file_group.metadata_listing import metadata_storage
from lakeward.core.file_group.naming import parse_base_file_name
from lakeward.core.file_group.slice_keys import CommittedInstants
from lakeward.core.index import bloom as bloom_index
from lakeward.core.metadata_table.bloom_filters import (
    BLOOM_FILTERS_PARTITION,
    MetadataBloomFilters,
    decode_bloom_record,
    encode_bloom_record,
    footer_filter,
    record_key,
)
from lakeward.core.metadata_table.check import compare_files_partition
from lakeward.core.metadata_table.compaction import mdt_timeline
from lakeward.core.metadata_table.index_ids import file_id, partition_id, xxh64
from lakeward.core.timeline import Action
from tests.interop.compare import both_readers
from tests.support import crash
from tests.support.keyed_rows import PARTS, Model, check_rows, part_of, upsert_txns_update_and_insert
from tests.support.keyed_rows import batch as _batch

ENABLE = {"hoodie.metadata.index.bloom.filter.enable": "true", "hoodie.metadata.compact.max.delta.commits": "3"}


def _base_files(path: str) -> dict[str, str]:
    """Every base file on storage: name -> partition path ("" for the table's root)."""
    root = Path(path)
    found = {}
    for f in root.rglob("*.parquet"):
        relative = f.parent.relative_to(root).as_posix()
        if ".hoodie" not in f.relative_to(root).parts and parse_base_file_name(f.name) is not None:
            found[f.name] = "" if relative == "." else relative
    return found


def _file_id(file_path: str) -> str:
    parsed = parse_base_file_name(file_path.rsplit("/", 1)[-1])
    assert parsed is not None
    return parsed.file_id


def _check_partition(path: str, seen: set[tuple[str, str]], rolled_back: frozenset[str] = frozenset()) -> None:
    """Every base file on storage has its footer's filter (same bytes), every one gone a tombstone
    (or, for the base files of `rolled_back` instants, no record: the metadata rollback removed it)."""
    table = Table.open(path)
    filters = MetadataBloomFilters(table.storage)
    on_storage = _base_files(path)
    for name, partition in on_storage.items():
        found = filters.entry(partition, name)
        assert found is not None, name
        assert (found.type_code, found.filter_bytes) == footer_filter(table.storage, posixpath.join(partition, name))
    seen |= {(p, n) for n, p in on_storage.items()}
    for partition, name in seen:
        if name not in on_storage:
            record = filters.record(partition, name)
            if record is None:
                parsed = parse_base_file_name(name)
                assert parsed is not None and parsed.instant_time in rolled_back, name
            else:
                assert record.deleted, name
    assert compare_files_partition(table.storage).ok


def test_index_ids_are_hudis():
    """Format reference 7.6: the ids Hudi's fixtures hold, and XXHash64's reference values."""
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B
    assert partition_id("region=us") == "431THTTwO5Q="
    assert partition_id("") == partition_id(".") == "FXThHwelITM="
    assert len(file_id("f.parquet")) == 24
    key = record_key("region=us", "f.parquet")
    assert key == "431THTTwO5Q=" + file_id("f.parquet")
    value = encode_bloom_record("DYNAMIC_V0", "20260101000000000", b"abc", False)
    entry = decode_bloom_record(value)
    assert (entry.type_code, entry.instant_time, entry.filter_bytes, entry.deleted) == (
        "DYNAMIC_V0",
        "20260101000000000",
        b"abc",
        False,
    )


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_bloom_filters_partition_follows_every_commit(tmp_path: Path, table_type: str):
    rng = random.Random(7 if table_type == "COPY_ON_WRITE" else 8)
    path = str(tmp_path / "t")
    options = {
        "hoodie.cleaner.commits.retained": "1",
        "hoodie.clustering.plan.strategy.sort.columns": "val",  # a group of one file is planned too
        "hoodie.parquet.small.file.limit": "0",  # merge-on-read: updates go to logs, inserts to new files
        **ENABLE,
    }
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=9
    )
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(30)}
    table.insert(_batch(model))
    table = Table.open(path, options=options)
    table.initialize_metadata_table()  # with bloom_filters, from the base files' footers
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "bloom_filters,files"
    seen: set[tuple[str, str]] = set()
    _check_partition(path, seen)
    next_key = 30
    for step in range(6):
        updates = rng.sample(sorted(model), 5)
        fresh = [f"k{next_key + i}" for i in range(3)]
        next_key += 3
        batch = {k: (part_of(k), step + 2, rng.randrange(1000)) for k in [*updates, *fresh]}
        table.upsert(_batch(batch))
        model |= batch
        if step == 1 and table_type == "MERGE_ON_READ":
            instant = table.schedule_compaction(force=True)
            assert instant is not None
            table.run_compaction(instant)
        if step == 2:
            instant = table.schedule_clustering()
            assert instant is not None
            table.run_clustering(instant)
        if step >= 3:
            assert table.clean() is not None or step > 3
        _check_partition(path, seen)
        check_rows(path, model)
    assert any(name not in _base_files(path) for _, name in seen)  # the clean removed some
    mdt = metadata_storage(Table.open(path).storage)
    compactions = mdt_timeline(Table.open(path).storage).completed(Action.COMMIT)
    assert compactions, "the metadata table compacted"
    bases = [e.path for e in mdt.list_dir(BLOOM_FILTERS_PARTITION) if e.name.endswith(".hfile")]
    assert any(compactions[-1].time in b for b in bases)
    for base in bases:  # lakeward's own HFile reader reads every record the partition holds
        for _, value in HFileReader(mdt.read_bytes(base), base).items():
            decode_bloom_record(value)


def _tag(table: Table, keys: list[str], filters: Callable[[str, str], Any] | None) -> list[str | None]:
    """BLOOM tagging of `keys` (each in its own partition) over the latest slices: file id or None."""
    committed = CommittedInstants.of(table.timeline())
    slices = table.file_slices()
    out: dict[str, str | None] = {}
    for part in PARTS:
        mine = [k for k in keys if part_of(k) == part]
        found = bloom_index.locate(
            table.storage,
            LocalEngine(),
            [s for s in slices if s.partition_path == part],
            pa.array(mine, pa.string()),
            True,
            committed,
            unconfirmed_single=table.config.table_type.value == "COPY_ON_WRITE",
            filters=filters,
        )
        out |= dict(zip(mine, found.to_pylist(), strict=True))
    return [out[k] for k in keys]


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_bloom_tagging_from_metadata_matches_footers_and_model(
    tmp_path: Path, table_type: str, monkeypatch: pytest.MonkeyPatch
):
    """Randomised: tagging from the metadata table's filters equals the footer path's, update and
    insert counts equal the model's, and no filter of an existing base file's footer is read."""
    parsed: list[base_file.FooterKeys] = []  # every footer-keys object whose bloom filter was used
    cached_bloom = base_file.FooterKeys.__dict__["bloom"]

    def spy(footer: base_file.FooterKeys) -> Any:
        parsed.append(footer)
        return cached_bloom.__get__(footer, base_file.FooterKeys)

    monkeypatch.setattr(base_file.FooterKeys, "bloom", property(spy))

    def footers_used(paths: set[str]) -> list[str]:
        """The base files of `paths` whose own footer's filter was used since `parsed` was cleared."""
        mine = {id(base_file.read_footer_keys(table.storage, p)): p for p in paths}
        return [mine[id(f)] for f in parsed if id(f) in mine]

    def rewritten(before: set[str]) -> set[str]:
        """File ids that got a new base file since the listing `before`."""
        return {_file_id(f"{p}/{n}") for n, p in _base_files(path).items() if f"{p}/{n}" not in before}

    rng = random.Random(21 if table_type == "COPY_ON_WRITE" else 22)
    path = str(tmp_path / "t")
    Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type, table_version=8
    )
    table = Table.open(path, options={**ENABLE, "hoodie.bloom.index.use.metadata": "true"})
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(40)}
    table.insert(_batch(model))
    table.initialize_metadata_table()
    table = Table.open(path, options={**ENABLE, "hoodie.bloom.index.use.metadata": "true"})
    next_key = 40
    for step in range(8):
        updates = rng.sample(sorted(model), rng.randrange(1, 8))
        fresh = [f"k{next_key + i}" for i in range(rng.randrange(0, 6))]
        next_key += len(fresh)
        keys = [*updates, *fresh]
        existing = {f"{p}/{n}" for n, p in _base_files(path).items()}
        parsed.clear()
        from_metadata = _tag(table, keys, MetadataBloomFilters(table.storage).filter_of)
        assert not footers_used(existing), "tagging from the metadata table used a footer's filter"
        assert from_metadata == _tag(table, keys, None), step
        assert footers_used(existing) or not updates  # the control: the footer path uses them
        assert [f is not None for f in from_metadata] == [k in model for k in keys]
        parsed.clear()
        batch = {k: (part_of(k), step + 2, rng.randrange(1000)) for k in keys}
        result = table.upsert(_batch(batch))
        assert (result.num_updates, result.num_inserts) == (len(updates), len(fresh)), step
        # only a copy-on-write merge reuses the filter of the file it rewrites (never the tagging's)
        assert all(_file_id(p) in rewritten(existing) for p in footers_used(existing)), step
        model |= batch
        if step == 4 and table_type == "MERGE_ON_READ":
            instant = table.schedule_compaction(force=True)
            assert instant is not None
            table.run_compaction(instant)
    check_rows(path, model)
    if table_type == "MERGE_ON_READ":  # the control: an upsert tagging from the footers uses them
        existing = {f"{p}/{n}" for n, p in _base_files(path).items()}
        parsed.clear()
        Table.open(path).upsert(_batch({k: (part_of(k), 99, 0) for k in rng.sample(sorted(model), 3)}))
        assert [p for p in footers_used(existing) if _file_id(p) not in rewritten(existing)]


def test_bloom_filters_follow_rollback_and_restore(tmp_path: Path):
    """A rolled-back write's filters go with its metadata delta commit, a restore tombstones the
    files it deletes; tagging from the partition stays the model's and hudi-rs reads the rows."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    options = {**ENABLE, "hoodie.bloom.index.use.metadata": "true", "hoodie.parquet.small.file.limit": "0"}
    table = Table.open(path, options=options)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(12)}
    saved = table.insert(_batch(model)).instant_time
    table.initialize_metadata_table()
    table = Table.open(path, options=options)
    table.savepoint(saved)
    seen: set[tuple[str, str]] = set()
    _check_partition(path, seen)
    rolled_back: set[str] = set()
    for step in range(3):
        batch = {f"k{i}": (part_of(f"k{i}"), step + 2, step) for i in (step, 12 + step)}
        written = table.upsert(_batch(batch)).instant_time
        _check_partition(path, seen, frozenset(rolled_back))
        if step == 1:
            table.rollback(written)
            rolled_back.add(written)
            _check_partition(path, seen, frozenset(rolled_back))
        else:
            model |= batch
    check_rows(path, model)
    assert table.restore(saved).rolled_back  # the files it deletes get tombstones
    model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(12)}
    _check_partition(path, seen, frozenset(rolled_back))
    check_rows(path, model)
    table = Table.open(path, options=options)
    batch = {"k3": (part_of("k3"), 9, 9), "k40": (part_of("k40"), 9, 9)}
    result = table.upsert(_batch(batch))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    _check_partition(path, seen, frozenset(rolled_back))
    check_rows(path, model | batch)


def test_bloom_filters_on_a_hudi_fixture(fixture_table: Any):
    """On Hudi's table (its other index partitions dropped, its record index kept): the partition is
    built from the footers Hudi wrote, an upsert tagged from it counts exactly, and hudi-rs agrees."""
    path = fixture_table("cow", "v9_txns_simple_meta")
    options = {
        "hoodie.metadata.index.column.stats.enable": "false",
        "hoodie.metadata.index.partition.stats.enable": "false",
        "hoodie.metadata.index.secondary.enable": "false",
        "hoodie.bloom.index.use.metadata": "true",
        **ENABLE,
    }
    table = Table.open(path, options=options)
    data, new = upsert_txns_update_and_insert(table)
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "bloom_filters,files,record_index"
    _check_partition(path, set())
    mine, theirs = both_readers(path)
    assert mine == theirs
    assert len(mine) == data.num_rows + 1


@pytest.mark.slow
def test_writer_killed_after_the_metadata_commit_leaves_no_filters(tmp_path: Path):
    """SIGKILL after the metadata delta commit (with its bloom_filters log) completed and before the
    data instant did: the next writer's repair rolls both back, no record of the killed write's
    files stays, and the partition still matches the footers."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table = Table.open(path, options=ENABLE)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(20)}
    table.insert(_batch(model))
    table.initialize_metadata_table()
    seen: set[tuple[str, str]] = set()
    _check_partition(path, seen)
    batch_file = tmp_path / "crash.parquet"
    pq.write_table(_batch({f"k{i}": (part_of(f"k{i}"), 2, i) for i in range(15, 30)}), batch_file)
    crash.run_and_kill("crash_writer.py", path, "before_complete", str(batch_file))
    [killed] = [i.time for i in Table.open(path).timeline().pending()]
    bloom_dir = Path(path) / ".hoodie" / "metadata" / BLOOM_FILTERS_PARTITION
    assert any(killed in f.name for f in bloom_dir.iterdir())  # the killed write's filters were logged
    seen |= {(p, n) for n, p in _base_files(path).items()}  # its new files too
    repair = {"k3": (part_of("k3"), 3, 3), "k40": (part_of("k40"), 3, 40)}
    result = Table.open(path).upsert(_batch(repair))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    assert not any(killed in f.name for f in bloom_dir.iterdir())
    _check_partition(path, seen, frozenset({killed}))
    check_rows(path, model | repair)


@pytest.mark.spark
def test_spark_engine_writes_keep_the_bloom_filters(spark: Any, tmp_path: Path):
    """The Spark data plane writes the base files; the commit records their footers' filters all the same."""
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(6)}
    table.insert(_batch(model))
    Table.open(path, options=ENABLE).initialize_metadata_table()
    table = Table.open(path, engine=SparkEngine(spark))
    updates = {"k0": ("p0", 2, 100), "k10": (part_of("k10"), 2, 10)}
    table.upsert(spark.createDataFrame(_batch(updates).to_pandas()))
    model |= updates
    seen: set[tuple[str, str]] = set()
    _check_partition(path, seen)
    check_rows(path, model)


def test_bloom_filters_of_an_empty_table_start_empty(tmp_path: Path):
    """Built before any write: four file groups with only their initialisation logs; the first
    writes fill them and a BLOOM upsert tagged from them counts exactly."""
    path = str(tmp_path / "t")
    Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=8)
    options = {**ENABLE, "hoodie.bloom.index.use.metadata": "true"}
    Table.open(path, options=options).initialize_metadata_table()
    bloom_dir = Path(path) / ".hoodie" / "metadata" / BLOOM_FILTERS_PARTITION
    assert sorted(f.name.split("_")[0] for f in bloom_dir.glob(".bloom-filters-*")) == [
        f".bloom-filters-000{i}-0" for i in range(4)
    ]
    assert not list(bloom_dir.glob("*.hfile"))
    table = Table.open(path, options=options)
    model: Model = {f"k{i}": (part_of(f"k{i}"), 1, i) for i in range(9)}
    table.insert(_batch(model))
    result = table.upsert(_batch({"k1": (part_of("k1"), 2, 1), "k9": (part_of("k9"), 2, 9)}))
    assert (result.num_updates, result.num_inserts) == (1, 1)
    _check_partition(path, set())


def test_disabling_bloom_filters_drops_the_partition(tmp_path: Path):
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    table.insert(_batch({"k1": ("p1", 1, 1)}))
    Table.open(path, options=ENABLE).initialize_metadata_table()
    assert (Path(path) / ".hoodie" / "metadata" / BLOOM_FILTERS_PARTITION).is_dir()
    off = {"hoodie.metadata.index.bloom.filter.enable": "false"}
    Table.open(path, options=off).upsert(_batch({"k2": ("p1", 1, 2)}))
    props = parse_properties((Path(path) / ".hoodie" / "hoodie.properties").read_text())
    assert props["hoodie.table.metadata.partitions"] == "files"
    assert not (Path(path) / ".hoodie" / "metadata" / BLOOM_FILTERS_PARTITION).exists()
