#!/usr/bin/env bash
# Install everything the test suite needs (Debian zookeeper, Python test extras) and run it all.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  echo "installing Debian package zookeeper (real ZooKeeper for the tests)"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq || true
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq zookeeper >/dev/null
fi
python3 -m pip install -q -e '.[test]'
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m mypy core services lakeward
set +e
python3 -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
