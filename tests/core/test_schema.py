"""Tests of lakeward.core.schema against schemas Hudi (Spark writer) actually wrote."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import SchemaError
from lakeward.core.file_group.reader import aligned_schema
from lakeward.core.schema import (
    META_COLUMNS,
    META_SCHEMA,
    arrow_schema_from_avro,
    avro_schema_from_arrow,
    avro_schema_json,
    conform_batch,
    evolve_schema,
    strip_meta,
    with_meta,
)
from tests.support.fixture_tables import shared_dir

SHARED = shared_dir()
EXAMPLES = SHARED / "reference/hudi-avro/examples"
TABLE = "v6_complexkeygen_hivestyle"
COMMIT = EXAMPLES / f"cow_{TABLE}.20240418173235694.commit.json"


def _commit_schema(path: Path) -> str:
    return json.loads(path.read_text())["extraMetadata"]["schema"]


def _create_schema(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("hoodie.table.create.schema="):
            return line.split("=", 1)[1].replace("\\:", ":")  # Java properties escape
    raise AssertionError(f"no create schema in {path}")


@pytest.fixture(scope="module")
def base_files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("fixture")
    zip_path = SHARED / f"fixtures/hudi-tables/cow/{TABLE}.zip"
    with zipfile.ZipFile(zip_path) as zf:
        zf.extractall(root, [n for n in zf.namelist() if "__MACOSX" not in n])
    files = sorted(root.rglob("*.parquet"))
    assert files
    return files


ALL_TYPES = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("lbin", pa.large_binary()),
        ("dec", pa.decimal128(38, 2)),
        ("d", pa.date32()),
        ("ts_ns", pa.timestamp("ns")),
        ("ts_ms", pa.timestamp("ms", "Europe/Paris")),
        ("lst", pa.large_list(pa.decimal128(5, 1))),
        ("m", pa.map_(pa.string(), pa.list_(pa.int64()))),
        (
            "st",
            pa.struct([("x", pa.decimal128(3, 0)), ("y", pa.struct([("z", pa.string())]))]),
        ),
    ]
)


# --- Avro conversion --------------------------------------------------------------


def test_meta_columns() -> None:
    assert META_COLUMNS == (
        "_hoodie_commit_time",
        "_hoodie_commit_seqno",
        "_hoodie_record_key",
        "_hoodie_partition_path",
        "_hoodie_file_name",
    )
    assert META_SCHEMA.names == list(META_COLUMNS)
    assert all(f.type == pa.string() and f.nullable for f in META_SCHEMA)
    data = pa.schema([("id", pa.int32()), ("_hoodie_record_key", pa.string())])
    assert strip_meta(data).names == ["id"]
    assert with_meta(data).names == [*META_COLUMNS, "id"]


@pytest.mark.parametrize(
    ("commit", "table"),
    [
        (COMMIT, TABLE),
        (
            EXAMPLES / "mor_v6_trips_8i1u.20250331030645735.deltacommit.json",
            "v6_trips_8i1u",
        ),
        (
            EXAMPLES / "cow_overwritetable.20240707001303088.replacecommit.json",
            "v6_simplekeygen_nonhivestyle_overwritetable",
        ),
    ],
)
def test_commit_schema_round_trips_exactly(commit: Path, table: str) -> None:
    written = _commit_schema(commit)
    assert avro_schema_json(arrow_schema_from_avro(written), table) == written


@pytest.mark.parametrize(("name", "table"), [(f"cow_{TABLE}", TABLE), ("mor_v6_trips_8i1u", "v6_trips_8i1u")])
def test_create_schema_round_trips_with_spark_union_order(name: str, table: str) -> None:
    written = _create_schema(EXAMPLES / f"{name}.hoodie.properties")
    arrow = arrow_schema_from_avro(written)
    assert avro_schema_json(arrow, table, null_first=False) == written
    assert arrow == arrow_schema_from_avro(avro_schema_json(arrow, table))


def test_arrow_types_read_from_hudi_schema() -> None:
    schema = arrow_schema_from_avro(_commit_schema(COMMIT))
    assert all(f.nullable for f in schema)
    assert schema.field("decimalField").type == pa.decimal128(10, 5)
    assert schema.field("dateField").type == pa.date32()
    assert schema.field("timestampField").type == pa.timestamp("us", "UTC")
    assert schema.field("binaryField").type == pa.binary()
    assert schema.field("byteField").type == pa.int32()
    assert schema.field("mapField").type.key_type == pa.string()
    child = schema.field("structField").type.field("child_struct")
    assert child.type == pa.struct([("child_field1", pa.float64()), ("child_field2", pa.bool_())])


def test_parquet_footer_schema_matches(base_files: list[Path]) -> None:
    table_schema = arrow_schema_from_avro(_commit_schema(COMMIT))
    for path in base_files:
        pf = pq.ParquetFile(path)
        footer = pf.schema_arrow.metadata[b"parquet.avro.schema"].decode()
        # The Arrow schema of a Hudi base file maps back to the Avro schema Hudi wrote.
        assert avro_schema_json(pf.schema_arrow, TABLE, with_meta=True) == footer
        from_footer = arrow_schema_from_avro(footer)  # keeps the meta fields
        assert avro_schema_json(from_footer, TABLE, with_meta=True) == footer
        assert pf.schema_arrow.names[:5] == list(META_COLUMNS)
        # ...and agrees with the table schema up to list item naming/nullability.
        data = strip_meta(pf.schema_arrow)
        assert data.names == table_schema.names
        assert evolve_schema(table_schema, data) == table_schema
        conformed = conform_batch(pf.read(), table_schema)
        assert conformed.schema == table_schema
        assert conformed.num_rows == pf.metadata.num_rows


def test_type_mapping() -> None:
    avro = avro_schema_from_arrow(ALL_TYPES, "t")
    types = {f["name"]: f["type"][1] for f in avro["fields"]}
    assert all(f["type"][0] == "null" and f["default"] is None for f in avro["fields"])
    simple = [types[n] for n in ("b", "i8", "i16", "i32", "i64", "f32", "f64")]
    assert simple == ["boolean", "int", "int", "int", "long", "float", "double"]
    assert types["s"] == types["ls"] == "string"
    assert types["bin"] == types["lbin"] == "bytes"
    assert types["dec"] == {
        "type": "fixed",
        "name": "fixed",
        "namespace": "hoodie.t.t_record.dec",
        "size": 16,
        "logicalType": "decimal",
        "precision": 38,
        "scale": 2,
    }
    assert types["d"] == {"type": "int", "logicalType": "date"}
    assert types["ts_ns"] == {"type": "long", "logicalType": "timestamp-micros"}
    assert types["ts_ms"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert types["lst"]["items"][1]["namespace"] == "hoodie.t.t_record.lst"
    assert types["m"] == {
        "type": "map",
        "values": ["null", {"type": "array", "items": ["null", "long"]}],
    }
    st = types["st"]
    assert (st["name"], st["namespace"]) == ("st", "hoodie.t.t_record")
    assert st["fields"][0]["type"][1]["namespace"] == "hoodie.t.t_record.st.x"
    assert st["fields"][1]["type"][1]["namespace"] == "hoodie.t.t_record.st"


@pytest.mark.parametrize(
    ("precision", "size"),
    [(1, 1), (2, 1), (3, 2), (9, 4), (10, 5), (18, 8), (19, 9), (38, 16)],
)
def test_decimal_fixed_size_is_sparks(precision: int, size: int) -> None:
    avro = avro_schema_from_arrow(pa.schema([("d", pa.decimal128(precision, 0))]), "t")
    assert avro["fields"][0]["type"][1]["size"] == size


def test_table_name_is_sanitized_like_hudi() -> None:
    avro = avro_schema_from_arrow(pa.schema([("a", pa.int32())]), "1my-table")
    assert (avro["name"], avro["namespace"]) == (
        "__my__table_record",
        "hoodie.__my__table",
    )


def test_with_meta_and_create_order() -> None:
    schema = pa.schema([("_hoodie_file_name", pa.string()), ("a", pa.list_(pa.int32()))])
    avro = avro_schema_from_arrow(schema, "t", with_meta=True)
    assert [f["name"] for f in avro["fields"]] == [*META_COLUMNS, "a"]
    assert avro["fields"][0] == {
        "name": META_COLUMNS[0],
        "type": ["null", "string"],
        "doc": "",
        "default": None,
    }
    create = avro_schema_from_arrow(schema, "t", null_first=False)
    assert create["fields"][1] == {
        "name": "a",
        "type": [{"type": "array", "items": ["int", "null"]}, "null"],
    }
    assert " " not in avro_schema_json(ALL_TYPES, "t")


@pytest.mark.parametrize("null_first", [True, False])
@pytest.mark.parametrize("meta", [True, False])
def test_fastavro_accepts_every_produced_schema(null_first: bool, meta: bool) -> None:
    for schema in (ALL_TYPES, arrow_schema_from_avro(_commit_schema(COMMIT))):
        avro = avro_schema_from_arrow(schema, "t", with_meta=meta, null_first=null_first)
        fastavro.parse_schema(avro)
        fastavro.parse_schema(json.loads(avro_schema_json(schema, "t", with_meta=meta, null_first=null_first)))


@pytest.mark.parametrize(
    ("arrow_type", "match"),
    [
        (pa.uint32(), "'c'"),
        (pa.float16(), "'c'"),
        (pa.null(), "'c'"),
        (pa.decimal256(40, 2), "'c'"),
        (pa.dictionary(pa.int32(), pa.string()), "'c'"),
        (pa.map_(pa.int32(), pa.string()), "'c'.*string keys"),
        (pa.struct([("x", pa.time32("s"))]), "'c.x'"),
        (pa.list_(pa.duration("s")), "'c'"),
    ],
)
def test_unsupported_types_name_the_column(arrow_type: pa.DataType, match: str) -> None:
    with pytest.raises(SchemaError, match=match):
        avro_schema_from_arrow(pa.schema([("c", arrow_type)]), "t")


@pytest.mark.parametrize("fields", [[("a", pa.int32()), ("a", pa.string())], [("a-b", pa.int32())]])
def test_bad_field_names(fields: list[tuple[str, pa.DataType]]) -> None:
    with pytest.raises(SchemaError, match="field name"):
        avro_schema_from_arrow(pa.schema(fields), "t")


@pytest.mark.parametrize(
    "avro",
    [
        "{not json",
        '{"type": "array", "items": "int"}',
        '{"type":"record","name":"r","fields":[{"name":"a","type":["null","int","string"]}]}',
        '{"type":"record","name":"r","fields":[{"name":"a","type":"nosuch"}]}',
    ],
)
def test_bad_avro_schemas(avro: str) -> None:
    with pytest.raises(SchemaError):
        arrow_schema_from_avro(avro)


def test_avro_named_type_references_and_logical_types() -> None:
    avro = {
        "type": "record",
        "name": "r",
        "namespace": "ns",
        "fields": [
            {"name": "a", "type": {"type": "fixed", "name": "f", "size": 3}},
            {"name": "b", "type": ["null", "f"]},
            {"name": "c", "type": "ns.f"},
            {
                "name": "d",
                "type": {"type": "long", "logicalType": "local-timestamp-micros"},
            },
            {
                "name": "e",
                "type": {
                    "type": "bytes",
                    "logicalType": "decimal",
                    "precision": 4,
                    "scale": 2,
                },
            },
            {"name": "g", "type": {"type": "enum", "name": "E", "symbols": ["X"]}},
        ],
    }
    schema = arrow_schema_from_avro(avro)
    assert schema.types == [pa.binary(3)] * 3 + [
        pa.timestamp("us"),
        pa.decimal128(4, 2),
        pa.string(),
    ]


# --- evolution --------------------------------------------------------------------

BASE = pa.schema([("id", pa.int32()), ("name", pa.string())])


def test_new_columns_are_appended_nullable() -> None:
    incoming = pa.schema([pa.field("extra", pa.float64(), nullable=False), *BASE])
    assert evolve_schema(BASE, incoming) == pa.schema([*BASE, ("extra", pa.float64())])
    assert evolve_schema(BASE, BASE) == BASE


def test_missing_column_is_an_error() -> None:
    with pytest.raises(SchemaError, match="column 'name' of the table is missing from the batch"):
        evolve_schema(BASE, pa.schema([("id", pa.int32())]))


def test_type_change_names_column_and_types() -> None:
    with pytest.raises(SchemaError, match=r"column 'name' has type int64 in the batch but string"):
        evolve_schema(BASE, pa.schema([("id", pa.int32()), ("name", pa.int64())]))


@pytest.mark.parametrize(
    ("table_type", "batch_type", "result"),
    [
        (pa.int8(), pa.int32(), pa.int32()),
        (pa.int16(), pa.int8(), pa.int32()),
        (pa.int32(), pa.int8(), pa.int32()),
        (pa.int64(), pa.int16(), pa.int64()),
        (pa.int64(), pa.int32(), pa.int64()),
        (pa.string(), pa.large_string(), pa.string()),
        (pa.large_string(), pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary(), pa.binary()),
        (pa.large_binary(), pa.binary(), pa.large_binary()),
        (pa.timestamp("us", "UTC"), pa.timestamp("ns"), pa.timestamp("us", "UTC")),
        (
            pa.timestamp("us", "UTC"),
            pa.timestamp("ms", "Asia/Tokyo"),
            pa.timestamp("us", "UTC"),
        ),
        (pa.string(), pa.null(), pa.string()),
        (pa.list_(pa.int64()), pa.large_list(pa.int8()), pa.list_(pa.int64())),
        (
            pa.map_(pa.string(), pa.int64()),
            pa.map_(pa.large_string(), pa.int32()),
            pa.map_(pa.string(), pa.int64()),
        ),
    ],
)
def test_safe_widenings(table_type: pa.DataType, batch_type: pa.DataType, result: pa.DataType) -> None:
    evolved = evolve_schema(pa.schema([("c", table_type)]), pa.schema([("c", batch_type)]))
    assert evolved == pa.schema([("c", result)])


@pytest.mark.parametrize(
    ("table_type", "batch_type"),
    [
        (pa.int64(), pa.string()),
        (pa.string(), pa.int64()),
        (pa.float64(), pa.decimal128(10, 2)),
        (pa.bool_(), pa.int32()),
        (pa.binary(), pa.float64()),
        # Avro promotes these too, but they round large values
        (pa.int32(), pa.float32()),
        (pa.int64(), pa.float64()),
        (pa.float64(), pa.int64()),
        (pa.int64(), pa.float32()),
        (pa.decimal128(10, 5), pa.decimal128(12, 5)),
        (pa.date32(), pa.timestamp("us")),
        (pa.list_(pa.int32()), pa.list_(pa.string())),
        (pa.struct([("a", pa.int32())]), pa.list_(pa.int32())),
    ],
)
def test_unsafe_type_changes(table_type: pa.DataType, batch_type: pa.DataType) -> None:
    with pytest.raises(SchemaError, match=r"column 'c.*' has type"):
        evolve_schema(pa.schema([("c", table_type)]), pa.schema([("c", batch_type)]))


@pytest.mark.parametrize(
    ("table_type", "batch_type", "result"),
    [
        (pa.int32(), pa.int64(), pa.int64()),
        (pa.int8(), pa.int64(), pa.int64()),
        (pa.int16(), pa.float64(), pa.float64()),
        # string <-> bytes promote both ways: the table's type stays, the batch is cast to it
        (pa.string(), pa.binary(), pa.string()),
        (pa.binary(), pa.large_string(), pa.binary()),
        # a batch narrower than the table (by a promotion) is cast to the table's type, nested too
        (pa.int64(), pa.int32(), pa.int64()),
        (pa.float64(), pa.float32(), pa.float64()),
        (pa.float64(), pa.int32(), pa.float64()),
        (pa.struct([("a", pa.float64())]), pa.struct([("a", pa.float32())]), pa.struct([("a", pa.float64())])),
    ],
)
def test_avro_promotions_widen_the_column(table_type: pa.DataType, batch_type: pa.DataType, result: pa.DataType):
    """Avro's promotions that keep every value, which Hudi's writers apply as schema evolution: the wider type wins."""
    evolved = evolve_schema(pa.schema([("c", table_type)]), pa.schema([("c", batch_type)]))
    assert evolved == pa.schema([("c", result)])


@pytest.mark.parametrize(
    ("table_type", "batch_type", "match"),
    [
        (pa.float32(), pa.float64(), "readers disagree on the values"),
        (pa.struct([("a", pa.int32())]), pa.struct([("a", pa.int64())]), "top-level columns only"),
        (pa.list_(pa.int32()), pa.list_(pa.float64()), "top-level columns only"),
    ],
)
def test_widenings_readers_would_disagree_on_are_refused(table_type: pa.DataType, batch_type: pa.DataType, match: str):
    """Avro promotes these, but readers disagree on the widened values (float -> double) or cannot widen
    inside nested columns of merge-on-read logs (hudi-rs): refused, with the reason."""
    with pytest.raises(SchemaError, match=match):
        evolve_schema(pa.schema([("c", table_type)]), pa.schema([("c", batch_type)]))


def test_a_promotion_of_a_key_field_is_refused_but_int_to_long() -> None:
    table = pa.schema([("k", pa.int32()), ("p", pa.int32()), ("v", pa.int32())])
    widened = pa.schema([("k", pa.int64()), ("p", pa.int32()), ("v", pa.float64())])
    assert evolve_schema(table, widened, ["k", "p"]) == widened
    with pytest.raises(SchemaError, match="column 'p' is a record key or partition path field"):
        evolve_schema(table, pa.schema([("k", pa.int32()), ("p", pa.float64()), ("v", pa.int32())]), ["k", "p"])
    with pytest.raises(SchemaError, match="column 'k' is a record key or partition path field"):
        evolve_schema(table, pa.schema([("k", pa.float64()), ("p", pa.int32()), ("v", pa.int32())]), ["k", "p"])


def test_files_of_a_promoted_column_are_read_in_the_tables_type() -> None:
    """A base file older than a widening (ours, or a Hudi writer's float -> double) is read in the table's
    type; other physical types (string encodings) stay as the file has them, missing columns are added."""
    physical = pa.schema([("n", pa.int32()), ("f", pa.float32()), ("s", pa.large_string())])
    table = pa.schema([("n", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("new", pa.int32())])
    aligned = aligned_schema(physical, table)
    assert [aligned.field(n).type for n in ("n", "f", "s", "new")] == [
        pa.int64(),
        pa.float64(),
        pa.large_string(),
        pa.int32(),
    ]


def test_conform_casts_a_promoted_file_to_the_wider_type_and_refuses_the_reverse() -> None:
    target = pa.schema([("c", pa.float64())])
    assert conform_batch(pa.table({"c": pa.array([1, 2], pa.int32())}), target).to_pylist() == [{"c": 1.0}, {"c": 2.0}]
    with pytest.raises(SchemaError, match="column 'c' has type double in the batch but float"):
        conform_batch(pa.table({"c": pa.array([1.5], pa.float64())}), pa.schema([("c", pa.float32())]))


def test_nested_evolution() -> None:
    inner = pa.struct([("a", pa.int32())])
    table = pa.schema([("s", inner), ("l", pa.list_(inner)), ("m", pa.map_(pa.string(), inner))])
    wider = pa.struct([("b", pa.string()), ("a", pa.int16())])
    evolved = evolve_schema(
        table,
        pa.schema([("s", wider), ("l", pa.list_(wider)), ("m", pa.map_(pa.string(), wider))]),
    )
    new_inner = pa.struct([("a", pa.int32()), ("b", pa.string())])
    assert evolved == pa.schema(
        [
            ("s", new_inner),
            ("l", pa.list_(new_inner)),
            ("m", pa.map_(pa.string(), new_inner)),
        ]
    )
    with pytest.raises(SchemaError, match=r"column 's.a' of the table is missing"):
        evolve_schema(table, pa.schema([("s", pa.struct([("b", pa.int32())])), *table.remove(0)]))
    with pytest.raises(SchemaError, match=r"column 'l\[\].a' has type string"):
        evolve_schema(
            table,
            pa.schema(
                [
                    table.field(0),
                    ("l", pa.list_(pa.struct([("a", pa.string())]))),
                    table.field(2),
                ]
            ),
        )


def test_new_column_must_be_representable_and_meta_is_ignored() -> None:
    with pytest.raises(SchemaError, match="'bad'"):
        evolve_schema(BASE, pa.schema([*BASE, ("bad", pa.uint64())]))
    assert evolve_schema(with_meta(BASE), with_meta(BASE)) == BASE


# --- conforming batches -----------------------------------------------------------


def test_conform_casts_reorders_and_drops_meta() -> None:
    batch = pa.table({"name": ["x"], "_hoodie_record_key": ["k"], "id": pa.array([1], pa.int8())})
    out = conform_batch(batch, BASE)
    assert out.schema == BASE and out.to_pylist() == [{"id": 1, "name": "x"}]
    with pytest.raises(SchemaError, match="'_hoodie_commit_time' of the table is missing"):
        conform_batch(batch, with_meta(BASE))
    out = conform_batch(batch.to_batches()[0], with_meta(BASE), allow_missing=True)
    assert out.schema == with_meta(BASE)
    assert out.column("_hoodie_record_key").to_pylist() == ["k"]
    assert out.column("_hoodie_commit_time").to_pylist() == [None]


def test_conform_evolved_nested_batch() -> None:
    table = pa.schema([("s", pa.struct([("a", pa.int32())])), ("ts", pa.timestamp("us", "UTC"))])
    batch = pa.table(
        {
            "ts": pa.array([1_000], pa.timestamp("ns")),
            "s": pa.array([{"b": "x", "a": 1}], pa.struct([("b", pa.string()), ("a", pa.int8())])),
            "n": pa.array([None], pa.null()),
        }
    )
    with pytest.raises(SchemaError, match="'n'"):  # Arrow null type has no Avro equivalent
        evolve_schema(table, batch.schema)
    batch = batch.drop_columns(["n"])
    target = evolve_schema(table, batch.schema)
    out = conform_batch(batch, target)
    assert out.schema == target
    assert out.to_pylist()[0]["s"] == {"a": 1, "b": "x"}
    with pytest.raises(SchemaError, match="'s.b' of the batch is not in the target"):
        conform_batch(batch, table)


def test_conform_missing_columns() -> None:
    target = pa.schema([*BASE, ("s", pa.struct([("a", pa.int32()), ("b", pa.string())]))])
    batch = pa.table(
        {
            "id": pa.array([1], pa.int32()),
            "s": pa.array([{"a": 2}], pa.struct([("a", pa.int32())])),
        }
    )
    with pytest.raises(SchemaError, match="'name' of the table is missing"):
        conform_batch(batch, target)
    out = conform_batch(batch, target, allow_missing=True)
    assert out.to_pylist() == [{"id": 1, "name": None, "s": {"a": 2, "b": None}}]
    with pytest.raises(SchemaError, match="not nullable"):
        conform_batch(
            batch,
            pa.schema([*target, pa.field("req", pa.int32(), nullable=False)]),
            allow_missing=True,
        )


@pytest.mark.parametrize(
    ("target_type", "values", "source_type"),
    [
        (pa.timestamp("us", "UTC"), [1_001], pa.timestamp("ns")),
        (pa.int8(), [300], pa.int32()),
    ],
)
def test_conform_refuses_lossy_casts(target_type: pa.DataType, values: list[int], source_type: pa.DataType) -> None:
    with pytest.raises(SchemaError, match="column 'c' cannot be cast"):
        conform_batch(
            pa.table({"c": pa.array(values, source_type)}),
            pa.schema([("c", target_type)]),
        )


def test_conform_rejects_extra_columns() -> None:
    with pytest.raises(SchemaError, match="'extra' of the batch is not in the target"):
        conform_batch(
            pa.table({"id": pa.array([1], pa.int16()), "name": ["a"], "extra": [1.0]}),
            BASE,
        )
