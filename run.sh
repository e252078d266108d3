#!/usr/bin/env bash
# Install lakeward and run the main job. Until the daemon lands, this is the demo:
# create a table, upsert into it, print snapshot, time-travel and incremental reads.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -q -e .
exec lakeward demo "$@"
