"""The Helm chart: lint, render, the objects and pod settings it promises, NOTES, alert rules."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import tools

ALL = list(tools.VALUES_FILES)


def _deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return tools.one(docs, "Deployment")


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["lakeward"]
    return dict(containers[0])


def _settings(docs: list[dict[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(tools.one(docs, "ConfigMap")["data"]["lakeward.yaml"])
    return data


def test_helm_is_a_real_v3_binary(helm: Path) -> None:
    version = tools.run_helm("version", "--short").stdout.strip()
    assert version.startswith("v3."), version


@pytest.mark.parametrize("name", ALL)
def test_chart_lints_strictly(helm: Path, name: str) -> None:
    result = tools.run_helm(
        "lint", "--strict", str(tools.CHART), *tools.values_args(tools.VALUES_FILES[name]), check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_every_values_file_renders_the_core_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for name, docs in rendered.items():
        kinds = {d["kind"] for d in docs}
        for kind in ("Deployment", "ConfigMap", "Service", "ServiceAccount", "PodDisruptionBudget", "NetworkPolicy"):
            assert kind in kinds, f"{name}: no {kind}"
        for doc in docs:
            assert doc["metadata"]["namespace"] == tools.NAMESPACE, f"{name}: {doc['kind']} without namespace"
    # Optional objects follow their values.
    assert "ServiceMonitor" not in {d["kind"] for d in rendered["default"]}
    assert "PrometheusRule" not in {d["kind"] for d in rendered["default"]}
    assert "Role" not in {d["kind"] for d in rendered["default"]}
    assert "Secret" not in {d["kind"] for d in rendered["default"]}
    zk_kinds = {d["kind"] for d in rendered["zookeeper-auth"]}
    assert {"ServiceMonitor", "PrometheusRule"} <= zk_kinds
    assert "Secret" not in zk_kinds  # existing secrets are referenced, not created
    spark_kinds = {d["kind"] for d in rendered["spark-kubernetes"]}
    assert {"Role", "RoleBinding", "Secret"} <= spark_kinds


@pytest.mark.parametrize("name", ALL)
def test_deployment_is_highly_available_and_locked_down(rendered: dict[str, list[dict[str, Any]]], name: str) -> None:
    docs = rendered[name]
    deployment = _deployment(docs)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(docs)
    settings = _settings(docs)

    assert deployment["spec"]["replicas"] >= 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    anti = pod["affinity"]["podAntiAffinity"]
    terms = anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [
        t["podAffinityTerm"] for t in anti["preferredDuringSchedulingIgnoredDuringExecution"]
    ]
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname" and t["labelSelector"]["matchLabels"] == selector for t in terms
    )
    pdb = tools.one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    service = tools.one(docs, "Service")
    assert service["spec"]["selector"] == selector

    # Probes on the daemon's health endpoints, on the port the settings file binds.
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == settings["http"]["port"]
    assert settings["http"]["host"] == "0.0.0.0"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"

    # Graceful stop: the grace period outlasts the drain.
    assert pod["terminationGracePeriodSeconds"] > settings["drain_time_s"]

    # Security: non-root, read-only root, nothing added, no privilege escalation.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] >= 10000
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in sc["capabilities"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])

    # The writable places: Spark's local dir, HOME and TMPDIR are on emptyDir volumes.
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    writable = [m["mountPath"] for m in container["volumeMounts"] if m["name"] in empty_dirs]
    env = {e["name"]: e.get("value") for e in container["env"]}

    def on_writable(path: str) -> bool:
        return any(path == w or path.startswith(w.rstrip("/") + "/") for w in writable)

    assert on_writable(settings["spark"]["conf"]["spark.local.dir"])
    assert on_writable(env["HOME"]) and on_writable(env["TMPDIR"])
    assert "/tmp" in writable
    config_mount = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert config_mount and config_mount[0]["readOnly"] is True
    assert env["LAKEWARD_CONFIG"] == config_mount[0]["mountPath"] + "/lakeward.yaml"

    # The service account token is mounted only where Spark needs the Kubernetes API.
    assert pod["automountServiceAccountToken"] is (name == "spark-kubernetes")
    assert pod["serviceAccountName"] == tools.one(docs, "ServiceAccount")["metadata"]["name"]


def test_spark_on_kubernetes_gets_a_role_and_executor_settings(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["spark-kubernetes"]
    role = tools.one(docs, "Role")
    pods = [r for r in role["rules"] if "pods" in r["resources"]]
    assert pods and {"create", "delete", "watch"} <= set(pods[0]["verbs"])
    assert all("*" not in r["verbs"] and "*" not in r["resources"] for r in role["rules"])
    assert "secrets" not in {res for r in role["rules"] for res in r["resources"]}
    binding = tools.one(docs, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["name"] == tools.one(docs, "ServiceAccount")["metadata"]["name"]
    spark = _settings(docs)["spark"]
    assert spark["master"].startswith("k8s://")
    assert spark["conf"]["spark.kubernetes.namespace"] == tools.NAMESPACE
    template = yaml.safe_load(tools.one(docs, "ConfigMap")["data"]["executor-pod-template.yaml"])
    assert spark["conf"]["spark.kubernetes.executor.podTemplateFile"].endswith("/executor-pod-template.yaml")
    executor = template["spec"]["containers"][0]
    assert executor["securityContext"]["readOnlyRootFilesystem"] is True
    # Executor pods must not match the Deployment's selector (it would adopt them).
    selector = _deployment(docs)["spec"]["selector"]["matchLabels"]
    labels = template["metadata"]["labels"]
    assert any(labels.get(k) != v for k, v in selector.items())


def test_more_than_one_replica_needs_zookeeper(helm: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        tools.render(None, "--set", "settings.zookeeper.hosts=null")
    assert "replicaCount > 1 needs settings.zookeeper.hosts" in failed.value.stderr
    docs = tools.documents(tools.render(None, "--set", "settings.zookeeper.hosts=null", "--set", "replicaCount=1"))
    assert _deployment(docs)["spec"]["replicas"] == 1
    assert not tools.by_kind(docs, "PodDisruptionBudget")


def test_a_chart_without_a_zookeeper_section_renders(helm: Path, tmp_path: Path) -> None:
    """`--set settings.zookeeper=null` removes the section: the templates failed on a nil pointer."""
    values = tmp_path / "values.yaml"
    values.write_text("replicaCount: 1\nsettings:\n  zookeeper: null\n  tables: null\n")
    docs = tools.documents(tools.render(values))
    assert _deployment(docs)["spec"]["replicas"] == 1
    assert "in-process" in tools.render_notes(values, tmp_path / "notes")


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("settings.bogus=1", "bogus"),
        # typos in sections the daemon checks key by key (it refused to start: a CrashLoop helm lint passed)
        ("settings.concurrency.max_runing=3", "max_runing"),
        ("settings.resources.nicee=3", "nicee"),
        ("settings.policies.defaults.compaction.max_delta_comits=3", "max_delta_comits"),
        ("settings.scheduling.starving_score=-1", "starving_score"),
        ("replicaCount=0", "replicaCount"),
        ("settings.spark.engine=flink", "engine"),
        ("image.digest=latest", "digest"),
    ],
)
def test_values_schema_rejects_bad_values(helm: Path, setting: str, message: str) -> None:
    with pytest.raises(subprocess.CalledProcessError) as failed:
        tools.render(None, "--set", setting)
    assert message in failed.value.stderr


@pytest.mark.parametrize(
    "setting",
    [
        "settings.scheduling.starving_score=40",
        "settings.history.runs_max_count=500",
        "settings.tables.load_timeout_s=20",
        "settings.tables.health_refresh_s=120",
        "settings.policies.defaults.compaction.max_delta_commits=3",
    ],
)
def test_values_schema_takes_every_daemon_setting(helm: Path, setting: str, tmp_path: Path) -> None:
    """The chart's `settings` schema is generated from the daemon's settings model (scripts/gen_docs.py):
    keys docs/daemon.md documents render, and the daemon loads the settings file the chart renders."""
    from lakeward.services.settings import load_settings

    docs = tools.documents(tools.render(None, "--set", setting))
    rendered = tmp_path / "lakeward.yaml"
    rendered.write_text(tools.one(docs, "ConfigMap")["data"]["lakeward.yaml"])
    key, value = setting.removeprefix("settings.").split("=")
    loaded: Any = load_settings(rendered, env={})
    for part in key.split("."):
        loaded = loaded[part] if isinstance(loaded, dict) else getattr(loaded, part)
    assert float(loaded) == float(value)


def test_secrets_stay_out_of_the_configmap(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["spark-kubernetes"]
    values = yaml.safe_load(tools.VALUES_FILES["spark-kubernetes"].read_text())  # type: ignore[union-attr]
    configmap = yaml.safe_dump(tools.one(docs, "ConfigMap"))
    for secret in [*values["apiTokens"]["values"], values["zookeeperAuth"]["password"]]:
        assert secret not in configmap
    data = tools.one(docs, "Secret")["data"]
    assert base64.b64decode(data["api-tokens"]).decode() == ",".join(values["apiTokens"]["values"])
    assert base64.b64decode(data["zookeeper-digest-password"]).decode() == values["zookeeperAuth"]["password"]
    env = {e["name"]: e for e in _container(docs)["env"]}
    for name in ("LAKEWARD_HTTP__API_TOKENS", "LAKEWARD_ZOOKEEPER__DIGEST_USER", "LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == tools.one(docs, "Secret")["metadata"]["name"]
    # With existing secrets, the chart references them by name and key.
    zk_env = {e["name"]: e for e in _container(rendered["zookeeper-auth"])["env"]}
    assert zk_env["LAKEWARD_HTTP__API_TOKENS"]["valueFrom"]["secretKeyRef"] == {
        "name": "lakeward-api-tokens",
        "key": "tokens",
    }
    assert zk_env["LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "lakeward-zookeeper"


def test_notes_tell_how_to_reach_the_api_and_trigger_a_compaction(helm: Path, tmp_path: Path) -> None:
    notes = tools.render_notes(tools.VALUES_FILES["spark-kubernetes"], tmp_path / "a")
    assert "port-forward svc/lakeward" in notes
    assert "/api/v1/tables/TABLE/trigger" in notes and '"action": "compaction"' in notes
    assert "Authorization: Bearer" in notes
    assert "lakeward trigger compaction TABLE" in notes
    default_notes = tools.render_notes(None, tmp_path / "b")
    assert "no API token is configured" in default_notes


def test_prometheus_rule_is_the_alert_rules_file(rendered: dict[str, list[dict[str, Any]]]) -> None:
    rules_file = yaml.safe_load((tools.REPO / "deploy" / "prometheus" / "lakeward-alerts.yaml").read_text())
    chart_values = yaml.safe_load((tools.CHART / "values.yaml").read_text())["prometheusRule"]
    rule = tools.one(rendered["zookeeper-auth"], "PrometheusRule")
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == [g["name"] for g in rules_file["groups"]]
    extra = yaml.safe_load(tools.VALUES_FILES["zookeeper-auth"].read_text())["prometheusRule"]  # type: ignore[union-attr]
    for chart_group, file_group in zip(groups, rules_file["groups"], strict=True):
        for chart_rule, file_rule in zip(chart_group["rules"], file_group["rules"], strict=True):
            assert chart_rule["alert"] == file_rule["alert"]
            expected = dict(file_rule)
            expected["labels"] = {**file_rule["labels"], **extra["extraLabels"]}
            expected["annotations"] = {
                **file_rule["annotations"],
                "runbook_url": f"{extra['runbookBaseUrl']}#{file_rule['alert'].lower()}",
            }
            assert chart_rule == expected, chart_rule["alert"]
    # The thresholds of the file are the chart's defaults.
    text = yaml.safe_dump(rules_file)
    assert f"> {chart_values['pendingPlanAgeSeconds']}" in text
    assert f">= {chart_values['failuresPerHour']}" in text


def test_zookeeper_alert_is_dropped_without_zookeeper(helm: Path) -> None:
    docs = tools.documents(
        tools.render(
            None,
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "settings.zookeeper.hosts=null",
            "--set",
            "replicaCount=1",
        )
    )
    alerts = {r["alert"] for g in tools.one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert "LakewardZooKeeperDisconnected" not in alerts
    assert "LakewardPlanQuarantined" in alerts
