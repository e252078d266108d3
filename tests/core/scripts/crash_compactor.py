"""Run one planned compaction and freeze at a chosen point of its execution, for a SIGKILL test.

Usage: python crash_compactor.py <table path> <point> <compaction instant>

The hooks are installed in this (child) process only, by wrapping module attributes of
lakeward from the outside. When the compactor reaches `<point>` the script prints
`REACHED <point>` on stdout and sleeps until the parent test kills it with SIGKILL. If the
compaction finishes without reaching the point, it prints `FINISHED` and exits with
status 3. The point `none` installs no hook: the compaction runs to completion, prints
`FINISHED` and exits with status 0 (a compactor in another process).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from freeze_points import after, before  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.compaction.execute as execute_mod
import lakeward.core.table_services.service as service_mod  # the plan-execution template: claim, complete
from lakeward.core.table import Table

HOOKS: dict[str, Callable[[str], None]] = {
    # `.compaction.inflight` exists, no base file of the compaction yet
    "after_inflight": lambda p: setattr(
        service_mod, "transition_to_inflight", after(p, service_mod.transition_to_inflight)
    ),
    # the first planned slice's new base file is written, the other slices' are not
    "after_first_base_file": lambda p: setattr(execute_mod, "write_base_file", after(p, execute_mod.write_base_file)),
    # one base file written, the second slice has its marker but no file yet
    "marker_without_file": lambda p: setattr(execute_mod, "create_marker", after(p, execute_mod.create_marker, 2)),
    # every base file written (and markers reconciled), right before `<t>.commit` is published
    "before_complete": lambda p: setattr(service_mod, "complete", before(p, service_mod.complete)),
}


def main() -> int:
    path, point, instant = sys.argv[1:4]
    if point != "none":
        HOOKS[point](point)
    # One task at a time: the order of the slices' base files (and so the hook's n-th call) is fixed.
    table = Table.open(path, options={"hoodie.upsert.shuffle.parallelism": 1})
    table.run_compaction(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 0 if point == "none" else 3


if __name__ == "__main__":
    sys.exit(main())
