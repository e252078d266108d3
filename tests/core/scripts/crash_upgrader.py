"""Upgrade a table to a table version and freeze at a named point, for the parent to SIGKILL.

Usage: python crash_upgrader.py <table path> <point> <to version>

Points (`lakeward.core.table_services.upgrade`): `prepared` (failed writes rolled back, log files compacted; nothing of
the new layout written), `timeline_copied` (the layout-2 timeline and LSM history written, the table
still at its old version), `metadata_switched` (the metadata table's `hoodie.properties` at the new
version, the data table's not yet), `switched` (`hoodie.properties` at the new version, the version 6
timeline files not removed yet).
"""

from __future__ import annotations

import sys

from freeze_points import after

import lakeward.core.table_services.upgrade as upgrade_mod
from lakeward.core.table import Table

_STEPS = {
    "prepared": "prepare",
    "timeline_copied": "convert_timeline",
    "metadata_switched": "_rewrite_metadata_properties",
    "switched": "switch_version",
}


def main() -> int:
    path, point, to = sys.argv[1], sys.argv[2], int(sys.argv[3])
    name = _STEPS[point]
    setattr(upgrade_mod, name, after(point, getattr(upgrade_mod, name)))
    Table.open(path).upgrade(to=to)
    return 3


if __name__ == "__main__":
    sys.exit(main())
