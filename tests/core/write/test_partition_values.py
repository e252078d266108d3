"""Partition values that are not plain folder names (issue 18, item 4).

With `hoodie.datasource.write.partitionpath.urlencode=true` values are escaped as Hudi's
`PartitionPathEncodeUtils` does (a value is always one folder, decoded back on read); without
it a value holding a path separator is refused (see tests/core/test_bad_input.py).
hudi-rs, the oracle, must read the same rows, with and without a filter on the value.

A difference, from hudi-rs's source (`PartitionPruner::parse_segments`): it percent-decodes
the whole partition path and then splits it at `/`, so a value holding an encoded `/` gives
too many segments; hudi-rs then keeps the partition (no pruning) and its row filter still
returns the right rows, which is what these tests check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hudi
import pyarrow as pa
import pytest

from lakeward.core.config.table import KeyGeneratorType, TableConfig, TableType
from lakeward.core.keygen import escape_partition_value, partition_filter_values, unescape_partition_value
from lakeward.core.table import Table

# Worked out by hand from Hudi's escape set: ASCII controls, DEL and "#%'*/:=?\{[]^ become %XX
# (upper-case hex); spaces, `+`, `&`, `}` and non-ASCII characters stay.
ESCAPED = {
    "eu/west": "eu%2Fwest",
    "x=y?": "x%3Dy%3F",
    "100%": "100%25",
    'a"b#c': "a%22b%23c",
    "it's*": "it%27s%2A",
    "12:30": "12%3A30",
    "a\\b": "a%5Cb",
    "{[x]^}": "%7B%5Bx%5D%5E}",
    "tab\there\n": "tab%09here%0A",
    "del\x7f": "del%7F",
    "San Francisco": "San Francisco",
    "C++ & more": "C++ & more",
    "Zürich 東京": "Zürich 東京",
    "..": "..",
}


@pytest.mark.parametrize("value", sorted(ESCAPED))
def test_escape_as_hudi(value: str) -> None:
    assert escape_partition_value(value) == ESCAPED[value]
    assert unescape_partition_value(ESCAPED[value]) == value


def test_unescape_keeps_what_is_no_escape() -> None:
    assert unescape_partition_value("100%") == "100%"
    assert unescape_partition_value("a%zzb%4") == "a%zzb%4"
    assert unescape_partition_value("%2f%2F") == "//"


@pytest.mark.parametrize("hive", [False, True])
def test_partition_filter_values_are_decoded(hive: bool) -> None:
    config = TableConfig(
        name="t",
        table_type=TableType.COPY_ON_WRITE,
        record_key_fields=("id",),
        partition_fields=("country", "city"),
        key_generator=KeyGeneratorType.COMPLEX,
        hive_style_partitioning=hive,
        url_encode_partitions=True,
    )
    path = "country=fr/city=a%2Fb%3Dc" if hive else "fr/a%2Fb%3Dc"
    assert partition_filter_values(path, config) == {"country": "fr", "city": "a/b=c"}


def _hudi_rs_ids(path: Path, filters: list[tuple[str, str, str]] | None = None) -> list[Any]:
    table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(hudi.HudiReadOptions(filters=filters) if filters else None)
    return sorted(pa.Table.from_batches(batches).column("id").to_pylist()) if batches else []


def _folders(path: Path) -> list[str]:
    """Every folder below the table that holds data files (relative, `/`-separated)."""
    return sorted(str(p.parent.relative_to(path)) for p in path.rglob("*") if p.is_file() and ".hoodie" not in p.parts)


@pytest.mark.parametrize("table_type", ["COPY_ON_WRITE", "MERGE_ON_READ"])
@pytest.mark.parametrize("hive", [False, True], ids=["plain", "hive"])
def test_url_encoded_values_round_trip(tmp_path: Path, hive: bool, table_type: str) -> None:
    path = tmp_path / "t"
    table = Table.create(
        str(path),
        record_key="id",
        partition_by="region",
        ordering_field="ts",
        table_type=table_type,
        hive_style_partitioning=hive,
        options={"hoodie.datasource.write.partitionpath.urlencode": "true"},
    )
    # ".." is a usable folder name only hive style (`region=..`); plain, it is refused (test_bad_input).
    regions = ["eu", "eu/west", "x=y?", "San Francisco", "100%"] + ([".."] if hive else [])
    ids = [f"k{i}" for i in range(len(regions))]
    table.upsert(pa.table({"id": ids, "region": regions, "ts": [1] * len(regions), "v": [0] * len(regions)}))
    prefix = "region=" if hive else ""
    assert set(_folders(path)) == {f"{prefix}{ESCAPED.get(r, r)}" for r in regions}
    assert not (path / f"{prefix}eu" / "west").exists()

    # An update and a delete find the row in its encoded partition (no second copy of the key).
    table = Table.open(str(path))
    table.upsert(pa.table({"id": ["k1"], "region": ["eu/west"], "ts": [2], "v": [7]}))
    table.delete(keys=["k2"])
    rows = {r["id"]: r for r in Table.open(str(path)).read().to_pylist()}
    assert sorted(rows) == sorted(set(ids) - {"k2"})
    assert rows["k1"]["region"] == "eu/west" and rows["k1"]["v"] == 7
    assert rows["k1"]["_hoodie_partition_path"] == f"{prefix}eu%2Fwest"

    # Filters on the value: lakeward and hudi-rs agree.
    for value, want in [("eu/west", ["k1"]), ("eu", ["k0"]), ("San Francisco", ["k3"]), ("100%", ["k4"])]:
        got = Table.open(str(path)).read(filters=[("region", "=", value)]).column("id").to_pylist()
        assert got == want, value
        assert _hudi_rs_ids(path, [("region", "=", value)]) == want, value
    assert _hudi_rs_ids(path) == sorted(rows)


def test_url_encoded_table_refuses_only_dot_folders(tmp_path: Path) -> None:
    """Encoding makes any value one folder, except `.` and `..` (plain style), which Hudi refuses too."""
    path = tmp_path / "t"
    table = Table.create(str(path), record_key="id", partition_by="region", url_encode_partitions=True)
    table.upsert(pa.table({"id": ["a", "b"], "region": ["a/b/c", "\\"]}))
    assert set(_folders(path)) == {"a%2Fb%2Fc", "%5C"}
    assert _hudi_rs_ids(path) == ["a", "b"]


@pytest.mark.parametrize("hive", [False, True], ids=["plain", "hive"])
def test_filters_on_url_encoded_values_prune_partitions(tmp_path: Path, hive: bool) -> None:
    """A filter on an encoded partition value reads only the partitions it can match (decoded values
    compared), with the rows a scan of every partition returns."""
    path = tmp_path / "t"
    table = Table.create(
        str(path), record_key="id", partition_by=["region", "day"], hive_style_partitioning=hive,
        options={"hoodie.datasource.write.partitionpath.urlencode": "true"},
    )  # fmt: skip
    regions = ["eu", "eu/west", "x=y?", "San Francisco", "100%"]
    table.upsert(
        pa.table({
            "id": [f"k{i}-{d}" for i in range(len(regions)) for d in (1, 2)],
            "region": [r for r in regions for _ in (1, 2)],
            "day": pa.array([d for _ in regions for d in (1, 2)], pa.int32()),
        })
    )  # fmt: skip
    region, day = ("region=", "day=") if hive else ("", "")

    def folders(encoded: list[str], days: tuple[int, ...] = (1, 2)) -> set[str]:
        return {f"{region}{e}/{day}{d}" for e in encoded for d in days}

    every = folders([ESCAPED.get(r, r) for r in regions])
    cases: list[tuple[list[Any], set[str]]] = [
        ([("region", "=", "eu/west")], folders(["eu%2Fwest"])),
        ([("region", "in", ["100%", "x=y?"]), ("day", "=", 2)], folders(["100%25", "x%3Dy%3F"], (2,))),
        ([("region", ">=", "eu"), ("region", "<", "eu0")], folders(["eu", "eu%2Fwest"])),
    ]
    for filters, read in cases:
        explained = Table.open(str(path)).explain(filters=filters)
        assert {p.partition_path for p in explained.pruned} == every - read, filters
        got = Table.open(str(path)).read(filters=filters).column("id").to_pylist()
        everything = Table.open(str(path)).read()
        want = [
            r["id"] for r in everything.to_pylist()
            if all(_holds(r[c], op, v) for c, op, v in filters)
        ]  # fmt: skip
        assert sorted(got) == sorted(want) and want, filters


def _holds(value: Any, op: str, operand: Any) -> bool:
    return {"=": lambda: value == operand, "in": lambda: value in operand, ">=": lambda: value >= operand,
            "<": lambda: value < operand}[op]()  # fmt: skip
