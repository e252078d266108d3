"""Hudi bloom filter: bit-exact against real Hudi footers and Hadoop's own classes."""

from __future__ import annotations

import base64
import importlib.util
import random
import shutil
import struct
import subprocess
import uuid
import zipfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeward.core.exceptions import CorruptTableError, InvalidRecordError
from lakeward.core.index import bloom_filter as bf_module
from lakeward.core.index.bloom_filter import (
    BLOOM_FILTER_FOOTER_KEY,
    BLOOM_TYPE_CODE_FOOTER_KEY,
    MAX_RECORD_KEY_FOOTER_KEY,
    MIN_RECORD_KEY_FOOTER_KEY,
    BloomFilter,
    hash_positions,
)
from tests.support.fixture_tables import fixture_tables_dir

FIXTURES = fixture_tables_dir()
ZIPS = sorted(FIXTURES.glob("cow/*.zip")) + sorted(FIXTURES.glob("mor/**/*.zip"))
NON_ASCII = ["é", "ß", "ñ", "中", "€", "😀", "\x7f", "a", "Z", "0", "-", ":", ","]


def unzip_table(archive: Path, dest: Path) -> Path:
    """Extracts a fixture zip without the macOS resource-fork junk it carries."""
    with zipfile.ZipFile(archive) as zf:
        names = [n for n in zf.namelist() if "__MACOSX" not in n and "/._" not in n]
        zf.extractall(dest, names)
    return dest


def base_files(table: Path) -> list[Path]:
    return sorted(p for p in table.rglob("*.parquet") if ".hoodie" not in p.parts)


def random_keys(rng: random.Random, count: int) -> list[str]:
    """Numeric, `id:N,name:X`, UUID and arbitrary non-ASCII keys of many byte lengths."""
    makers = [
        lambda: str(rng.randrange(10**12)),
        lambda: f"id:{rng.randrange(10**6)},name:{rng.choice(['Ann', 'Bob', 'Zoë'])}",
        lambda: str(uuid.UUID(int=rng.getrandbits(128))),
        lambda: "".join(rng.choice(NON_ASCII) for _ in range(rng.randint(1, 30))),
    ]
    return [rng.choice(makers)() for _ in range(count)]


