#!/usr/bin/env bash
# Install lakeward (with PySpark) and run the main job: the table-services daemon on the embedded
# default -- local Spark, two demo tables under ./lakeward-demo that a demo writer keeps updating,
# the in-process coordinator -- with its API and metrics on http://127.0.0.1:8080. Ctrl-C drains and stops.
set -euo pipefail
cd "$(dirname "$0")"
python3 -m pip install -q -e '.[spark]'
exec lakeward serve --demo "${LAKEWARD_DEMO_DIR:-./lakeward-demo}" "$@"
