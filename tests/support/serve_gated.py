"""`lakeward serve` whose runs wait at a file gate, as a real process (tests only).

`python -m tests.support.serve_gated GATE_DIR --config FILE`: the daemon of `lakeward serve`
(signals, drain, API), with its runs' local engine replaced, once started, by a
`FileGatedEngine(GATE_DIR)` -- so a test can hold plans half-way through in their child
processes while it sends requests or SIGTERM. Needs the repository on PYTHONPATH.
"""

from __future__ import annotations

import sys

from lakeward.services.api.server import ApiServer, serve
from lakeward.services.daemon import Daemon
from lakeward.services.settings import load_settings
from tests.support.gated_engine import FileGatedEngine


def main(argv: list[str]) -> int:
    gate, flag, config = argv
    assert flag == "--config", argv

    def started(daemon: Daemon, api: ApiServer) -> None:
        assert daemon.runner is not None
        daemon.runner.engine = FileGatedEngine(gate)

    return serve(load_settings(config), on_started=started)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
