"""Change data capture on Spark: CDC batch reads, `hudi_table_changes`, structured streaming.

Every Spark surface must give exactly the rows of `Table.read_changes`, in any order (for
streams of format latest_state: of `Table.read_incremental` over the micro-batches'
ranges), and bad input must fail with an error that names the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from lakeward.core.exceptions import ConfigError, InstantNotFoundError, LakewardError
from lakeward.core.table import Table
from tests.support.out_of_order import write_out_of_order

pytestmark = pytest.mark.spark

FORMAT = "lakeward"
QUERY = "hoodie.datasource.query.type"
INCREMENTAL_FORMAT = "hoodie.datasource.query.incremental.format"
BEGIN = "hoodie.datasource.read.begin.instanttime"
END = "hoodie.datasource.read.end.instanttime"
IMAGES = "lakeward.cdc.images"
CDC = {QUERY: "incremental", INCREMENTAL_FORMAT: "cdc"}
ZERO = "0" * 17
DATA = pa.schema([("id", pa.int64()), ("part", pa.string()), ("ts", pa.int64()), ("v", pa.string())])


def batch(ids: Any, ts: int, part: str | None = None) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "part": part or "abc"[i % 3], "ts": ts, "v": f"{i}@{ts}"} for i in ids], schema=DATA
    )


def create(path: str, table_type: str, mode: str | None = "DATA_BEFORE_AFTER") -> Table:
    options = {
        "hoodie.table.name": "t",
        "hoodie.datasource.write.recordkey.field": "id",
        "hoodie.datasource.write.partitionpath.field": "part",
        "hoodie.datasource.write.precombine.field": "ts",
        "hoodie.datasource.write.table.type": table_type,
    }
    if mode is not None:
        options |= {"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": mode}
    return Table.create(path, options=options)


def spark_rows(df: Any) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


def multiset(rows: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)


@pytest.fixture(scope="module")
def lakeward_spark(spark: Any) -> Any:
    import lakeward.spark

    lakeward.spark.register(spark)
    return spark


@pytest.fixture(scope="module", params=[("COPY_ON_WRITE", "DATA_BEFORE_AFTER"), ("MERGE_ON_READ", "KEY_OP")])
def cdc_table(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """Inserts, updates, deletes, an insert_overwrite; MOR: log files, and a compaction in between."""
    table_type, mode = request.param
    path = str(tmp_path_factory.mktemp("cdc") / "t")
    return path, write_changes(create(path, table_type, mode), table_type)


def write_changes(table: Table, table_type: str) -> list[str]:
    """Inserts, updates, deletes, an insert_overwrite; MOR: log files, and a compaction in between."""
    instants = [
        table.insert(batch(range(12), 1)).instant_time,
        table.upsert(batch([0, 3, 6, 12, 13], 2)).instant_time,
        table.delete(batch([1, 2], 3)).instant_time,
    ]
    if table_type == "MERGE_ON_READ":
        assert any(s.log_files for s in table.file_slices()), "the MOR table must have log files"
        compaction = table.schedule_compaction(force=True)
        assert compaction is not None
        table.run_compaction(compaction)
    instants += [
        table.insert_overwrite(batch(range(20, 23), 4, part="c")).instant_time,
        table.upsert(batch([0, 4, 100], 5)).instant_time,
    ]
    return instants


def cdc_read(spark: Any, path: str, **options: str) -> Any:
    return spark.read.format(FORMAT).options(**CDC).options(**options).load(path)


# -- batch --------------------------------------------------------------------------------------
def test_batch_cdc_read_gives_the_rows_of_read_changes(lakeward_spark, cdc_table: tuple[str, list[str]]) -> None:
    from pyspark.sql.readwriter import DataFrameReader

    spark = lakeward_spark
    path, instants = cdc_table
    table = Table.open(path)
    for begin, end in (("earliest", None), (instants[0], instants[2])):
        options = {BEGIN: begin} | ({END: end} if end else {})
        want = table.read_changes(begin, end).to_pylist()
        assert want, f"({begin}, {end}]: the case reads nothing"
        df = cdc_read(spark, path, **options)
        assert df.columns == ["op", "ts_ms", "before", "after"]
        # the per-file-group work runs as Spark tasks
        assert "MapInArrow" in df._jdf.queryExecution().executedPlan().toString()
        assert multiset(spark_rows(df)) == multiset(want), f"({begin}, {end}]: the rows of Table.read_changes"

    # typed images
    want = table.read_changes(instants[0], images="struct").to_pylist()
    struct = cdc_read(spark, path, **{BEGIN: instants[0], IMAGES: "struct"})
    assert [f.dataType.typeName() for f in struct.schema.fields] == ["string", "string", "struct", "struct"]
    assert struct.schema["after"].dataType.fieldNames() == ["id", "part", "ts", "v"]
    assert multiset(spark_rows(struct)) == multiset(want)

    # the registered Python data source (no driver hook: e.g. Spark Connect) gives the same rows
    registered = DataFrameReader.load.__wrapped__(  # type: ignore[attr-defined]
        spark.read.format(FORMAT).options(**CDC).option(BEGIN, "earliest"), path
    )
    assert "BatchScan lakeward" in registered._jdf.queryExecution().executedPlan().toString()
    assert multiset(spark_rows(registered)) == multiset(table.read_changes("earliest").to_pylist())


@pytest.mark.parametrize("cdc_table", [("MERGE_ON_READ", "KEY_OP")], indirect=True)
def test_hudi_table_changes_sql_function(lakeward_spark, cdc_table: tuple[str, list[str]]) -> None:
    spark = lakeward_spark
    path, instants = cdc_table
    table = Table.open(path)
    got = spark_rows(spark.sql(f"select * from hudi_table_changes('{path}', 'earliest')"))
    assert multiset(got) == multiset(table.read_changes("earliest").to_pylist())
    got = spark_rows(spark.sql(f"select * from hudi_table_changes('{path}', '{instants[0]}', '{instants[2]}')"))
    assert multiset(got) == multiset(table.read_changes(instants[0], instants[2]).to_pylist())
    # Hudi's form, with the query type as second argument
    got = spark_rows(spark.sql(f"select op, ts_ms from hudi_table_changes('{path}', 'cdc', '{instants[1]}')"))
    assert multiset(got) == multiset(table.read_changes(instants[1]).select(["op", "ts_ms"]).to_pylist())

    # a catalog table with a location resolves to it
    name = "cdc_catalog_table"
    spark.sql(f"CREATE TABLE {name} (id BIGINT) USING parquet LOCATION '{path}'")
    try:
        got = spark_rows(spark.sql(f"select * from hudi_table_changes('{name}', '{instants[2]}')"))
        assert multiset(got) == multiset(table.read_changes(instants[2]).to_pylist())
    finally:
        spark.sql(f"DROP TABLE {name}")
    with pytest.raises(Exception, match="no_such_table.*not a table path"):
        spark.sql("select * from hudi_table_changes('no_such_table', 'earliest')").collect()
    with pytest.raises(Exception, match="is after end"):
        spark.sql(f"select * from hudi_table_changes('{path}', '{instants[3]}', '{instants[1]}')").collect()


# -- streaming ----------------------------------------------------------------------------------
def test_stream_resumes_from_its_checkpoint_without_loss_or_duplicates(lakeward_spark, tmp_path: Path) -> None:
    spark = lakeward_spark
    path = str(tmp_path / "t")
    table = create(path, "MERGE_ON_READ")
    table.insert(batch(range(6), 1))
    first_end = table.upsert(batch([0, 1, 7], 2)).instant_time

    formats = {"cdc": {IMAGES: "struct"}, "latest_state": {}}

    def run(*chosen: str) -> dict[str, list[dict[str, Any]]]:
        """Run the streams (restarting from their checkpoints) until they caught up; everything they wrote."""
        queries = []
        for fmt in chosen:
            stream = spark.readStream.format(FORMAT).option(QUERY, "incremental").option(INCREMENTAL_FORMAT, fmt)
            sink = stream.options(**formats[fmt]).load(path).writeStream.format("parquet")
            queries.append(
                sink.option("checkpointLocation", str(tmp_path / f"checkpoint-{fmt}"))
                .option("path", str(tmp_path / f"out-{fmt}"))
                .trigger(availableNow=True)
                .start()
            )
        for query in queries:
            query.awaitTermination()
            assert query.exception() is None
        return {fmt: spark_rows(spark.read.parquet(str(tmp_path / f"out-{fmt}"))) for fmt in chosen}

    run(*formats)
    table.delete(batch([2], 3))
    last_end = table.upsert(batch([0, 9], 4)).instant_time
    out = run(*formats)
    assert multiset(run("cdc")["cdc"]) == multiset(out["cdc"]), "a run without new commits reads nothing"

    assert multiset(out["cdc"]) == multiset(table.read_changes("earliest", images="struct").to_pylist())
    want = table.read_incremental(ZERO, first_end).to_pylist() + table.read_incremental(first_end, last_end).to_pylist()
    assert multiset(out["latest_state"]) == multiset(want)


def test_stream_offsets_stop_before_a_write_in_flight(lakeward_spark, tmp_path: Path) -> None:
    """A commit completing after an earlier instant still in flight is read only once that one is done."""
    from lakeward.core.spark.changes import spark_change_schema, stream_reader
    from lakeward.core.timeline import Action, new_instant_time
    from lakeward.core.timeline.transitions import create_requested
    from lakeward.core.write import active

    path = str(tmp_path / "t")
    table = create(path, "COPY_ON_WRITE")
    first = table.insert(batch(range(3), 1)).instant_time
    options = {**CDC}
    reader = stream_reader(path, options, spark_change_schema(path, options))
    start = reader.initialOffset()
    assert start == {"instant": ZERO}

    in_flight = new_instant_time(first)
    create_requested(table.storage, in_flight, Action.COMMIT)
    active.register(table.storage.uri, in_flight)  # a writer of this process: not rolled back as failed
    try:
        later = table.upsert(batch([0, 5], 2)).instant_time
        assert later > in_flight
        assert reader.latestOffset(start, None) == {"instant": first}
        assert len(reader.partitions(start, {"instant": first})) == 3  # one split per file group of `first`
    finally:
        active.unregister(table.storage.uri, in_flight)
    table._writer().roll_back_failed_writes()  # its writer is gone: the instant is rolled back
    assert not table.timeline().pending_writes()
    assert reader.latestOffset(start, None) == {"instant": later}
    assert reader.partitions({"instant": later}, {"instant": later}) == []

    # Hudi's startOffset: a new stream may start at the latest stable instant
    latest = {**options, "hoodie.datasource.streaming.startOffset": "latest"}
    assert stream_reader(path, latest, spark_change_schema(path, latest)).initialOffset() == {"instant": later}

    # Trigger.AvailableNow: stop at the latest offset seen when the query starts
    reader.prepareForTriggerAvailableNow()
    table.upsert(batch([1], 3))
    assert reader.latestOffset({"instant": first}, None) == {"instant": later}


def _stream_once(spark: Any, path: str, checkpoint: Path, out: Path, **options: str) -> list[dict[str, Any]]:
    """Run a stream (from its checkpoint) until it caught up; every row its sink holds."""
    query = (
        spark.readStream.format(FORMAT)
        .option(QUERY, "incremental")
        .options(**options)
        .load(path)
        .writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .option("path", str(out))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return spark_rows(spark.read.parquet(str(out))) if any(out.glob("*.parquet")) else []


def test_a_stream_starts_where_start_offset_says_through_spark(lakeward_spark, tmp_path: Path) -> None:
    """Spark hands a data source its options with lower-cased keys: `startOffset` was never found, so
    `latest` (and any instant, and any bad value) read the whole history from the start."""
    spark = lakeward_spark
    path = str(tmp_path / "t")
    table = create(path, "COPY_ON_WRITE")
    table.insert(batch(range(6), 1))
    middle = table.upsert(batch([0, 1], 2)).instant_time
    start = {"hoodie.datasource.streaming.startOffset": "latest"}
    for fmt in ("cdc", "latest_state"):
        opts = {INCREMENTAL_FORMAT: fmt, **start}
        assert _stream_once(spark, path, tmp_path / f"c-{fmt}", tmp_path / f"o-{fmt}", **opts) == []
    table.upsert(batch([2, 9], 3))
    cdc = _stream_once(spark, path, tmp_path / "c-cdc", tmp_path / "o-cdc", **{INCREMENTAL_FORMAT: "cdc", **start})
    assert sorted((r["op"], json_id(r)) for r in cdc) == [("i", 9), ("u", 2)]
    state = _stream_once(spark, path, tmp_path / "c-latest_state", tmp_path / "o-latest_state", **start)
    assert sorted(r["id"] for r in state) == [2, 9]
    # an instant time: the commits after it
    since = _stream_once(
        spark, path, tmp_path / "c-since", tmp_path / "o-since", **{"hoodie.datasource.streaming.startOffset": middle}
    )
    assert sorted(r["id"] for r in since) == [2, 9]
    for n, bad in enumerate(("bogus", "2099")):  # a year alone is no instant time (it read as 00000000000002099)
        with pytest.raises(Exception, match="startOffset"):
            _stream_once(
                spark,
                path,
                tmp_path / f"c-bad{n}",
                tmp_path / f"o-bad{n}",
                **{"hoodie.datasource.streaming.startOffset": bad},
            )


def json_id(row: dict[str, Any]) -> int:
    import json

    return int(json.loads(row["after"] or row["before"])["id"])


def test_a_stream_beginning_after_now_fails_naming_the_option(lakeward_spark, tmp_path: Path) -> None:
    """A begin instant in the future (a typo: 2099) made the stream wait, reading nothing, until then."""
    path = str(tmp_path / "t")
    create(path, "COPY_ON_WRITE").insert(batch(range(3), 1))
    for fmt in ("cdc", "latest_state"):
        for key in (BEGIN, "hoodie.datasource.streaming.startOffset"):
            with pytest.raises(Exception, match="future"):
                _stream_once(
                    lakeward_spark,
                    path,
                    tmp_path / f"c-{fmt}-{key}",
                    tmp_path / f"o-{fmt}-{key}",
                    **{INCREMENTAL_FORMAT: fmt, key: "20990101000000000"},
                )


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
def test_a_running_latest_state_stream_keeps_its_schema_when_a_column_is_added(
    lakeward_spark, tmp_path: Path, table_type: str
) -> None:
    """The next micro-batch after a write that added a column failed (DATA_SOURCE_RETURN_SCHEMA_MISMATCH)
    and stopped the query; now the stream keeps the columns it started with, as CDC struct images do."""
    spark = lakeward_spark
    path = str(tmp_path / "t")
    table = create(path, table_type)
    table.insert(batch(range(3), 1))
    name = f"latest_state_schema_{table_type.lower()}"
    query = (
        spark.readStream.format(FORMAT)
        .option(QUERY, "incremental")
        .load(path)
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "c"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        table.upsert(batch([1, 5], 2).append_column("added", pa.array([1.5, 2.5])))
        query.processAllAvailable()
        assert query.exception() is None
        rows = spark_rows(spark.table(name))
    finally:
        query.stop()
    assert sorted((r["id"], r["v"]) for r in rows) == [(0, "0@1"), (1, "1@1"), (1, "1@2"), (2, "2@1"), (5, "5@2")]
    assert all("added" not in r for r in rows)


def _stream_schema(path: str, fmt: str) -> Any:
    """The schema Spark hands a stream of `fmt` over the table at `path` (the data source's)."""
    from lakeward.core.read.spark import spark_schema
    from lakeward.core.schema import with_meta
    from lakeward.core.spark.changes import spark_change_schema

    if fmt == "cdc":
        return spark_change_schema(path, CDC)
    return spark_schema(with_meta(Table.open(path).schema()))


def _cdc_table(path: str, version: int) -> Table:
    return Table.create(
        path,
        record_key="id",
        partition_by="part",
        ordering_field="ts",
        table_version=version,
        options={"hoodie.table.cdc.enabled": "true"},
    )


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("fmt", ["cdc", "latest_state"])
def test_a_stream_fails_when_a_restore_undoes_commits_it_read(tmp_path: Path, version: int, fmt: str) -> None:
    """A restore to a savepoint behind the stream's offset undid commits the stream had delivered: the
    stream went on silently, its consumer holding rows the table no longer has. Now the next micro-batch
    fails naming the restore. A restore of commits the stream had not read yet is no reason to fail."""
    from lakeward.core.spark.changes import stream_reader

    path = str(tmp_path / "t")
    table = _cdc_table(path, version)
    first = table.insert(batch(range(3), 1)).instant_time
    table.savepoint(first)
    table.upsert(batch([0, 5], 2))
    options = {QUERY: "incremental", INCREMENTAL_FORMAT: fmt}
    reader = stream_reader(path, options, _stream_schema(path, fmt))
    start = reader.initialOffset()
    read = reader.latestOffset(start, None)
    assert reader.partitions(start, read)  # the stream read both commits
    table.restore(first)
    table.upsert(batch([1], 3))
    with pytest.raises(LakewardError, match="restore") as raised:
        reader.partitions(read, reader.latestOffset(read, None))
    assert "read" in str(raised.value)

    # a stream that had read only the savepoint's commit is not bothered by the restore
    other = tmp_path / "u"
    table = _cdc_table(str(other), version)
    first = table.insert(batch(range(3), 1)).instant_time
    table.savepoint(first)
    reader = stream_reader(str(other), options, _stream_schema(str(other), fmt))
    read = reader.latestOffset(reader.initialOffset(), None)
    table.upsert(batch([0, 5], 2))
    table.restore(first)
    later = table.upsert(batch([1], 3)).instant_time
    end = reader.latestOffset(read, None)
    assert reader.partitions(read, end), later


def test_a_stream_on_version_6_fails_when_a_rollback_undoes_a_commit_it_read(tmp_path: Path) -> None:
    """The same for `Table.rollback` of a completed commit the stream had read (version 6, whose offsets
    are instant times: a write still in flight always lies after the offset, so a rolled-back instant at or
    before it had completed and was read); a rollback of a failed write after the offset is no reason."""
    from lakeward.core.spark.changes import stream_reader

    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=6)
    table.insert(batch(range(3), 1))
    second = table.upsert(batch([0, 5], 2)).instant_time
    options = {QUERY: "incremental", INCREMENTAL_FORMAT: "latest_state"}
    reader = stream_reader(path, options, _stream_schema(path, "latest_state"))
    read = reader.latestOffset(reader.initialOffset(), None)
    assert read == {"instant": second}
    table.rollback(second)
    with pytest.raises(LakewardError, match=f"rollback .* undid commit\\(s\\) {second}"):
        reader.latestOffset(read, None)


