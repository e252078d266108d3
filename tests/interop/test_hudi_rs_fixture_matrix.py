"""One test matrix over every fixture table of every table version (6, 8, 9): lakeward's
`Table` reads the same rows as hudi-rs.

Per fixture: the latest snapshot, read-optimized (merge-on-read), time travel to every
completed write, and incremental ranges between consecutive completed writes (plus the
edges, see `compare.incremental_ranges`). On table versions 8+ an incremental range is in
completion time (a write belongs to the range in which it completed), as in Hudi 1.x.
"""

from __future__ import annotations

from collections.abc import Callable

import hudi
import pytest

from lakeward import Table
from tests.interop.compare import (
    _diff,
    fail_on,
    hudi_table,
    incremental_mismatches,
    incremental_ranges,
    snapshot_mismatches,
    write_instants,
)
from tests.support.fixture_tables import all_fixtures

READ_OPTIMIZED = "hoodie.read.use.read_optimized.mode"
FIXTURES = all_fixtures()


def test_the_matrix_covers_all_versions():
    versions = {name.split("_", 1)[0] for _, name in FIXTURES}
    assert {"v6", "v8", "v9"} <= versions, FIXTURES
    assert len(FIXTURES) >= 23


def _read_optimized_mismatches(path: str, instants: list[str]) -> list[str]:
    ours, theirs = Table.open(path), hudi_table(path)
    out = []
    for as_of in [None, *instants]:
        options = hudi.HudiReadOptions().with_hudi_option(READ_OPTIMIZED, "true")
        if as_of is not None:
            options = options.with_as_of_timestamp(as_of)
        problem = _diff(
            f"read-optimized as of {as_of or 'latest'}",
            ours.read(as_of=as_of, read_optimized=True),
            theirs.read(options),
        )
        if problem:
            out.append(problem)
    return out


@pytest.mark.parametrize(("kind", "name"), FIXTURES)
def test_fixture_reads_match_hudi_rs(fixture_table: Callable[[str, str], str], kind: str, name: str):
    path = fixture_table(kind, name)
    table = Table.open(path)
    instants = write_instants(table)
    problems = snapshot_mismatches(path, [None, *instants])
    if kind.startswith("mor"):
        problems += _read_optimized_mismatches(path, instants)
    if table.config.populate_meta_fields:
        problems += incremental_mismatches(path, incremental_ranges(instants))
    else:
        # hudi-rs returns every row for any range when the writer left `_hoodie_commit_time`
        # empty (it cannot filter); lakeward returns the rows of writes in the range.
        assert table.read_incremental("0", None).num_rows == table.read().num_rows
    fail_on(problems)
