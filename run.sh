#!/usr/bin/env bash
# Set up and run the main job: the table-services daemon on the embedded default -- local Spark, two
# demo tables that a demo writer keeps updating, the in-process coordinator -- with its web UI on
# http://127.0.0.1:8080/ui and its API and metrics on http://127.0.0.1:8080. Ctrl-C drains and stops.
#
# Set-up (scripts/setup.sh): checks Java 17, creates and uses the virtualenv .venv in this checkout
# unless one is active, and installs lakeward with PySpark into it.
#   ./run.sh [lakeward serve options]    set up, then run the daemon demo
#   ./run.sh --setup-only                set up only
# The demo tables go to $LAKEWARD_DEMO_DIR, default ./lakeward-demo; a relative path is taken from the
# checkout (this script changes into it first). Stop the daemon and delete that folder to reset the demo.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
lakeward_setup spark
if [ "${1:-}" = "--setup-only" ]; then
  lakeward_say "set-up done (--setup-only)"
  exit 0
fi
demo_dir="${LAKEWARD_DEMO_DIR:-./lakeward-demo}"
case "$demo_dir" in
  /*) ;;
  *) demo_dir="$PWD/${demo_dir#./}" ;;
esac
lakeward_say "demo tables in $demo_dir (reset the demo: stop the daemon, then rm -rf '$demo_dir')"
lakeward_say "web UI: open http://127.0.0.1:8080/ui once it has started (API token for its buttons: demo-token)"
lakeward_say "in another shell: . $LAKEWARD_BIN/activate, then e.g. lakeward tables, lakeward runs"
lakeward_say "starting: lakeward serve --demo $demo_dir $*"
exec "$LAKEWARD_BIN/lakeward" serve --demo "$demo_dir" "$@"