#: archival as soon as it may: every commit compacts the metadata table; one commit kept by the cleaner
ARCHIVE_EARLY = {
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.metadata.compact.max.delta.commits": "1",
}


def _archive_past(table: Table, instant: str) -> None:
    """Write, clean and archive until `instant` has left the active timeline."""
    for round_ in range(12):
        if all(i.time != instant or i.archive_file is not None for i in table.timeline().instants):
            return
        table.upsert(batch([100 + round_], 10 + round_))
        table.clean()
        table.archive()
    raise AssertionError(f"{instant} was not archived")


@pytest.mark.parametrize("version", [6, 9])
def test_a_restore_archived_since_is_still_seen_by_streams(tmp_path: Path, version: int) -> None:
    """Version 9: once archived, the restore's plan file is gone, and every stream positioned before it (a
    new one from earliest too) failed with a raw FileNotFoundError. Version 6: the archived restore left the
    active timeline, so a stream that had read commits it undid went on silently."""
    from lakeward.core.spark.changes import stream_reader

    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_version=version, options=ARCHIVE_EARLY
    )
    first = table.insert(batch(range(3), 1)).instant_time
    table.savepoint(first)
    table.upsert(batch([0, 5], 2))
    options = {QUERY: "incremental", INCREMENTAL_FORMAT: "latest_state"}
    reader = stream_reader(path, options, _stream_schema(path, "latest_state"))
    read = reader.latestOffset(reader.initialOffset(), None)
    restore = table.restore(first).restore_instant_time
    table.delete_savepoint(first)
    _archive_past(table, restore)
    with pytest.raises(InstantNotFoundError, match=f"restore {restore}"):
        reader.latestOffset(read, None)
    fresh = stream_reader(path, options, _stream_schema(path, "latest_state"))
    begin = fresh.initialOffset()
    if version == 9:  # the archived restore undid nothing a new stream read
        assert fresh.partitions(begin, fresh.latestOffset(begin, None))


