"""`hfile_cells.cell_columns`: every cell of an HFile located in one buffer, exactly the reader's cells.

The cells are found by a walk in lanes (one numpy step per cell for every lane at once), started
at every block and at guessed cell starts inside blocks; the tests hold it to the record-by-record
reader on Hudi's files, on files whose cell sizes change from cell to cell, and on values made to
mislead the guesses (a key tail and a plausible cell head inside a value).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from lakeward.core.file_group import hfile_cells
from lakeward.core.file_group.hfile import KEY_SUFFIX, KEY_TAIL, HFileReader
from lakeward.core.file_group.hfile_cells import cell_columns
from lakeward.core.file_group.hfile_writer import HFileWriter
from lakeward.core.file_group.log_file.log_block import BlockType
from lakeward.core.file_group.log_file.log_format import RawBlock, scan_blocks
from tests.support.fixture_tables import all_fixtures

META_FIXTURES = [(kind, name) for kind, name in all_fixtures() if name.startswith("v9") and "meta" in name]


def _cells_of(reader: HFileReader) -> list[tuple[bytes, bytes]]:
    columns = cell_columns(reader)
    data = columns.data.tobytes()
    rows = columns.rows().to_pylist()
    values = [
        data[s : s + n] for s, n in zip(columns.value_starts.tolist(), columns.value_lengths.tolist(), strict=True)
    ]
    return list(zip(rows, values, strict=True))


def _walked(reader: HFileReader) -> np.ndarray | None:
    """The lane walk's cell starts over `reader`'s blocks (None: it gave up), and the scalar walk's check."""
    data, bounds = hfile_cells.joined_blocks(reader)
    found = hfile_cells._walk_single_byte_memstore(data, np.frombuffer(data, np.uint8), bounds)
    if found is not None:
        assert found.tolist() == hfile_cells._walk(data, bounds, reader.name)
    return found


@pytest.mark.parametrize(("kind", "name"), META_FIXTURES)
def test_the_cells_of_hudis_metadata_hfiles_are_the_readers(
    fixture_table: Callable[[str, str], str], kind: str, name: str
):
    mdt = Path(fixture_table(kind, name)) / ".hoodie" / "metadata"
    readers = [HFileReader(p.read_bytes(), str(p)) for p in sorted(mdt.glob("*/*.hfile"))]
    for log_path in sorted(mdt.glob("*/.*.log.*")):
        for block in scan_blocks(log_path.read_bytes()):
            if isinstance(block, RawBlock) and block.block_type is BlockType.HFILE_DATA:
                readers.append(HFileReader(block.content, log_path.name))
    assert readers
    for reader in readers:
        assert _cells_of(reader) == list(reader.items()), reader.name
        assert _walked(reader) is not None, reader.name


def _file(cells: list[tuple[bytes, bytes]], block_size: int = 4096) -> HFileReader:
    writer = HFileWriter(block_size=block_size, create_time_ms=0)
    writer.extend(cells)
    return HFileReader(writer.finish())


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cells_of_changing_sizes_over_many_blocks_are_the_readers(seed: int):
    """Keys and values whose lengths change from cell to cell (runs, alternations, one-offs), keys
    longer than the lane guess searches back over, empty values, small blocks: the lanes cover the
    file and give the reader's cells."""
    rng = random.Random(seed)
    keys: set[bytes] = set()
    while len(keys) < 3000:
        length = rng.choice([1, 8, 14, 14, 14, 15, 40, 300])
        keys.add(bytes(rng.randrange(32, 127) for _ in range(length)))
    cells = [(k, bytes(rng.randrange(256) for _ in range(rng.choice([0, 30, 31, 31, 90])))) for k in sorted(keys)]
    for block_size in (1024, 65536):
        reader = _file(cells, block_size)
        assert _cells_of(reader) == cells
        assert _walked(reader) is not None


def test_values_that_mislead_the_lane_guesses_still_give_the_readers_cells():
    """Values holding a key tail right after a plausible cell head (row length, key length): the
    guessed lane starts inside them are wrong, the walk notices (the lane before does not land on
    them) and the cells are still exactly the reader's."""
    fake_row = b"fake-row"
    fake_head = struct.pack(">iih", len(fake_row) + 2 + KEY_SUFFIX, 3, len(fake_row)) + fake_row + KEY_TAIL
    cells = [(f"key-{i:06d}".encode(), b"v" * (i % 7) + fake_head + b"w" * (i % 5)) for i in range(4000)]
    reader = _file(cells, 65536)
    assert _cells_of(reader) == cells
    assert _walked(reader) is None  # the guesses were wrong: the scalar walk found the cells
