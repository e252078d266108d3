"""The set-up part of ./run.sh and ./test.sh, on a copy of the checkout, with a Debian-style
externally-managed Python first on PATH and no virtualenv active.

The "system" Python is a copy of the interpreter running the tests whose stdlib folder holds an
`EXTERNALLY-MANAGED` marker (PEP 668), exactly what Debian's python3 has: `pip install` into it
fails. The scripts must create `.venv` in the checkout and install lakeward there.

The scripts are told to create that `.venv` with `--system-site-packages`
(LAKEWARD_VENV_OPTIONS): the dependencies are then already present (the copy's site-packages is
the test interpreter's, which has the test extras) and pip only builds lakeward itself, so the test
takes seconds instead of downloading and unpacking ~1 GB of wheels. What is tested is the
scripts' logic: which Python they use, that they make a virtualenv, install into it and stop after
set-up. A full install into an empty `.venv` is what CI does on every fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SKIP_COPY = shutil.ignore_patterns(
    ".git", ".venv", "lakeward-demo", "__pycache__", "*.egg-info", ".mypy_cache", ".ruff_cache", "site", "build"
)


def _externally_managed_python(root: Path) -> Path:
    """A Python like Debian's: the test interpreter's files, plus EXTERNALLY-MANAGED in its stdlib folder."""
    base_prefix = Path(sys.base_prefix)
    stdlib = Path(sysconfig.get_paths(vars={"installed_base": str(base_prefix), "base": str(base_prefix)})["stdlib"])
    executable = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    if not (stdlib / "os.py").exists() or not executable.is_relative_to(base_prefix):
        pytest.fail(f"cannot build a Debian-like Python from this interpreter's layout: {executable}, {stdlib}")
    bin_dir = root / "bin"
    lib = root / stdlib.relative_to(base_prefix)
    bin_dir.mkdir(parents=True)
    lib.mkdir(parents=True)
    shutil.copy2(executable, bin_dir / executable.name)  # Python finds its prefix from the binary's place
    (bin_dir / "python3").symlink_to(executable.name)
    for entry in stdlib.iterdir():
        (lib / entry.name).symlink_to(entry)
    (lib / "EXTERNALLY-MANAGED").write_text("[externally-managed]\nError=Use a virtualenv (test marker).\n")
    return bin_dir / "python3"


def _tool_dir(root: Path, with_java: bool) -> Path:
    """The few commands the scripts use (the system python3 comes first on PATH, see `_run`)."""
    tools = root / "tools"
    tools.mkdir()
    names = ["bash", "env", "dirname", "head", "sed", "cut", "cat", "sha256sum", "rm", "id", "sudo", "apt-get"]
    if with_java:
        names.append("java")
    for name in names:
        found = shutil.which(name)
        if found:
            (tools / name).symlink_to(os.path.realpath(found) if name == "java" else found)
    return tools


def _run(
    checkout: Path,
    script: str,
    python: Path,
    tools: Path,
    extra_env: dict[str, str],
    args: tuple[str, ...] = ("--setup-only",),
) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{python.parent}:{tools}",
        "HOME": os.environ.get("HOME", "/root"),  # pip's wheel cache
        "LANG": "C.UTF-8",
        **extra_env,
    }
    return subprocess.run(
        [str(tools / "bash"), str(checkout / script), *args],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    target = tmp_path / "checkout"
    shutil.copytree(ROOT, target, ignore=_SKIP_COPY, symlinks=True)
    return target


@pytest.mark.slow
def test_scripts_set_up_a_virtualenv_with_an_externally_managed_python(tmp_path: Path, checkout: Path) -> None:
    python = _externally_managed_python(tmp_path / "system-python")
    refused = subprocess.run(
        [str(python), "-m", "pip", "install", "--dry-run", "--no-deps", "-e", str(checkout)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0 and "externally-managed-environment" in refused.stderr, refused.stderr

    tools = _tool_dir(tmp_path, with_java=True)
    options = {"LAKEWARD_VENV_OPTIONS": "--system-site-packages"}
    first = _run(checkout, "test.sh", python, tools, options)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[lakeward] Java " in first.stdout
    assert f"creating a virtualenv in {checkout}/.venv" in first.stdout
    assert "installing lakeward[test]" in first.stdout
    assert "set-up done" in first.stdout
    assert "[lakeward] ruff" not in first.stdout and "[lakeward] pytest" not in first.stdout  # stopped after set-up

    venv_python = checkout / ".venv" / "bin" / "python"
    where = subprocess.run(
        [str(venv_python), "-c", "import lakeward, sys; print(lakeward.__file__, sys.prefix, sys.base_prefix)"],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        check=True,
    ).stdout.split()
    assert where == [str(checkout / "lakeward" / "__init__.py"), str(checkout / ".venv"), str(python.parent.parent)]
    assert (checkout / ".venv" / "bin" / "lakeward").exists()

    second = _run(checkout, "run.sh", python, tools, options)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"using the virtualenv {checkout}/.venv" in second.stdout
    assert "lakeward[spark] is installed" in second.stdout  # the test extras include spark: no second pip run
    assert "creating a virtualenv" not in second.stdout

    # Past set-up: a relative LAKEWARD_DEMO_DIR is taken from the checkout (run from "/" here), and the
    # script says how to reset the demo (`--help` goes to `lakeward serve`, which then creates nothing).
    demo = _run(checkout, "run.sh", python, tools, {**options, "LAKEWARD_DEMO_DIR": "my-demo"}, ("--help",))
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert f"demo tables in {checkout}/my-demo (reset the demo: stop the daemon, then rm -rf" in demo.stdout
    assert "web UI: open http://127.0.0.1:8080/ui" in demo.stdout
    assert "Run the table-services daemon" in demo.stdout and not (checkout / "my-demo").exists()


def test_scripts_say_how_to_install_java_when_it_is_missing(tmp_path: Path, checkout: Path) -> None:
    python = _externally_managed_python(tmp_path / "system-python")
    tools = _tool_dir(tmp_path, with_java=False)
    for script in ("run.sh", "test.sh"):
        result = _run(checkout, script, python, tools, {})
        assert result.returncode != 0
        assert "apt-get install -y openjdk-17-jre-headless" in result.stderr, result.stderr
        assert not (checkout / ".venv").exists()
