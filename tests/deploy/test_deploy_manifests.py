"""Every rendered manifest and every file of deploy/k8s: strict Kubernetes 1.30 schemas, checkov."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy import tools

#: Custom resources of the Prometheus Operator: kubernetes-validate has no schema for them.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
#: checkov checks skipped on purpose; each skip carries its reason in a checkov.io/skip annotation.
JUSTIFIED_SKIPS = {"CKV_K8S_35", "CKV_K8S_43", "CKV_K8S_38"}
SKIP_ANNOTATION = re.compile(r"^checkov\.io/skip\d+$")


def _validate(doc: dict[str, Any], where: str) -> None:
    try:
        kubernetes_validate.validate(doc, tools.KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        assert (doc["apiVersion"], doc["kind"]) in CUSTOM_KINDS, f"{where}: no schema for {doc['kind']}"
        _check_custom(doc, where)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{where}: {doc['kind']}/{doc['metadata'].get('name')}: {exc.message} at {list(exc.path)}")


def _check_custom(doc: dict[str, Any], where: str) -> None:
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}, where
    if doc["kind"] == "ServiceMonitor":
        assert set(doc["spec"]) <= {"selector", "namespaceSelector", "endpoints"}, where
        for endpoint in doc["spec"]["endpoints"]:
            assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}, where
            assert endpoint["path"] == "/metrics"
    else:
        for group in doc["spec"]["groups"]:
            for rule in group["rules"]:
                assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, where


@pytest.mark.parametrize("name", list(tools.VALUES_FILES))
def test_rendered_manifests_validate_strictly(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    for doc in rendered[name]:
        _validate(doc, f"chart ({name})")


def test_executor_pod_template_validates_strictly(rendered: dict[str, list[dict[str, Any]]]) -> None:
    configmap = tools.one(rendered["spark-kubernetes"], "ConfigMap")
    template = yaml.safe_load(configmap["data"]["executor-pod-template.yaml"])
    template["metadata"]["name"] = "executor"  # Spark names the pods
    _validate(template, "executor pod template")


def test_validation_catches_a_misspelled_field() -> None:
    doc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"prots": []}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, tools.KUBERNETES_VERSION, strict=True)


def test_every_k8s_file_validates_strictly() -> None:
    files = sorted(tools.K8S_DIR.iterdir())
    assert files, "deploy/k8s is empty"
    kinds = set()
    for path in files:
        assert path.suffix == ".yaml", f"{path.name}: only Kubernetes manifests belong in deploy/k8s"
        docs = tools.documents(path.read_text(encoding="utf-8"))
        assert docs, f"{path.name}: no manifest"
        for doc in docs:
            _validate(doc, path.name)
            if doc["kind"] != "Namespace":
                assert doc["metadata"]["namespace"] == "lakeward", f"{path.name}: {doc['kind']} without namespace"
            kinds.add((path.name, doc["kind"]))
    assert ("zookeeper.yaml", "StatefulSet") in kinds and ("zookeeper.yaml", "Service") in kinds
    assert ("lakeward.yaml", "Deployment") in kinds and ("lakeward.yaml", "ConfigMap") in kinds


def test_k8s_daemon_reaches_the_k8s_zookeeper() -> None:
    zk = tools.documents((tools.K8S_DIR / "zookeeper.yaml").read_text())
    daemon = tools.documents((tools.K8S_DIR / "lakeward.yaml").read_text())
    service = tools.one(zk, "Service")
    settings = yaml.safe_load(tools.one(daemon, "ConfigMap")["data"]["lakeward.yaml"])
    port = service["spec"]["ports"][0]["port"]
    assert settings["zookeeper"]["hosts"] == f"{service['metadata']['name']}:{port}"
    zoo_cfg = tools.one(zk, "ConfigMap")["data"]["zoo.cfg"]
    assert f"clientPort={port}" in zoo_cfg.splitlines()
    deployment = tools.one(daemon, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] >= 2
    assert pod["terminationGracePeriodSeconds"] > settings["drain_time_s"]


def _skip_annotations(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    out = []
    for doc in docs:
        for key, value in (doc["metadata"].get("annotations") or {}).items():
            if SKIP_ANNOTATION.match(key):
                check, _, reason = value.partition("=")
                out.append((check, reason))
    return out


@pytest.mark.slow  # installs checkov into its own virtualenv on first use (~2 min), then runs it
def test_checkov_passes_with_every_skip_justified(
    checkov_report: dict[str, Any], rendered: dict[str, list[dict[str, Any]]]
) -> None:
    k8s = checkov_report["kubernetes"]
    summary = k8s["summary"]
    failed = [(f["check_id"], f["check_name"], f["file_path"], f["resource"]) for f in k8s["results"]["failed_checks"]]
    assert failed == [], failed
    assert summary["parsing_errors"] == 0
    # Three renders plus deploy/k8s: every object was scanned.
    expected = sum(len(docs) for docs in rendered.values())
    expected += sum(len(tools.documents(p.read_text())) for p in tools.K8S_DIR.glob("*.yaml"))
    assert summary["resource_count"] >= expected - len(CUSTOM_KINDS)
    assert summary["passed"] > 100

    skipped = {s["check_id"] for s in k8s["results"]["skipped_checks"]}
    assert skipped <= JUSTIFIED_SKIPS, skipped - JUSTIFIED_SKIPS
    all_docs = [d for docs in rendered.values() for d in docs]
    all_docs += [d for p in tools.K8S_DIR.glob("*.yaml") for d in tools.documents(p.read_text())]
    annotations = _skip_annotations(all_docs)
    assert {check for check, _ in annotations} == skipped
    for check, reason in annotations:
        assert len(reason.split()) >= 8, f"{check}: the skip needs a real reason, got {reason!r}"

    docker = checkov_report["dockerfile"]
    assert docker["results"]["failed_checks"] == [], docker["results"]["failed_checks"]
    assert docker["summary"]["passed"] > 10


def test_checkov_report_names_the_scanned_files(checkov_report: dict[str, Any]) -> None:
    scanned = {Path(c["file_path"]).name for c in checkov_report["kubernetes"]["results"]["passed_checks"]}
    assert {"chart-default.yaml", "chart-zookeeper-auth.yaml", "chart-spark-kubernetes.yaml"} <= scanned
    assert {"k8s-zookeeper.yaml", "k8s-lakeward.yaml"} <= scanned
