"""The light footer reader returns the key-value metadata pyarrow reads, without the large values.

Checked on base files lakeward writes, on every Parquet file of the Apache Hudi (Spark)
fixture tables, and on footers with odd shapes (no key-value metadata, values without a
value, large values, many columns); damaged files make it give up (None), never misread.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.file_group.base_file import read_footer_keys
from lakeward.core.file_group.parquet_footer import Located, footer_key_values
from lakeward.core.table import Table
from tests.support.fixture_tables import fixture_tables_dir, v8_v9_fixture_tables_dir


def light(path: Path, inline_limit: int = 4096) -> dict[bytes, bytes] | None:
    """Footer key-values by the light reader, with located values read, as pyarrow returns them."""
    with pa.OSFile(str(path)) as source:
        values = footer_key_values(source, inline_limit)
        if values is None:
            return None
        return {k: v.read(source) if isinstance(v, Located) else v for k, v in values.items()}


def pyarrow_values(path: Path) -> dict[bytes, bytes]:
    return dict(pq.read_metadata(str(path)).metadata or {})


def test_lakeward_base_file_footer_matches_pyarrow_and_leaves_the_bloom_filter_unread(tmp_path: Path) -> None:
    t = Table.create(str(tmp_path / "t"), record_key="key", partition_by="p")
    t.upsert(pa.table({"key": [f"k{i:04d}" for i in range(500)], "p": ["a"] * 500, "v": list(range(500))}))
    (file_slice,) = t.file_slices()
    path = tmp_path / "t" / file_slice.base_file.path
    assert light(path) == pyarrow_values(path)
    with pa.OSFile(str(path)) as source:
        values = footer_key_values(source)
    assert values is not None
    bloom = values[b"org.apache.hudi.bloomfilter"]
    assert isinstance(bloom, Located) and bloom.length > 100_000, "the filter is located, not read"
    assert all(isinstance(v, bytes) for k, v in values.items() if k != b"org.apache.hudi.bloomfilter")
    footer = read_footer_keys(t.storage, file_slice.base_file.path)
    assert (footer.min_key, footer.max_key) == ("k0000", "k0499")
    assert footer.bloom is not None and footer.bloom.might_contain(pa.array(["k0123"])).all()


def _fixture_parquet_files(tmp_path: Path) -> list[Path]:
    files: list[Path] = []
    for root in (fixture_tables_dir(), v8_v9_fixture_tables_dir()):
        for archive in sorted(root.glob("*/**/*.zip")):
            target = tmp_path / archive.relative_to(root).with_suffix("")
            with zipfile.ZipFile(archive) as z:
                names = [n for n in z.namelist() if n.endswith(".parquet")]
                z.extractall(target, names)
            files += [target / n for n in names]
    return files


def test_every_hudi_written_parquet_footer_reads_as_pyarrow_reads_it(tmp_path: Path) -> None:
    files = _fixture_parquet_files(tmp_path)
    assert files, f"no Hudi fixture tables under {fixture_tables_dir()} and {v8_v9_fixture_tables_dir()}"
    read = 0
    for path in files:
        try:
            expected = pyarrow_values(path)
        except pa.ArrowInvalid:  # a file the fixture leaves damaged or empty on purpose
            assert light(path) is None, path
            continue
        read += 1
        for limit in (0, 4096):
            assert light(path, limit) == expected, path
    assert read > 10


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        {},
        {b"a": b""},
        {b"small": b"x", b"big": b"y" * 100_000, b"after": b"z"},
        {b"\xff\x00binary": bytes(range(256)) * 40},
    ],
)
def test_odd_footers_read_as_pyarrow_reads_them(tmp_path: Path, metadata: dict[bytes, bytes] | None) -> None:
    columns = {f"c{i}": pa.array([i, None, 3 * i], pa.int64()) for i in range(40)}
    columns |= {"s": pa.array(["x", "yy", None]), "b": pa.array([True, False, None])}
    table = pa.table(columns)
    path = tmp_path / "f.parquet"
    with pq.ParquetWriter(str(path), table.schema, store_schema=False) as writer:
        writer.write_table(table, row_group_size=1)
        if metadata is not None:
            writer.add_key_value_metadata(metadata)
    for limit in (0, 16, 4096):
        assert light(path, limit) == pyarrow_values(path)


@pytest.mark.parametrize("cut", [1, 9, 200, 5_000])
def test_damaged_footers_are_left_to_pyarrow(tmp_path: Path, cut: int) -> None:
    table = pa.table({"k": [f"k{i}" for i in range(100)]})
    path = tmp_path / "f.parquet"
    pq.write_table(table, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 8 - cut] + data[-8:] if cut < len(data) - 12 else data[:4])
    assert light(path) is None or light(path) == {}  # never a misread value


def test_an_encrypted_or_foreign_footer_is_left_to_pyarrow(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(pa.table({"k": [1]}), str(path))
    data = bytearray(path.read_bytes())
    data[-4:] = b"PARE"
    path.write_bytes(bytes(data))
    assert light(path) is None
