"""A run's child starts with lakeward and pandas already imported by the fork server (pandas
used to cost every child 0.4 s of CPU, pyarrow importing it on its first conversion), and
the fork server never imports polars, whose threads would make a forked child hang."""

from __future__ import annotations

from lakeward.services.supervisor import CONTEXT
from tests.support.forkserver_probe import probe


def test_a_runs_child_finds_lakeward_and_pandas_imported_and_polars_works_in_it() -> None:
    parent_end, child_end = CONTEXT.Pipe(duplex=False)
    child = CONTEXT.Process(target=probe, args=(child_end,))
    child.start()
    child_end.close()
    try:
        assert parent_end.poll(60), "the child did not answer within 60 s"
        imported, server_threads, total = parent_end.recv()
    finally:
        child.join(10)
    assert imported == {"lakeward.services.worker": True, "pandas": True, "polars": False}
    assert not [name for name in server_threads if name.startswith("polars")], server_threads
    assert total == 6
    assert child.exitcode == 0