def test_a_rollback_archived_since_is_still_seen_by_a_version_6_stream(tmp_path: Path) -> None:
    """A rollback of a commit the stream had read, archived before the stream's next batch, left the active
    timeline: the stream read on, its consumer keeping the rolled-back rows."""
    from lakeward.core.spark.changes import stream_reader

    path = str(tmp_path / "t")
    # no metadata table: its compaction at every commit (for early archival) would keep a rollback of a commit
    options = {**ARCHIVE_EARLY, "hoodie.metadata.enable": "false"}
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_version=6, options=options
    )
    table.insert(batch(range(3), 1))
    second = table.upsert(batch([0, 5], 2)).instant_time
    options = {QUERY: "incremental", INCREMENTAL_FORMAT: "latest_state"}
    reader = stream_reader(path, options, _stream_schema(path, "latest_state"))
    read = reader.latestOffset(reader.initialOffset(), None)
    rollback = table.rollback(second).rollback_instant_time
    _archive_past(table, rollback)
    with pytest.raises(InstantNotFoundError, match=f"rollback {rollback} undid commit\\(s\\) {second}"):
        reader.latestOffset(read, None)


# -- bad input ----------------------------------------------------------------------------------
BAD_BATCH = [
    ("begin missing", {}, ConfigError, BEGIN),
    ("begin after end", {BEGIN: "20990101000000000", END: "20200101000000000"}, InstantNotFoundError, "is after end"),
    ("bad images", {BEGIN: "earliest", IMAGES: "avro"}, ConfigError, IMAGES),
    ("bad format", {BEGIN: "earliest", INCREMENTAL_FORMAT: "cdcc"}, ConfigError, INCREMENTAL_FORMAT),
]


