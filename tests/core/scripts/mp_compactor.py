"""A compactor process of the multi-process writer test: plans and runs compactions while writers write.

Usage: python mp_compactor.py <table uri> <json: {"options", "storage_options"}> <compactions>

It opens the table, prints `READY` and waits for a line on stdin (as `mp_writer.py`, so that
it starts with the writers), then plans a compaction (forced: every slice with logs of
completed delta commits) and runs it, pausing briefly in between, until `compactions` ran
(or a minute passed). On table versions 8+ a plan is written beside writes in flight. It
prints one JSON line per compaction or error:
`{"instant": <compaction time or null>, "error": <class name or null>, "message": ...}`.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

from lakeward.core.exceptions import LakewardError
from lakeward.core.table import Table


def main() -> int:
    uri, setup, wanted = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    table = Table.open(uri, options=setup["options"], storage_options=setup["storage_options"])
    sys.stdout.write("READY\n")
    sys.stdout.flush()
    sys.stdin.readline()
    done, deadline = 0, time.monotonic() + 60
    while done < wanted and time.monotonic() < deadline:
        out: dict[str, object] = {"instant": None, "error": None, "message": None}
        try:
            instant = table.schedule_compaction(force=True)
            if instant is not None:
                table.run_compaction(instant)
            out["instant"] = instant
            done += instant is not None
        except LakewardError as exc:
            out["error"] = type(exc).__name__
            out["message"] = str(exc)
            out["trace"] = traceback.format_exc()
        if out["instant"] or out["error"]:
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
