"""Interop scenarios, shared by the interop tests of every write path (local engine, Spark data source).

`SCENARIOS`: tables lakeward writes (every key generator / partitioning style, every write
operation), each a list of steps with payloads and the final (partition path, record key)
pairs worked out by hand. The `FIXTURE_*` / `SQL_*` data describe the copy-on-write tables
Apache Hudi wrote (../shared/fixtures) and the upsert/delete the interop tests make into them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa

from lakeward.core.table import Table
from tests.interop.compare import Row, comparable_rows

Step = tuple[str, Any]  # (Table method name, payload)


@dataclass(frozen=True)
class Scenario:
    name: str
    schema: pa.Schema
    create: dict[str, Any]
    steps: list[Step]
    #: (_hoodie_partition_path, _hoodie_record_key) of the final snapshot, worked out by hand.
    expected: list[tuple[str, str]]


def _utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


RICH = pa.schema(
    [
        ("id", pa.int32()),
        ("version", pa.int64()),
        ("name", pa.string()),
        ("score", pa.float64()),
        ("active", pa.bool_()),
        ("birthday", pa.date32()),
        ("created", pa.timestamp("us")),
        ("updated", pa.timestamp("us", tz="UTC")),
        ("amount", pa.decimal128(12, 2)),
        ("tags", pa.list_(pa.string())),
        ("items", pa.list_(pa.struct([("sku", pa.string()), ("qty", pa.int32())]))),
        (
            "address",
            pa.struct(
                [
                    ("city", pa.string()),
                    ("zip", pa.string()),
                    ("geo", pa.struct([("lat", pa.float64()), ("lon", pa.float64())])),
                ]
            ),
        ),
        ("attrs", pa.map_(pa.string(), pa.int64())),
    ]
)


def rich(id: int, version: int = 1, **changes: Any) -> dict[str, Any]:
    row = {
        "id": id,
        "version": version,
        "name": f"user-{id}",
        "score": id * 1.25,
        "active": id % 2 == 0,
        "birthday": dt.date(1990, 1, id),
        "created": dt.datetime(2024, 3, id, 8, 30, 15, 123456),
        "updated": _utc(2024, 3, id, 9, 0, 0),
        "amount": Decimal(f"{id}00.{id:02d}"),
        "tags": ["a", f"t{id}"],
        "items": [{"sku": f"s{id}", "qty": id}, {"sku": "common", "qty": None}],
        "address": {"city": "Lisbon", "zip": f"10{id:02d}", "geo": {"lat": 38.7 + id, "lon": -9.1}},
        "attrs": [("k", id), ("v", version)],
    }
    row.update(changes)
    return row


SALES = pa.schema([("uuid", pa.string()), ("region", pa.string()), ("ts", pa.int64()), ("amount", pa.float64())])
EVENTS = pa.schema([("id", pa.int64()), ("year", pa.int32()), ("ts", pa.int64()), ("label", pa.string())])
ACCOUNTS = pa.schema(
    [
        ("tenant", pa.string()),
        ("id", pa.int32()),
        ("country", pa.string()),
        ("shard", pa.int32()),
        ("ts", pa.int64()),
        ("balance", pa.decimal128(10, 2)),
    ]
)
CLICKS = pa.schema([("id", pa.int32()), ("event_ms", pa.int64()), ("ts", pa.int64()), ("page", pa.string())])
PLACES = pa.schema([("id", pa.int32()), ("city", pa.string()), ("ts", pa.int64()), ("visits", pa.int64())])
BOOKS = pa.schema([("isbn", pa.string()), ("category", pa.string()), ("ts", pa.int64()), ("price", pa.float64())])
GRID = pa.schema([("id", pa.int32()), ("part", pa.string()), ("ts", pa.int64()), ("val", pa.string())])
PAIRS = pa.schema([("a", pa.string()), ("b", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])


def sale(uuid: str, region: str, ts: int, amount: float) -> dict[str, Any]:
    return {"uuid": uuid, "region": region, "ts": ts, "amount": amount}


def event(id: int, year: int, ts: int, label: str) -> dict[str, Any]:
    return {"id": id, "year": year, "ts": ts, "label": label}


def account(tenant: str, id: int, country: str, shard: int, ts: int, balance: str) -> dict[str, Any]:
    return {"tenant": tenant, "id": id, "country": country, "shard": shard, "ts": ts, "balance": Decimal(balance)}


def click(id: int, event_ms: int, ts: int, page: str) -> dict[str, Any]:
    return {"id": id, "event_ms": event_ms, "ts": ts, "page": page}


def place(id: int, city: str, ts: int, visits: int) -> dict[str, Any]:
    return {"id": id, "city": city, "ts": ts, "visits": visits}


def book(isbn: str, category: str, ts: int, price: float) -> dict[str, Any]:
    return {"isbn": isbn, "category": category, "ts": ts, "price": price}


def grid(ids: range | list[int], part: str | Callable[[int], str], ts: int) -> list[dict[str, Any]]:
    return [{"id": i, "part": part if isinstance(part, str) else part(i), "ts": ts, "val": f"{i}@{ts}"} for i in ids]


def _ab(i: int) -> str:
    return "a" if i < 20 else "b"


def pair(a: str, b: int, ts: int, v: str) -> dict[str, Any]:
    return {"a": a, "b": b, "ts": ts, "v": v}


# epoch milliseconds -> partition path (yyyy/MM/dd in UTC), worked out by hand
NOV14 = 1_700_000_000_000  # 2023-11-14T22:13:20Z -> 2023/11/14
NOV16 = 1_700_100_000_000  # 2023-11-16T02:00:00Z -> 2023/11/16
JAN01 = 1_704_067_200_000  # 2024-01-01T00:00:00Z -> 2024/01/01

SCENARIOS = [
    Scenario(
        "nonpartitioned-rich-types",
        RICH,
        {"record_key": "id", "ordering_field": "version"},
        [
            ("insert", [rich(1), rich(2), rich(3), rich(4)]),
            (
                "upsert",
                [
                    rich(2, 2, name="user-2-renamed", score=-0.5, tags=[], items=None, active=None),
                    rich(5, 1, name=None, score=None, birthday=None, created=None, updated=None, amount=None)
                    | {"tags": None, "address": None, "attrs": None},
                ],
            ),
            ("delete", [rich(3)]),
            ("delete_keys", [4]),
            ("insert", [rich(6, 1, amount=Decimal("-12.34"), address={"city": None, "zip": "", "geo": None})]),
        ],
        [("", "1"), ("", "2"), ("", "5"), ("", "6")],
    ),
    Scenario(
        "simple-keygen-nonhive",
        SALES,
        {"record_key": "uuid", "partition_by": "region", "ordering_field": "ts"},
        [
            (
                "bulk_insert",
                [
                    sale("u1", "us", 1, 10.0),
                    sale("u2", "us", 1, 20.0),
                    sale("e1", "eu", 1, 30.0),
                    sale("e2", "eu", 1, 40.0),
                    sale("a1", "ap", 1, 50.0),
                    sale("a2", "ap", 1, 60.0),
                ],
            ),
            ("upsert", [sale("u1", "us", 2, 11.0), sale("e3", "eu", 2, 31.0)]),
            ("delete_keys", ["a1"]),
            ("insert_overwrite", [sale("e9", "eu", 3, 99.0)]),
            ("upsert", [sale("a2", "ap", 4, 61.0), sale("u3", "us", 4, 12.0)]),
        ],
        [("ap", "a2"), ("eu", "e9"), ("us", "u1"), ("us", "u2"), ("us", "u3")],
    ),
    Scenario(
        "simple-keygen-hive",
        EVENTS,
        {"record_key": "id", "partition_by": "year", "ordering_field": "ts", "hive_style_partitioning": True},
        [
            (
                "insert",
                [event(1, 2022, 1, "a"), event(2, 2022, 1, "b"), event(3, 2023, 1, "c"), event(4, 2024, 1, "d")],
            ),
            ("upsert", [event(3, 2023, 2, "c2"), event(5, 2024, 2, "e")]),
            ("delete", [event(4, 2024, 2, "d")]),
            ("delete_partition", ["year=2022"]),
            ("upsert", [event(6, 2022, 3, "f"), event(5, 2024, 3, "e2")]),
            ("insert", [event(7, 2023, 4, "g")]),
        ],
        [("year=2022", "6"), ("year=2023", "3"), ("year=2023", "7"), ("year=2024", "5")],
    ),
    Scenario(
        "complex-keygen-hive",
        ACCOUNTS,
        {
            "record_key": ["tenant", "id"],
            "partition_by": ["country", "shard"],
            "ordering_field": "ts",
            "hive_style_partitioning": True,
        },
        [
            (
                "insert",
                [
                    account("acme", 1, "us", 1, 1, "10.00"),
                    account("acme", 2, "us", 2, 1, "20.00"),
                    account("beta", 1, "eu", 1, 1, "30.00"),
                    account("beta", 2, "eu", 1, 1, "40.00"),
                ],
            ),
            ("upsert", [account("acme", 1, "us", 1, 2, "11.50"), account("beta", 3, "eu", 2, 2, "5.00")]),
            ("delete_keys", [{"tenant": "beta", "id": 2, "country": "eu", "shard": 1}]),
            (
                "insert_overwrite_table",
                [account("gamma", 1, "jp", 7, 3, "1.00"), account("acme", 2, "us", 2, 3, "2.00")],
            ),
            ("upsert", [account("gamma", 1, "jp", 7, 4, "1.01"), account("gamma", 2, "jp", 7, 4, "2.02")]),
        ],
        [
            ("country=jp/shard=7", "tenant:gamma,id:1"),
            ("country=jp/shard=7", "tenant:gamma,id:2"),
            ("country=us/shard=2", "tenant:acme,id:2"),
        ],
    ),
    Scenario(
        "complex-keygen-nonhive",
        ACCOUNTS,
        {"record_key": ["tenant", "id"], "partition_by": ["country", "shard"], "ordering_field": "ts"},
        [
            (
                "upsert",
                [
                    account("acme", 1, "us", 1, 1, "10.00"),
                    account("acme", 2, "us", 1, 1, "20.00"),
                    account("beta", 1, "eu", 2, 1, "30.00"),
                    account("beta", 2, "eu", 3, 1, "40.00"),
                ],
            ),
            ("upsert", [account("acme", 2, "us", 1, 2, "21.00"), account("beta", 1, "eu", 2, 2, "31.00")]),
            ("delete", [account("acme", 1, "us", 1, 3, "0")]),
            ("insert_overwrite", [account("beta", 9, "eu", 3, 4, "9.99")]),
            ("delete_partition", ["eu/2"]),
        ],
        [("eu/3", "tenant:beta,id:9"), ("us/1", "tenant:acme,id:2")],
    ),
    Scenario(
        "complex-key-nonpartitioned",
        PAIRS,
        {"record_key": ["a", "b"], "ordering_field": "ts"},
        [
            ("upsert", [pair("x", 1, 1, "one"), pair("x", 2, 1, "two"), pair("y", 1, 1, "three")]),
            ("upsert", [pair("x", 2, 2, "two-b"), pair("y", 2, 2, "four")]),
            ("delete_keys", [{"a": "x", "b": 1}]),
        ],
        [("", "a:x,b:2"), ("", "a:y,b:1"), ("", "a:y,b:2")],
    ),
    Scenario(
        "timestamp-keygen",
        CLICKS,
        {
            "record_key": "id",
            "partition_by": "event_ms",
            "ordering_field": "ts",
            "key_generator": "TIMESTAMP",
            "options": {
                "hoodie.keygen.timebased.timestamp.type": "EPOCHMILLISECONDS",
                "hoodie.keygen.timebased.output.dateformat": "yyyy/MM/dd",
                "hoodie.keygen.timebased.timezone": "UTC",
            },
        },
        [
            ("upsert", [click(1, NOV14, 1, "/"), click(2, NOV14 + 1, 1, "/a"), click(3, NOV16, 1, "/b")]),
            ("upsert", [click(2, NOV14 + 1, 2, "/a2"), click(4, JAN01, 2, "/c"), click(5, JAN01 + 5, 2, "/d")]),
            ("delete_keys", [1]),
            ("delete_partition", ["2024/01/01"]),
            ("insert", [click(6, NOV16 + 10, 3, "/e")]),
        ],
        [("2023/11/14", "2"), ("2023/11/16", "3"), ("2023/11/16", "6")],
    ),
    Scenario(
        "url-encoded-nonhive",
        PLACES,
        {"record_key": "id", "partition_by": "city", "ordering_field": "ts", "url_encode_partitions": True},
        [
            (
                "upsert",
                [
                    place(1, "San Francisco", 1, 10),
                    place(2, "a/b", 1, 20),
                    place(3, "100%", 1, 30),
                    place(4, "x=y?", 1, 40),
                ],
            ),
            ("upsert", [place(1, "San Francisco", 2, 11), place(5, "a/b", 2, 50)]),
            ("delete_keys", [3]),
            ("delete_partition", ["a%2Fb"]),
        ],
        [("San Francisco", "1"), ("x%3Dy%3F", "4")],
    ),
    Scenario(
        "url-encoded-hive",
        BOOKS,
        {
            "record_key": "isbn",
            "partition_by": "category",
            "ordering_field": "ts",
            "url_encode_partitions": True,
            "hive_style_partitioning": True,
        },
        [
            ("insert", [book("b1", "Books & Media", 1, 9.5), book("b2", "C++", 1, 40.0), book("b3", "C++", 1, 45.0)]),
            ("upsert", [book("b2", "C++", 2, 39.0), book("b4", "Books & Media", 2, 12.0)]),
            ("delete", [book("b1", "Books & Media", 3, 0.0)]),
            ("insert_overwrite", [book("b9", "C++", 4, 1.0)]),
        ],
        [("category=Books & Media", "b4"), ("category=C++", "b9")],
    ),
    Scenario(
        # ~10 records per file: several file groups per partition, inserts packed into small files
        "many-file-groups",
        GRID,
        {
            "record_key": "id",
            "partition_by": "part",
            "ordering_field": "ts",
            "options": {
                "hoodie.parquet.max.file.size": "1000",
                "hoodie.parquet.small.file.limit": "600",
                "hoodie.copyonwrite.record.size.estimate": "100",
            },
        },
        [
            ("bulk_insert", grid(range(30), _ab, 1)),
            ("upsert", grid(range(0, 40, 3), _ab, 2)),
            ("delete_keys", [1, 2, 25]),
            ("insert", grid(range(40, 45), "c", 3)),
            ("insert_overwrite", grid([100], "b", 4)),
            ("upsert", grid(range(5, 15), "a", 5)),
        ],
        [("a", str(i)) for i in range(20) if i not in (1, 2)] + [("b", "100")] + [("c", str(i)) for i in range(40, 45)],
    ),
    Scenario(
        "bucket-index-hive",
        GRID,
        {
            "record_key": "id",
            "partition_by": "part",
            "ordering_field": "ts",
            "hive_style_partitioning": True,
            "options": {"hoodie.index.type": "BUCKET", "hoodie.bucket.index.num.buckets": "3"},
        },
        [
            ("upsert", grid(range(12), lambda i: "a" if i % 2 else "b", 1)),
            ("upsert", grid([1, 3, 12, 13], "a", 2)),
            ("delete", grid([5, 7], "a", 3)),
            ("delete_partition", ["part=b"]),
            ("upsert", grid([20, 21], "b", 4)),
        ],
        [("part=a", str(i)) for i in (1, 3, 9, 11, 12, 13)] + [("part=b", "20"), ("part=b", "21")],
    ),
    Scenario(
        "simple-index-default-payload",
        GRID,
        {
            "record_key": "id",
            "partition_by": "part",
            "ordering_field": "ts",
            "options": {
                "hoodie.index.type": "SIMPLE",
                "hoodie.datasource.write.payload.class": "org.apache.hudi.common.model.DefaultHoodieRecordPayload",
            },
        },
        [
            ("upsert", grid(range(6), "x", 5)),
            ("upsert", grid([0, 1], "x", 1) + grid([2, 6], "x", 9)),  # 0 and 1 are older: kept as they were
            ("delete_keys", [3]),
        ],
        [("x", str(i)) for i in (0, 1, 2, 4, 5, 6)],
    ),
    Scenario(
        "nonpartitioned-overwrite-table",
        SALES,
        {"record_key": "uuid", "ordering_field": "ts"},
        [
            ("bulk_insert", [sale("k1", "r", 1, 1.0), sale("k2", "r", 1, 2.0), sale("k3", "r", 1, 3.0)]),
            ("upsert", [sale("k2", "r", 2, 2.5)]),
            ("insert_overwrite_table", [sale("n1", "r", 3, 10.0), sale("n2", "r", 3, 20.0)]),
            ("delete_keys", ["n1", "k1"]),
            ("insert", [sale("n3", "r", 4, 30.0)]),
        ],
        [("", "n2"), ("", "n3")],
    ),
]


def run_step(table: Table, schema: pa.Schema, step: Step) -> str:
    """Apply one step through the Table API (local engine); returns its instant time."""
    op, payload = step
    if op == "delete_keys":
        result = table.delete(keys=payload)
    elif op == "delete_partition":
        result = table.delete_partition(payload)
    else:
        result = getattr(table, op)(pa.Table.from_pylist(payload, schema=schema))
    return result.instant_time


def scenario_ids(scenarios: list[Scenario]) -> list[str]:
    return [s.name for s in scenarios]


#: Meta columns of `rich_expected` rows (then the RICH data columns).
RICH_META = [pa.field(c, pa.string()) for c in ("_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path")]


def rich_expected(instants: list[str]) -> list[Row]:
    """The final rows of the "nonpartitioned-rich-types" scenario, by hand; `instants` are its steps' instants.

    Normalised by `comparable_rows` (which also turns the aware `updated` values into naive UTC).
    """
    expected = {
        1: rich(1),
        2: rich(2, 2, name="user-2-renamed", score=-0.5, tags=[], items=None, active=None),
        5: rich(5, 1, name=None, score=None, birthday=None, created=None, updated=None, amount=None)
        | {"tags": None, "address": None, "attrs": None},
        6: rich(6, 1, amount=Decimal("-12.34"), address={"city": None, "zip": "", "geo": None}),
    }
    commit = {1: instants[0], 2: instants[1], 5: instants[1], 6: instants[4]}
    return comparable_rows(
        pa.Table.from_pylist(
            [
                {"_hoodie_commit_time": commit[i], "_hoodie_record_key": str(i), "_hoodie_partition_path": ""} | row
                for i, row in expected.items()
            ],
            schema=pa.schema([*RICH_META, *RICH]),
        )
    )


# ----------------------------------------------------------------------------------------
# Fixture tables written by Apache Hudi, and our writes into them
# ----------------------------------------------------------------------------------------

# Rows of the fixtures' SQL (both INSERT statements applied; Alice was re-inserted with
# isActive=false by the second one, Diana inserted by it).
FIXTURE_COLUMNS = ["id", "name", "isActive", "intField", "longField", "doubleField", "decimalField", "dateField"]
SQL_ROWS = {
    1: (1, "Alice", False, 15000, 1234567890, 3.14159, Decimal("12345.67890"), dt.date(2023, 4, 1)),
    2: (2, "Bob", False, 25000, 9876543210, 2.71828, Decimal("67890.12345"), dt.date(2023, 4, 2)),
    3: (3, "Carol", True, 35000, 1928374650, 1.41421, Decimal("11111.22222"), dt.date(2023, 4, 3)),
    4: (4, "Diana", True, 45000, 987654321, 2.468, Decimal("65432.12345"), dt.date(2023, 4, 4)),
}
SQL_PARTITION = {1: (10, 300), 2: (20, 100), 3: (10, 300), 4: (30, 100)}  # (byteField, shortField)
SQL_ARRAY = {
    1: [("red", 100), ("blue", 200), ("green", 300)],
    2: [("yellow", 400), ("purple", 500)],
    3: [("black", 600), ("white", 700), ("pink", 800)],
    4: [("orange", 900), ("gray", 1000)],
}
# Our writes: Bob (id 2) updated, Eve (id 5) inserted in a new partition, Carol (id 3) deleted.
BOB_UPDATE = {
    "isActive": True,
    "intField": 25001,
    "longField": 9876543211,
    "doubleField": 2.5,
    "decimalField": Decimal("67890.54321"),
    "arrayField": [{"arr_struct_f1": "cyan", "arr_struct_f2": 401}],
}
EVE = {
    "id": 5,
    "name": "Eve",
    "isActive": True,
    "intField": 55000,
    "longField": 5555555555,
    "doubleField": 5.5,
    "decimalField": Decimal("55555.55555"),
    "dateField": dt.date(2023, 4, 5),
    "arrayField": [{"arr_struct_f1": "teal", "arr_struct_f2": 5}],
    "byteField": 40,
    "shortField": 400,
}


@dataclass(frozen=True)
class FixtureLayout:
    partition: Callable[[int, int], str]  # (byteField, shortField) -> partition path
    record_key: Callable[[int, str], str]  # (id, name) -> record key
    delete: str  # how Carol is deleted: "keys" (values or dicts) or "rows"


FIXTURE_LAYOUTS = {
    "v6_nonpartitioned": FixtureLayout(lambda b, s: "", lambda i, n: str(i), "keys"),
    "v6_simplekeygen_nonhivestyle": FixtureLayout(lambda b, s: str(b), lambda i, n: str(i), "rows"),
    "v6_complexkeygen_hivestyle": FixtureLayout(
        lambda b, s: f"byteField={b}/shortField={s}", lambda i, n: f"id:{i},name:{n}", "keys"
    ),
}
COMPARED = ["_hoodie_commit_time", "_hoodie_record_key", "_hoodie_partition_path", *FIXTURE_COLUMNS, "arrayField"]


def expected_fixture_row(layout: FixtureLayout, values: dict[str, Any], commit: str) -> dict[str, Any]:
    return {
        "_hoodie_commit_time": commit,
        "_hoodie_record_key": layout.record_key(values["id"], values["name"]),
        "_hoodie_partition_path": layout.partition(values["byteField"], values["shortField"]),
        **{c: values[c] for c in FIXTURE_COLUMNS},
        "arrayField": values["arrayField"],
    }


def sql_row(i: int) -> dict[str, Any]:
    values = dict(zip(FIXTURE_COLUMNS, SQL_ROWS[i]))
    values["byteField"], values["shortField"] = SQL_PARTITION[i]
    values["arrayField"] = [{"arr_struct_f1": a, "arr_struct_f2": b} for a, b in SQL_ARRAY[i]]
    return values


def by_sort(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["_hoodie_partition_path"], r["_hoodie_record_key"]))