@pytest.mark.parametrize(("options", "error", "needle"), [c[1:] for c in BAD_BATCH], ids=[c[0] for c in BAD_BATCH])
def test_bad_cdc_read_fails_naming_the_problem(
    lakeward_spark, cdc_table: tuple[str, list[str]], options: dict[str, str], error: type, needle: str
) -> None:
    with pytest.raises(error) as raised:
        cdc_read(lakeward_spark, cdc_table[0], **options)
    assert needle in str(raised.value)


def test_cdc_options_apply_to_cdc_reads_only(lakeward_spark, cdc_table: tuple[str, list[str]]) -> None:
    spark, path = lakeward_spark, cdc_table[0]
    with pytest.raises(ConfigError, match=QUERY):
        spark.read.format(FORMAT).option(INCREMENTAL_FORMAT, "cdc").option(BEGIN, "earliest").load(path)
    with pytest.raises(ConfigError, match=IMAGES):
        spark.read.format(FORMAT).option(QUERY, "incremental").option(BEGIN, ZERO).option(IMAGES, "struct").load(path)


def test_cdc_on_a_table_without_cdc_fails_on_every_surface(lakeward_spark, tmp_path: Path) -> None:
    from pyspark.sql.readwriter import DataFrameReader

    spark = lakeward_spark
    path = str(tmp_path / "plain")
    create(path, "COPY_ON_WRITE", mode=None).insert(batch(range(3), 1))
    needle = "does not have CDC enabled"
    with pytest.raises(ConfigError, match=needle):
        cdc_read(spark, path, **{BEGIN: "earliest"})
    with pytest.raises(Exception, match=needle):  # the registered Python data source
        DataFrameReader.load.__wrapped__(  # type: ignore[attr-defined]
            spark.read.format(FORMAT).options(**CDC).option(BEGIN, "earliest"), path
        ).collect()
    with pytest.raises(Exception, match=needle):
        spark.sql(f"select * from hudi_table_changes('{path}', 'earliest')").collect()
    query = (
        spark.readStream.format(FORMAT)
        .options(**CDC)
        .load(path)
        .writeStream.format("memory")
        .queryName("cdc_not_enabled")
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=needle):
        query.awaitTermination()


