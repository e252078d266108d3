"""Run a planned clean, a restore or a savepoint and freeze at a chosen point, for a SIGKILL test.

Usage: python crash_cleaner.py <table path> <point> <clean instant | savepoint instant>

Points `clean_*` run `Table.run_clean(<instant>)`, points `restore_*` run
`Table.restore(<savepoint>)`, points `savepoint_*` run `Table.savepoint(<instant>)`. When
the run reaches `<point>` the script prints `REACHED <point>` and sleeps until the parent
test kills it with SIGKILL.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from freeze_points import after, before  # a sibling module: scripts run with this folder on sys.path

import lakeward.core.table_services.clean.execute as clean_mod
import lakeward.core.table_services.savepoint as savepoint_mod
import lakeward.core.table_services.service as service_mod  # the plan-execution template: claim, complete
from lakeward.core.table import Table

HOOKS: dict[str, Callable[[str], None]] = {
    # `<t>.clean.inflight` written, nothing deleted yet
    "clean_after_inflight": lambda p: setattr(
        service_mod, "transition_to_inflight", after(p, service_mod.transition_to_inflight)
    ),
    # some planned files deleted, others not
    "clean_after_some_deletes": lambda p: setattr(clean_mod, "delete_file", after(p, clean_mod.delete_file, 3)),
    # every file deleted, `<t>.clean` not published
    "clean_before_complete": lambda p: setattr(service_mod, "complete", before(p, service_mod.complete)),
    # `<r>.restore.inflight` written, nothing rolled back yet
    "restore_after_inflight": lambda p: setattr(
        savepoint_mod, "transition_to_inflight", after(p, savepoint_mod.transition_to_inflight)
    ),
    # the newest instant after the savepoint rolled back, the others not
    "restore_after_first_rollback": lambda p: setattr(savepoint_mod, "_roll_back", after(p, savepoint_mod._roll_back)),
    # `<t>.savepoint.inflight` written, the completed savepoint not published
    "savepoint_before_complete": lambda p: setattr(savepoint_mod, "complete", before(p, savepoint_mod.complete)),
    # everything rolled back, `<r>.restore` not published
    "restore_before_complete": lambda p: setattr(savepoint_mod, "complete", before(p, savepoint_mod.complete)),
}


def main() -> int:
    path, point, instant = sys.argv[1:4]
    HOOKS[point](point)
    table = Table.open(path)
    if point.startswith("clean_"):
        table.run_clean(instant)
    elif point.startswith("savepoint_"):
        table.savepoint(instant)
    else:
        table.restore(instant)
    sys.stdout.write("FINISHED\n")
    sys.stdout.flush()
    return 3


if __name__ == "__main__":
    sys.exit(main())
