"""deploy/Dockerfile: hadolint, and structural checks (files it copies exist, pinned, non-root)."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy import tools

DOCKERFILE = tools.REPO / "deploy" / "Dockerfile"
ENTRYPOINT = tools.REPO / "deploy" / "entrypoint.sh"


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with the test extra (python -m pip install -e '.[test]')")
    return found


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue
        current += " " + stripped.rstrip("\\").strip() if current else stripped.rstrip("\\").strip()
        if not stripped.endswith("\\"):
            keyword, _, rest = current.partition(" ")
            out.append((keyword.upper(), rest.strip()))
            current = ""
    return out


def _ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` out of the build context (last matching rule wins)."""
    ignored = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatch(prefix, pat) for prefix in prefixes) or fnmatch.fnmatch(path, pat):
            ignored = not negate
    return ignored


def test_hadolint_passes() -> None:
    result = subprocess.run([_tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_problems(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n", encoding="utf-8")
    result = subprocess.run([_tool("hadolint"), str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_entrypoint_script_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True, timeout=30)
    result = subprocess.run([_tool("shellcheck"), str(ENTRYPOINT)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_copied_file_exists_and_reaches_the_build_context() -> None:
    patterns = [
        line.strip()
        for line in (tools.REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies = [args for keyword, args in instructions(DOCKERFILE.read_text()) if keyword in {"COPY", "ADD"}]
    assert copies
    checked = 0
    for args in copies:
        words = [w for w in args.split() if not w.startswith("--")]
        if "--from=" in args:
            continue
        *sources, _dest = words
        for source in sources:
            path = tools.REPO / source
            assert path.exists(), f"COPY {source}: no such file in the repository"
            assert not _ignored(source.rstrip("/").removeprefix("./"), patterns), f"COPY {source}: in .dockerignore"
            checked += 1
    assert checked >= 5
    # The image installs the package with its spark extra from what was copied.
    assert (tools.REPO / "pyproject.toml").read_text().count("spark = [") == 1


def test_image_is_pinned_non_root_healthchecked_and_secret_free() -> None:
    steps = instructions(DOCKERFILE.read_text())
    froms = [args for keyword, args in steps if keyword == "FROM"]
    assert froms
    for image in froms:
        ref = image.split()[0]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", ref), ref
    runs = " ".join(args for keyword, args in steps if keyword == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert '"lakeward[spark]"' in runs and '".[spark]"' in runs
    users = [args for keyword, args in steps if keyword == "USER"]
    assert users and re.fullmatch(r"[1-9]\d{4,}(:\d+)?", users[-1]), users
    healthcheck = [args for keyword, args in steps if keyword == "HEALTHCHECK"]
    assert len(healthcheck) == 1 and "/healthz" in healthcheck[0]
    entrypoint = [args for keyword, args in steps if keyword == "ENTRYPOINT"]
    cmd = [args for keyword, args in steps if keyword == "CMD"]
    assert entrypoint == ['["/usr/bin/tini", "--", "/usr/local/bin/lakeward-entrypoint"]'] and cmd == ['["serve"]']
    env = " ".join(args for keyword, args in steps if keyword in {"ENV", "ARG", "LABEL"})
    assert "LAKEWARD_HTTP__HOST=0.0.0.0" in env
    assert not re.search(r"(TOKEN|PASSWORD|SECRET|API_KEY)", env, re.IGNORECASE), "no secrets in the image"
    # The entry point runs the daemon by default and passes other commands to the CLI.
    script = ENTRYPOINT.read_text()
    assert "set -- serve" in script and 'exec lakeward "$@"' in script


def test_entrypoint_defaults_to_serve_and_passes_cli_commands(tmp_path: Path) -> None:
    fake = tmp_path / "lakeward"
    fake.write_text('#!/usr/bin/env bash\necho "lakeward $*"\n', encoding="utf-8")
    fake.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    for args, expected in (([], "lakeward serve"), (["runs"], "lakeward runs"), (["serve", "--config", "f"], None)):
        out = subprocess.run(["bash", str(ENTRYPOINT), *args], capture_output=True, text=True, env=env, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == (expected or "lakeward " + " ".join(args))