def test_bad_stream_options_fail_naming_the_option() -> None:
    from lakeward.core.spark.changes import check_stream_options

    for options, needle in (
        ({QUERY: "snapshot"}, QUERY),
        ({END: "20240101000000000"}, END),
        ({INCREMENTAL_FORMAT: "latest_state", IMAGES: "struct"}, IMAGES),
    ):
        with pytest.raises(LakewardError, match=needle):
            check_stream_options(options)


def test_a_stream_keeps_its_declared_image_schema_across_a_schema_change() -> None:
    """Struct images of rows written after a column was added (or with a wider type) fit the stream's schema."""
    from lakeward.core.spark.changes import conform

    image = pa.struct([("id", pa.int64()), ("v", pa.string()), ("gone", pa.int32())])
    target = pa.schema([("op", pa.string()), ("ts_ms", pa.string()), ("before", image), ("after", image)])
    evolved = pa.struct([("id", pa.int32()), ("v", pa.string()), ("added", pa.float64())])
    after = pa.array([{"id": 1, "v": "a", "added": 1.5}, None], evolved)
    rows = pa.table({"op": ["i", "d"], "ts_ms": ["1", "2"], "before": pa.nulls(2, evolved), "after": after})
    fitted = conform(rows, target)
    assert fitted.schema == target
    assert fitted.column("after").to_pylist() == [{"id": 1, "v": "a", "gone": None}, None]
    assert conform(fitted, target) is fitted


