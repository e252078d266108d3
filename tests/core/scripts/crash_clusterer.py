"""Run one planned clustering and freeze at a chosen point of its execution, for a SIGKILL test.

Usage: python crash_clusterer.py <table path> <point> <clustering instant>

Hooks wrap module attributes of lakeward in this (child) process only. At `<point>` the
script prints `REACHED <point>` and sleeps until the parent test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from freeze_points import after, before  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.clustering.execute as execute_mod
import lakeward.core.table_services.service as service_mod  # the plan-execution template: claim, complete
from lakeward.core.table import Table

HOOKS: dict[str, Callable[[str], None]] = {
    # `.replacecommit.inflight` exists, no file of the clustering yet
    "after_inflight": lambda p: setattr(
        service_mod, "transition_to_inflight", after(p, service_mod.transition_to_inflight)
    ),
    # the first group's new base file is written, the other group's is not
    "after_first_base_file": lambda p: setattr(execute_mod, "write_base_file", after(p, execute_mod.write_base_file)),
    # one file written, the second has its marker but no file yet
    "marker_without_file": lambda p: setattr(execute_mod, "create_marker", after(p, execute_mod.create_marker, 2)),
    # every file written (markers reconciled), right before `<t>.replacecommit` is published
    "before_complete": lambda p: setattr(service_mod, "complete", before(p, service_mod.complete)),
}


def main() -> int:
    path, point, instant = sys.argv[1:4]
    if point != "none":
        HOOKS[point](point)
    table = Table.open(path, options={"hoodie.upsert.shuffle.parallelism": 1})
    table.run_clustering(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 0 if point == "none" else 3


if __name__ == "__main__":
    sys.exit(main())
