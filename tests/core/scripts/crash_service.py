"""Run one planned table service and freeze at a point of the plan-execution template, for a SIGKILL test.

Usage: python crash_service.py <table path> <point> <service> <instant>

`<service>` is a `table.services` namespace (`change_tracking`, `index_build`, ...): every
planned service runs through the same template (claim -> run -> complete), so its points
are the template's. The script prints `REACHED <point>` and sleeps until the parent test
kills it with SIGKILL; if the service finishes without reaching the point it prints
`FINISHED` and exits with status 3.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from freeze_points import after, before  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.service as service_mod  # the plan-execution template: claim, complete
from lakeward.core.table import Table

HOOKS: dict[str, Callable[[str], None]] = {
    # `<t>.<action>.inflight` exists, nothing of the run written yet
    "after_inflight": lambda p: setattr(
        service_mod, "transition_to_inflight", after(p, service_mod.transition_to_inflight)
    ),
    # everything written, right before the completed instant is published
    "before_complete": lambda p: setattr(service_mod, "complete", before(p, service_mod.complete)),
}


def main() -> int:
    path, point, service, instant = sys.argv[1:5]
    HOOKS[point](point)
    getattr(Table.open(path).services, service).execute(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