def test_sql_statements_name_their_catalog_tables() -> None:
    from lakeward.core.spark.changes import named_tables

    sql = """select * from HUDI_TABLE_CHANGES( 'db.trips', 'earliest')
             union all select * from hudi_table_changes("/data/t", '1') union all
             select * from hudi_table_changes("s3://b/t", '1') union all select * from hudi_table_changes("t2", '1')"""
    assert named_tables(sql) == ["db.trips", "t2"]


# -- Hudi 1.x tables (versions 8 and 9) -----------------------------------------------------------
def create_hudi_1x(path: str, version: int, table_type: str) -> Table:
    """A CDC-enabled table of `version` (before and after images logged)."""
    cdc = {"hoodie.table.cdc.enabled": "true", "hoodie.table.cdc.supplemental.logging.mode": "DATA_BEFORE_AFTER"}
    return Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_type=table_type,
                        table_version=version, options=cdc)  # fmt: skip


@pytest.fixture(scope="module", params=[(8, "COPY_ON_WRITE"), (9, "MERGE_ON_READ")], ids=["v8-cow", "v9-mor"])
def hudi_1x_cdc_table(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[str]]:
    """A CDC-enabled table of version 8 or 9 with the changes of `write_changes`."""
    version, table_type = request.param
    path = str(tmp_path_factory.mktemp("cdc-1x") / "t")
    return path, write_changes(create_hudi_1x(path, version, table_type), table_type)


