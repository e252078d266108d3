"""A CDC task's keyed base-file read (`SliceReads.base_rows`) against the full read filtered.

The images of KEY_OP and DATA_BEFORE changes are looked up in base-file versions for the
changed keys only; `base_rows` reads a version with its dictionary-encoded string columns
left as Arrow dictionaries until the key filter and decodes only the rows kept. Its rows
must be exactly (values and types) the full read's rows of those keys.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lakeward import Table
from lakeward.core.cdc.extract import SliceReads, _dictionary_encoded_strings
from lakeward.core.merge import RECORD_KEY
from lakeward.core.schema import with_meta
from lakeward.core.table_schema import resolve_table_schema

SCHEMA = pa.schema([("id", pa.string()), ("part", pa.string()), ("name", pa.string()), ("ts", pa.int64())])


def _base_file(tmp_path) -> tuple[Table, str, pa.Schema]:
    t = Table.create(
        str(tmp_path / "t"), record_key="id", partition_by="part", ordering_field="ts",
        options={"hoodie.table.cdc.enabled": "true"},
    )  # fmt: skip
    rows = [{"id": f"k{i:05d}", "part": "x", "name": None if i % 7 == 0 else f"n{i % 5}", "ts": i} for i in range(3000)]
    t.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    (path,) = [
        e.path
        for e in t.storage.list_dir("", recursive=True)
        if e.path.endswith(".parquet") and not e.path.startswith(".hoodie")
    ]
    full_schema = with_meta(resolve_table_schema(t.storage, t.timeline(), t.config))
    return t, path, full_schema


def test_base_rows_equal_the_full_read_filtered(tmp_path):
    t, path, full_schema = _base_file(tmp_path)
    with t.storage.open_input_file(path) as source:
        parquet = pq.ParquetFile(source)
        encoded = _dictionary_encoded_strings(parquet, SliceReads(t.storage, full_schema).columns)
    assert "name" in encoded and RECORD_KEY not in encoded  # the dictionary path is taken
    keys = pa.array(["k00007", "k00100", "k02999", "absent"])
    full = SliceReads(t.storage, full_schema).base(path)
    expected = full.filter(pc.is_in(full.column(RECORD_KEY), value_set=keys))
    got = SliceReads(t.storage, full_schema).base_rows(path, keys)
    assert got.schema.equals(expected.schema)
    assert got.equals(expected)
    assert got.column("name").null_count == 1  # k00007's null name kept
    reads = SliceReads(t.storage, full_schema)
    reads.base(path)  # a file the task holds already is filtered, not read again
    assert reads.base_rows(path, keys).equals(expected)
