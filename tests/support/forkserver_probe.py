"""Runs in a child of the daemon's fork server (`lakeward.services.supervisor.CONTEXT`): reports
what the child found already imported, the names of its parent's (the fork server's) threads, and
that polars, imported in the child, works there."""

from __future__ import annotations

import os
import sys
from multiprocessing.connection import Connection

PROBED = ("lakeward.services.worker", "pandas", "polars")


def probe(conn: Connection) -> None:
    imported = {name: name in sys.modules for name in PROBED}
    tasks = f"/proc/{os.getppid()}/task"
    server_threads = []
    for task in os.listdir(tasks):
        with open(f"{tasks}/{task}/comm", encoding="utf-8") as comm:
            server_threads.append(comm.read().strip())
    import polars as pl

    total = pl.DataFrame({"a": [1, 2, 3]}).select(pl.col("a").sum()).item()
    conn.send((imported, sorted(server_threads), total))
    conn.close()