def test_batch_cdc_read_of_a_version_8_or_9_table_gives_the_rows_of_read_changes(
    lakeward_spark, hudi_1x_cdc_table: tuple[str, list[str]]
) -> None:
    """The range is in completion time on versions 8+, as `Table.read_changes` reads it."""
    from pyspark.sql.readwriter import DataFrameReader

    spark = lakeward_spark
    path, instants = hudi_1x_cdc_table
    table = Table.open(path)
    done = {i.time: i.completion_time for i in table.timeline().completed()}
    for begin, end in (("earliest", None), (done[instants[0]], done[instants[2]]), (instants[1], None)):
        options = {BEGIN: begin} | ({END: end} if end else {})
        want = table.read_changes(begin, end).to_pylist()
        assert want, f"({begin}, {end}]: the case reads nothing"
        assert multiset(spark_rows(cdc_read(spark, path, **options))) == multiset(want), f"({begin}, {end}]"
    want = table.read_changes("earliest", images="struct").to_pylist()
    assert {r["op"] for r in want} == {"i", "u", "d"}
    assert multiset(spark_rows(cdc_read(spark, path, **{BEGIN: "earliest", IMAGES: "struct"}))) == multiset(want)
    registered = DataFrameReader.load.__wrapped__(  # type: ignore[attr-defined]
        spark.read.format(FORMAT).options(**CDC).option(BEGIN, "earliest"), path
    )
    assert multiset(spark_rows(registered)) == multiset(table.read_changes("earliest").to_pylist())
    rows = spark.sql(f"select * from hudi_table_changes('{path}', 'cdc', 'earliest')").collect()
    assert multiset([r.asDict(recursive=True) for r in rows]) == multiset(table.read_changes("earliest").to_pylist())


