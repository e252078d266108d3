# shellcheck shell=bash
# Set-up shared by ./run.sh and ./test.sh (sourced from the checkout's root; not run on its own).
#
# - Python: uses the active virtualenv ($VIRTUAL_ENV) if there is one, else `.venv` in the checkout,
#   creating it with `${PYTHON:-python3} -m venv` when missing. Nothing is installed into the system
#   Python, so this works with Debian's externally-managed python3 (PEP 668).
#   LAKEWARD_VENV_OPTIONS adds options to `python3 -m venv` (e.g. --system-site-packages).
# - Java: Spark and ZooKeeper need Java 17 or newer; says how to install it when missing.
# - Installs lakeward (editable) with the given extras; skipped when pyproject.toml has not changed
#   since the last install into that environment.
# After `lakeward_setup EXTRAS`, $LAKEWARD_PY is the environment's python and $LAKEWARD_BIN its bin dir.

lakeward_say() {
  printf '[lakeward] %s\n' "$*"
}

lakeward_fail() {
  printf '[lakeward] error: %s\n' "$*" >&2
  return 1
}

lakeward_check_java() {
  local java="java" line version major
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    java="$JAVA_HOME/bin/java"
  fi
  if ! command -v "$java" >/dev/null 2>&1; then
    lakeward_fail "Java 17 or newer is needed (Spark and ZooKeeper run on the JVM) and no 'java' was found.
  Install it with:  sudo apt-get install -y openjdk-17-jre-headless"
    return 1
  fi
  line=$("$java" -version 2>&1 | head -n 1)
  version=$(printf '%s' "$line" | sed -E 's/^[^"]*"([^"]+)".*$/\1/')
  major=${version%%.*}
  if [ "$major" = "1" ]; then # 1.8.0_x style
    major=$(printf '%s' "$version" | cut -d. -f2)
  fi
  case "$major" in
    '' | *[!0-9]*)
      lakeward_fail "could not read the Java version from: $line"
      return 1
      ;;
  esac
  if [ "$major" -lt 17 ]; then
    lakeward_fail "Java $version found ($java); Spark 4 needs Java 17 or newer.
  Install it with:  sudo apt-get install -y openjdk-17-jre-headless  (and put it first on PATH or set JAVA_HOME)"
    return 1
  fi
  lakeward_say "Java $version ($(command -v "$java"))"
}

lakeward_python_env() {
  if [ -n "${VIRTUAL_ENV:-}" ] && [ -x "$VIRTUAL_ENV/bin/python" ]; then
    LAKEWARD_PY="$VIRTUAL_ENV/bin/python"
    lakeward_say "using the active virtualenv $VIRTUAL_ENV"
  else
    if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import sys' >/dev/null 2>&1; then
      lakeward_say "the virtualenv .venv is broken (its Python moved?): recreating it"
      rm -rf .venv
    fi
    if [ ! -x .venv/bin/python ]; then
      local base="${PYTHON:-python3}"
      if ! command -v "$base" >/dev/null 2>&1; then
        lakeward_fail "no '$base' found: install Python 3.11 or newer (sudo apt-get install -y python3 python3-venv)"
        return 1
      fi
      if ! "$base" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
        lakeward_fail "$("$base" --version 2>&1) is too old: lakeward needs Python 3.11 or newer (set PYTHON=/path/to/python3.11)"
        return 1
      fi
      if ! "$base" -c 'import ensurepip, venv' >/dev/null 2>&1; then
        lakeward_fail "$base cannot create virtualenvs (Debian splits that out).
  Install it with:  sudo apt-get install -y python3-venv"
        return 1
      fi
      # shellcheck disable=SC2086 # LAKEWARD_VENV_OPTIONS is a list of options
      lakeward_say "creating a virtualenv in $PWD/.venv with $(command -v "$base") ($("$base" --version 2>&1))${LAKEWARD_VENV_OPTIONS:+ $LAKEWARD_VENV_OPTIONS}"
      # shellcheck disable=SC2086
      "$base" -m venv ${LAKEWARD_VENV_OPTIONS:-} .venv
    else
      lakeward_say "using the virtualenv $PWD/.venv"
    fi
    LAKEWARD_PY="$PWD/.venv/bin/python"
  fi
  LAKEWARD_BIN=$(dirname "$LAKEWARD_PY")
  export LAKEWARD_PY LAKEWARD_BIN
}

lakeward_install() {
  local extras="$1" prefix stamp want
  prefix=$("$LAKEWARD_PY" -c 'import sys; print(sys.prefix)')
  stamp="$prefix/.lakeward-installed-$extras"
  want="$PWD $(sha256sum pyproject.toml | cut -d' ' -f1)"
  local have
  for have in "$stamp" "$prefix/.lakeward-installed-test"; do # the test extras include spark
    if [ -f "$have" ] && [ "$(cat "$have")" = "$want" ] \
      && "$LAKEWARD_PY" -c 'import lakeward.services.cli' >/dev/null 2>&1; then
      lakeward_say "lakeward[$extras] is installed in $prefix (pyproject.toml unchanged since; delete $have to reinstall)"
      return 0
    fi
  done
  lakeward_say "installing lakeward[$extras] into $prefix: pip install -e '.[$extras]'" \
    "(the first time this downloads PySpark and takes a few minutes)"
  local started=$SECONDS
  "$LAKEWARD_PY" -m pip install -q --disable-pip-version-check -e ".[$extras]"
  printf '%s\n' "$want" >"$stamp"
  lakeward_say "installed in $((SECONDS - started)) s"
}

# lakeward_setup EXTRAS: everything above, in order.
lakeward_setup() {
  lakeward_check_java
  lakeward_python_env
  lakeward_install "$1"
}
