"""Record-index lookups read only the base HFile blocks their keys fall in (issue 17 performance):
a batch of nearby keys parses the blocks holding them, a batch spread over the file parses it
whole, and both answer as a lookup over the whole file does."""

from __future__ import annotations

import pyarrow as pa

from lakeward import Table
from lakeward.core.metadata_table import record_index
from lakeward.core.metadata_table.record_index import RecordIndex, blocks_holding

ROWS = 60_000  # one file group of about 4 one-MiB HFile blocks


def test_blocks_holding_picks_the_blocks_whose_key_range_holds_each_key() -> None:
    firsts = [b"b", b"d", b"f"]
    assert blocks_holding(firsts, pa.array(["c", "b"])) == [0]
    assert blocks_holding(firsts, pa.array(["a", "e", "zz", "d"])) == [1, 2]
    assert blocks_holding(firsts, pa.array(["a"])) == []
    assert blocks_holding([], pa.array(["a"])) == []


def _parsed_base_blocks() -> list[int]:
    """Block offsets of base HFiles in the lookup cache (-1: a whole file)."""
    return sorted(key[3] for key in record_index._cells_cache if key[1].endswith(".hfile"))


def test_record_index_lookup_of_nearby_keys_parses_only_their_blocks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "t")
    table = Table.create(path, record_key="id", partition_by="part", ordering_field="ts", table_version=9)
    ids = [f"key-{i:08d}" for i in range(ROWS)]
    table.bulk_insert(pa.table({"id": ids, "part": [f"p{i % 3}" for i in range(ROWS)], "ts": [1] * ROWS}))
    options = {"hoodie.metadata.record.index.enable": "true", "hoodie.metadata.record.index.min.filegroup.count": "1"}
    Table.open(path, options=options).initialize_metadata_table()
    files = table.read(columns=["id", "part", "_hoodie_file_name"])
    expected = {k: (p, n.split("_")[0]) for k, p, n in zip(*(files.column(c).to_pylist() for c in files.column_names))}

    nearby = pa.array([*ids[100:110], "key-00000105x"])  # a new key inside their block
    spread = pa.array(ids[::7])
    answers = {}
    for keys in (nearby, spread):
        record_index.clear_cache()
        partitions, file_ids = RecordIndex(table.storage).locate(keys)
        answers[len(keys)] = _parsed_base_blocks()
        got = dict(zip(keys.to_pylist(), zip(partitions.to_pylist(), file_ids.to_pylist())))
        assert got == {k: expected.get(k, (None, None)) for k in keys.to_pylist()}
    assert len(answers[len(nearby)]) == 1 and answers[len(nearby)][0] >= 0
    assert answers[len(spread)] == [-1]
    # a later lookup of nearby keys answers from the whole file's cells
    partitions, _ = RecordIndex(table.storage).locate(nearby)
    assert partitions.to_pylist()[:10] == [expected[k][0] for k in ids[100:110]]
    assert _parsed_base_blocks() == [-1]
