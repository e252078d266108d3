#!/usr/bin/env bash
# Set up everything the test suite needs and run it all: Java 17 check, the Debian packages zookeeper
# (a real ZooKeeper for the tests) and chromium (the web UI's browser test), the virtualenv .venv in
# this checkout unless one is active, the Python test extras; then ruff, ruff format --check, mypy
# and pytest.
#   ./test.sh [pytest arguments]    e.g. ./test.sh -m "not slow" (the fast loop), ./test.sh tests/core
#   ./test.sh --setup-only          set up only
# CI (.ci/run) runs ./test.sh without arguments: every test, slow ones included.
set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
lakeward_check_java
# Debian packages: zookeeper (a real ZooKeeper for the tests) and chromium (the browser the web UI's
# test drives through Playwright; Playwright's own browser download is never used).
debs=""
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  debs="zookeeper"
else
  lakeward_say "ZooKeeper: /usr/share/java/zookeeper.jar"
fi
if [ ! -x /usr/bin/chromium ]; then
  debs="$debs chromium"
else
  lakeward_say "Chromium: /usr/bin/chromium"
fi
if [ -n "$debs" ]; then
  lakeward_say "installing Debian packages for the tests:$debs"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq || true
  # shellcheck disable=SC2086  # one word per package
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $debs >/dev/null
fi
lakeward_python_env
lakeward_install test
if [ "${1:-}" = "--setup-only" ]; then
  lakeward_say "set-up done (--setup-only)"
  exit 0
fi
PY="$LAKEWARD_PY"
lakeward_say "ruff check"
"$PY" -m ruff check .
lakeward_say "ruff format --check"
"$PY" -m ruff format --check .
lakeward_say "mypy core services lakeward"
"$PY" -m mypy core services lakeward
# Test files run on LAKEWARD_TEST_WORKERS worker processes (default 2, one per core of the CI
# machine; 0 runs them in this process), each file on one worker with its module fixtures. Each
# worker starts its own ZooKeeper, SeaweedFS and SparkSession when its tests need them.
WORKERS="${LAKEWARD_TEST_WORKERS:-2}"
lakeward_say "pytest on $WORKERS workers: $*"
set +e
"$PY" -m pytest -n "$WORKERS" --dist loadfile "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