def test_a_stream_on_a_version_8_table_reads_every_write_up_to_now(lakeward_spark, tmp_path: Path) -> None:
    """On versions 8+ ranges are in completion time, so are stream offsets: a run with
    Trigger.AvailableNow reads the latest write too (not only those before its instant time)."""
    spark = lakeward_spark
    path = str(tmp_path / "t")
    table = create_hudi_1x(path, 8, "MERGE_ON_READ")
    table.insert(batch(range(6), 1))
    table.upsert(batch([0, 1, 7], 2))

    def run() -> list[dict[str, Any]]:
        query = (
            spark.readStream.format(FORMAT)
            .options(**CDC, **{IMAGES: "struct"})
            .load(path)
            .writeStream.format("parquet")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .option("path", str(tmp_path / "out"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        assert query.exception() is None
        return spark_rows(spark.read.parquet(str(tmp_path / "out")))

    assert multiset(run()) == multiset(table.read_changes("earliest", images="struct").to_pylist())
    table.delete(batch([2], 3))
    table.upsert(batch([0, 9], 4))
    assert multiset(run()) == multiset(table.read_changes("earliest", images="struct").to_pylist())


def test_batch_cdc_read_of_a_write_that_completed_out_of_order_gives_its_changes(
    lakeward_spark: Any, tmp_path: Path
) -> None:
    """Version 9: writer A requested before B and completed after it. The range (B.completion,
    A.completion] holds A's changes on Spark as in `read_changes` (whose `ts_ms` is before the
    range's begin), and a range that begins at a write's instant time holds that write."""
    w = write_out_of_order(str(tmp_path / "t"), 9, "MERGE_ON_READ")
    table = Table.open(w.path)
    done = w.completion
    for begin, end, written in ((done[w.b], done[w.a], {w.a}), (w.first, None, {w.first, w.a, w.b})):
        options = {BEGIN: begin, IMAGES: "struct"} | ({END: end} if end else {})
        want = table.read_changes(begin, end, images="struct").to_pylist()
        assert {r["ts_ms"] for r in want} == written, f"({begin}, {end}]"
        assert multiset(spark_rows(cdc_read(lakeward_spark, w.path, **options))) == multiset(want), f"({begin}, {end}]"


@pytest.mark.parametrize("version", [6, 9])
@pytest.mark.parametrize("fmt", ["cdc", "latest_state"])
def test_a_stream_that_fell_behind_the_cleaner_and_archival_says_so(tmp_path: Path, version: int, fmt: str) -> None:
    """A stream whose offset a clean (and on version 6 archival) left behind failed with the error of a
    one-off query ("begin instant ... is archived"), which does not say the stream fell behind nor how
    to go on. Now it names the stream's offset and what to do."""
    from lakeward.core.spark.changes import stream_reader

    path = str(tmp_path / "t")
    table = Table.create(
        path, record_key="id", partition_by="part", ordering_field="ts", table_version=version,
        options={"hoodie.table.cdc.enabled": "true", "hoodie.cleaner.commits.retained": "1",
                 "hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"},
    )  # fmt: skip
    table.insert(batch(range(3), 1))
    options = {QUERY: "incremental", INCREMENTAL_FORMAT: fmt}
    reader = stream_reader(path, options, _stream_schema(path, fmt))
    read = reader.latestOffset(reader.initialOffset(), None)
    for ts in range(2, 8):
        table.upsert(batch([0, 1, 2], ts))
        table.clean()
    table.archive()
    with pytest.raises(InstantNotFoundError) as raised:
        reader.partitions(read, reader.latestOffset(read, None))
    message = str(raised.value)
    assert f"stream's offset {read['instant']}" in message and "fell behind" in message, message
    assert "earliest" in message and "new checkpoint" in message, message