def murmur_reference(data: bytes, seed: int) -> int:
    """Scalar Hadoop MurmurHash2 written from the format notes, to check the numpy one."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (seed ^ len(data)) & mask
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little") * m & mask
        k = (k ^ (k >> 24)) * m & mask
        h = (h * m & mask) ^ k
    tail = data[whole:]
    if tail:  # sign-extended bytes, the first tail byte takes the largest shift
        for shift, byte in zip((16, 8, 0)[3 - len(tail) :], tail, strict=True):
            h ^= ((byte - 256 if byte > 127 else byte) << shift) & mask
        h = h * m & mask
    h = (h ^ (h >> 13)) * m & mask
    return h ^ (h >> 15)


def positions_reference(key: str, k: int, size: int) -> list[int]:
    h, out = 0, []
    for _ in range(k):
        h = murmur_reference(key.encode(), h)
        signed = h - 2**32 if h >= 2**31 else h
        out.append(abs(signed) % size)  # == |Java's truncating remainder|
    return out


def test_fixture_tables_are_present() -> None:
    assert len(ZIPS) >= 9, f"fixture zips missing under {FIXTURES}"


@pytest.mark.parametrize("archive", ZIPS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_fixture_base_file(archive: Path, tmp_path: Path) -> None:
    table = unzip_table(archive, tmp_path)
    files = base_files(table)
    assert files or "empty" in archive.stem, f"no base files in {archive}"
    rng = random.Random(archive.name)
    for path in files:
        footer = pq.read_metadata(path).metadata
        text = footer[BLOOM_FILTER_FOOTER_KEY.encode()].decode()
        code = footer.get(BLOOM_TYPE_CODE_FOOTER_KEY.encode(), b"DYNAMIC_V0").decode()
        keys = pq.read_table(path, columns=["_hoodie_record_key"]).column(0)
        members = keys.to_pylist()
        assert members
        assert footer[MIN_RECORD_KEY_FOOTER_KEY.encode()].decode() == min(members)
        assert footer[MAX_RECORD_KEY_FOOTER_KEY.encode()].decode() == max(members)

        parsed = BloomFilter.deserialize(text, code)
        assert (parsed.type_code, parsed.num_hashes, parsed.vector_size) == (
            "DYNAMIC_V0",
            30,
            2_587_966,
        )
        assert parsed.might_contain(keys).all(), path.name
        assert parsed.serialize() == text

        rebuilt = BloomFilter.create(type_code=code)
        rebuilt.add_keys(keys)
        assert rebuilt.serialize() == text, f"{path.name}: rebuilt filter differs"

        member_set = set(members)
        probes = [key for key in random_keys(rng, 3000) if key not in member_set]
        assert parsed.might_contain(probes).sum() <= 1
        positions = hash_positions(probes, parsed.num_hashes, parsed.vector_size)
        assert np.array_equal(parsed.might_contain_positions(positions), parsed.might_contain(probes))


def test_default_geometry_matches_hudi() -> None:
    empty = BloomFilter.create()
    assert (empty.num_hashes, empty.vector_size, empty.num_rows) == (30, 2_587_966, 1)
    assert len(empty.serialize()) == 431_380
    assert not empty.might_contain(["anything"]).any()


def test_vectorised_hash_matches_scalar_reference(monkeypatch) -> None:
    monkeypatch.setattr(bf_module, "_CHUNK", 97)  # force many chunk boundaries
    keys = random_keys(random.Random(7), 600)
    got = hash_positions(keys, 5, 1_000_003)
    assert got.shape == (600, 5)
    expected = [positions_reference(key, 5, 1_000_003) for key in keys]
    assert got.tolist() == expected


def test_input_kinds_give_identical_positions() -> None:
    keys = random_keys(random.Random(3), 500)
    reference = hash_positions(keys, 30, 2_587_966)
    variants = [
        pa.array(keys),
        pa.array(keys, pa.large_string()),
        pa.chunked_array([keys[:123], keys[123:124], keys[124:]]),
        pa.array(["junk"] + keys)[1:],  # non-zero array offset
        tuple(keys),
    ]
    for variant in variants:
        assert np.array_equal(hash_positions(variant, 30, 2_587_966), reference)


def test_dynamic_growth_round_trip() -> None:
    keys = [f"key-{i:07d}" for i in range(130_000)]
    grown = BloomFilter.create()
    grown.add_keys(keys[:1000])
    grown.add_keys(pa.array(keys[1000:]))
    assert grown.num_rows == 2  # 2 * 60000 >= 100000: no third row, then round-robin
    text = grown.serialize()
    raw = base64.b64decode(text)
    assert struct.unpack(">iibiiii", raw[:25]) == (
        -1,
        30,
        1,
        2_587_966,
        60_000,
        70_000,
        2,
    )
    parsed = BloomFilter.deserialize(text)
    assert parsed.num_rows == 2 and parsed.serialize() == text
    assert parsed.might_contain(keys).all()
    others = [f"other-{i}" for i in range(5000)]
    assert parsed.might_contain(others).sum() <= 5


def test_row_assignment_and_round_robin_bytes() -> None:
    """Each row must equal a one-row filter of exactly the keys Java routes to it."""
    keys = [f"k{i}" for i in range(40)]
    dynamic = BloomFilter.create(num_entries=10, fpp=0.01, max_entries=25)
    for start, stop in [(0, 3), (3, 10), (10, 31), (31, 40)]:  # state kept across calls
        dynamic.add_keys(keys[start:stop])
    # Rows 0-2 take 10 keys each; then key 30 goes to row 0 and the cursor starts at
    # row 0 again, so keys 31.. go to rows 0, 1, 2, 0, ...
    routed = [keys[:10] + [keys[30]], keys[10:20], keys[20:30]]
    for offset, key in enumerate(keys[31:]):
        routed[offset % 3].append(key)
    raw = base64.b64decode(dynamic.serialize())
    header = struct.unpack(">iibiiii", raw[:25])
    assert header[4:] == (10, 20, 3)
    rows = []
    for row_keys in routed:
        simple = BloomFilter.create(num_entries=10, fpp=0.01, type_code="SIMPLE")
        simple.add_keys(row_keys)
        rows.append(base64.b64decode(simple.serialize()))
    assert raw[25:] == b"".join(rows)


def test_simple_round_trip() -> None:
    keys = random_keys(random.Random(11), 2000)
    simple = BloomFilter.create(num_entries=2000, fpp=1e-6, type_code="simple")
    assert simple.type_code == "SIMPLE"
    simple.add_keys(keys)
    text = simple.serialize()
    assert len(base64.b64decode(text)) == 13 + (simple.vector_size + 7) // 8
    parsed = BloomFilter.deserialize(text, "SIMPLE")
    assert parsed.serialize() == text and parsed.num_rows == 1
    assert parsed.might_contain(keys).all()
    assert parsed.might_contain([f"x{i}" for i in range(3000)]).sum() <= 3


def test_non_ascii_keys_round_trip() -> None:
    keys = ["é", "中文", "😀", "ñandú-€", "Zoë:42", "\x7f\x80", "ß" * 7, "日本語のキー"]
    keys += random_keys(random.Random(5), 1000)
    bloom = BloomFilter.create()
    bloom.add_keys(keys)
    parsed = BloomFilter.deserialize(bloom.serialize())
    assert parsed.might_contain(keys).all()
    near_misses = [key + suffix for key in keys[:8] for suffix in ("é", "中", "x")]
    assert not parsed.might_contain(near_misses).any()


def serialize_reference(batches: list[list[str]], k: int, size: int, nr: int, max_entries: int, type_code: str) -> str:
    """Footer text of a filter fed `batches` in order, one key at a time, written from the
    Hadoop/Hudi format notes (per-key row choice of Hudi's bounded dynamic filter, bytes of
    Hadoop's `Filter.write`/`BloomFilter.write`), independent of the module under test."""
    rows = [bytearray((size + 7) // 8)]
    current, cursor, reached_max = 0, 0, False
    for key in (key for batch in batches for key in batch):
        if type_code == "SIMPLE":
            row = rows[0]
        elif reached_max:
            row, cursor = rows[cursor % len(rows)], cursor + 1
        elif current >= nr and len(rows) * nr < max_entries:
            rows.append(bytearray((size + 7) // 8))
            row, current = rows[-1], 0
        elif current >= nr:
            row, reached_max = rows[0], True
        else:
            row = rows[-1]
        for position in positions_reference(key, k, size):
            row[position >> 3] |= 1 << (position & 7)
        current += 1
    header = struct.pack(">iibi", -1, k, 1, size)
    if type_code == "SIMPLE":
        return base64.b64encode(header + bytes(rows[0])).decode()
    current = (current + 2**31) % 2**32 - 2**31
    body = b"".join(header + bytes(row) for row in rows)
    return base64.b64encode(header + struct.pack(">iii", nr, current, len(rows)) + body).decode()


def benchmark_like_keys(rng: random.Random, count: int) -> list[str]:
    """Decimal ids of 1 to 7 digits in shuffled order, as the bulk_insert benchmark writes."""
    return [str(rng.randrange(10 ** rng.randint(1, 7))) for _ in range(count)]


REFERENCE_CASES = {
    # name: (key batches, num_entries, fpp, max_entries, type code)
    "default geometry, numeric ids": (
        [benchmark_like_keys(random.Random(21), 1500)],
        60_000,
        1e-9,
        100_000,
        "DYNAMIC_V0",
    ),
    "rows grow then take turns": (
        [benchmark_like_keys(random.Random(22), 700), random_keys(random.Random(23), 900)],
        400,
        1e-4,
        1000,
        "DYNAMIC_V0",
    ),
    "mixed lengths and non-ASCII, many batches": (
        [random_keys(random.Random(24), n) for n in (1, 2, 150, 7, 600)],
        250,
        1e-3,
        600,
        "DYNAMIC_V0",
    ),
    "one key length (uuids)": (
        [[str(uuid.UUID(int=random.Random(25).getrandbits(128) + i)) for i in range(800)]],
        300,
        1e-5,
        700,
        "DYNAMIC_V0",
    ),
    "simple": ([random_keys(random.Random(26), 1200)], 1000, 1e-6, 0, "SIMPLE"),
}


@pytest.mark.parametrize("case", sorted(REFERENCE_CASES))
@pytest.mark.parametrize("chunk", [97, 1 << 17])
def test_serialized_bytes_match_scalar_reference(case: str, chunk: int, monkeypatch) -> None:
    """The footer bytes Hudi readers parse stay identical, key set by key set, to a scalar
    reference of the format, whatever batching the vectorised code uses."""
    monkeypatch.setattr(bf_module, "_CHUNK", chunk)
    batches, num_entries, fpp, max_entries, code = REFERENCE_CASES[case]
    bloom = BloomFilter.create(num_entries, fpp, max(max_entries, 1), code)
    for batch in batches:
        bloom.add_keys(pa.array(batch) if len(batch) % 2 else batch)
    expected = serialize_reference(batches, bloom.num_hashes, bloom.vector_size, num_entries, max_entries, code)
    assert bloom.serialize() == expected
    assert BloomFilter.deserialize(expected, code).serialize() == expected


def _hadoop_jar() -> Path | None:
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(spec.submodule_search_locations[0], "jars")
    found = sorted(jars.glob("hadoop-client-api-*.jar"))
    return found[0] if found else None


ORACLE = """
import java.io.*; import java.util.Base64;
import org.apache.hadoop.util.bloom.*; import org.apache.hadoop.util.hash.Hash;
public class Oracle {
  public static void main(String[] a) throws Exception {
    int size = Integer.parseInt(a[0]), k = Integer.parseInt(a[1]), nr = Integer.parseInt(a[2]);
    Filter[] filters = {new BloomFilter(size, k, Hash.MURMUR_HASH),
                        new DynamicBloomFilter(size, k, Hash.MURMUR_HASH, nr)};
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    for (String line; (line = in.readLine()) != null; )
      for (Filter f : filters) f.add(new Key(Base64.getDecoder().decode(line)));
    for (Filter f : filters) {
      ByteArrayOutputStream out = new ByteArrayOutputStream();
      f.write(new DataOutputStream(out));
      System.out.println(Base64.getEncoder().encodeToString(out.toByteArray()));
    }
  }
}
"""


@pytest.mark.skipif(
    shutil.which("java") is None or _hadoop_jar() is None,
    reason="needs java and pyspark's hadoop-client-api jar",
)
def test_bytes_match_hadoop_classes(tmp_path: Path) -> None:
    """Hudi's SIMPLE filter is Hadoop's BloomFilter; below the bound, DYNAMIC_V0 grows
    exactly like Hadoop's DynamicBloomFilter. Hadoop itself serializes both here."""
    keys = random_keys(random.Random(13), 2500)  # non-ASCII tails exercise sign extension
    simple = BloomFilter.create(num_entries=1000, fpp=0.03, type_code="SIMPLE")
    dynamic = BloomFilter.create(num_entries=1000, fpp=0.03, max_entries=10**9)
    simple.add_keys(keys)
    dynamic.add_keys(keys)
    assert dynamic.num_rows == 3
    source = tmp_path / "Oracle.java"
    source.write_text(ORACLE)
    geometry = [str(simple.vector_size), str(simple.num_hashes), "1000"]
    run = subprocess.run(
        ["java", "-cp", str(_hadoop_jar()), str(source), *geometry],
        input="".join(base64.b64encode(key.encode()).decode() + "\n" for key in keys),
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    simple_text, dynamic_text = run.stdout.split()
    assert simple.serialize() == simple_text
    assert dynamic.serialize() == dynamic_text


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("AAAA", "DYNAMIC_V1", "unknown bloom filter type code"),
        ("not base64!!", "DYNAMIC_V0", "not valid base64"),
        ("AAAAAA", "DYNAMIC_V0", "not valid base64"),  # bad padding
        ("", "DYNAMIC_V0", "truncated"),
    ],
)
def test_bad_input_raises_corrupt_table_error(text: str, code: str, message: str) -> None:
    with pytest.raises(CorruptTableError, match=message):
        BloomFilter.deserialize(text, code)


def test_structural_corruption_is_detected() -> None:
    bloom = BloomFilter.create(num_entries=100, fpp=0.01)
    bloom.add_keys(["a", "b"])
    raw = base64.b64decode(bloom.serialize())

    def parse(data: bytes, code: str = "DYNAMIC_V0") -> BloomFilter:
        return BloomFilter.deserialize(base64.b64encode(data).decode(), code)

    cases = {
        "truncated": raw[:-5],
        "truncated while reading the dynamic": raw[:20],
        "version -2": struct.pack(">i", -2) + raw[4:],
        "unversioned": struct.pack(">i", 5) + raw[4:],
        "hash=0": raw[:8] + b"\x00" + raw[9:],
        "stray bytes": raw + b"\x00",
        "rows disagree": raw[:29] + struct.pack(">i", 5) + raw[33:],
    }
    for message, data in cases.items():
        with pytest.raises(CorruptTableError, match=message):
            parse(data)
    with pytest.raises(CorruptTableError, match="stray bytes"):
        parse(raw, "SIMPLE")  # a dynamic filter is not one SIMPLE row
    with pytest.raises(CorruptTableError, match="unknown bloom filter type code"):
        BloomFilter.create(type_code="BLOCKED")


def test_bad_keys_are_rejected() -> None:
    bloom = BloomFilter.create(num_entries=10)
    with pytest.raises(InvalidRecordError, match="null"):
        bloom.add_keys(pa.array(["a", None]))
    with pytest.raises(InvalidRecordError, match="empty"):
        bloom.might_contain(["a", ""])
    with pytest.raises(TypeError):
        bloom.add_keys("abc")
    with pytest.raises(TypeError):
        bloom.add_keys(pa.array([1, 2]))
    with pytest.raises(ValueError, match="positions"):
        bloom.might_contain_positions(np.zeros((3, bloom.num_hashes + 1), np.int32))
