"""Session fixtures of the deploy tests: helm, the chart rendered per values file, one checkov run."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import tools


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return tools.helm_binary()
    except RuntimeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def rendered(helm: Path) -> dict[str, list[dict[str, Any]]]:
    """The chart's manifests per values file (see tools.VALUES_FILES)."""
    return {name: tools.documents(tools.render(values)) for name, values in tools.VALUES_FILES.items()}


@pytest.fixture(scope="session")
def checkov_report(
    rendered: dict[str, list[dict[str, Any]]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """One checkov run over every rendered chart, every file of deploy/k8s and the Dockerfile."""
    target = tmp_path_factory.mktemp("checkov-target")
    for name, values in tools.VALUES_FILES.items():
        (target / f"chart-{name}.yaml").write_text(tools.render(values), encoding="utf-8")
    for path in sorted(tools.K8S_DIR.glob("*.yaml")):
        shutil.copy(path, target / f"k8s-{path.name}")
    shutil.copy(tools.REPO / "deploy" / "Dockerfile", target / "Dockerfile")
    yield tools.run_checkov(target)
