"""The settings the chart and deploy/k8s give the daemon load through the daemon's own model."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from lakeward.services.settings import CONFIG_ENV_VAR, ENV_PREFIX, DaemonSettings, load_settings
from tests.deploy import tools

#: Sample values for the env vars whose value comes from a Secret or the downward API.
SAMPLES = {
    "LAKEWARD_HTTP__API_TOKENS": "token-one,token-two",
    "LAKEWARD_ZOOKEEPER__DIGEST_USER": "lakeward",
    "LAKEWARD_ZOOKEEPER__DIGEST_PASSWORD": "zk-password",
}
DOWNWARD = {"$(POD_NAME)": "lakeward-7d9f-abcde", "$(POD_IP)": "10.1.2.3"}


def settings_key(env_name: str) -> str:
    """The settings key that a LAKEWARD_* variable sets, walking DaemonSettings (KeyError if none)."""
    if not env_name.upper().startswith(ENV_PREFIX):
        raise KeyError(env_name)
    parts = env_name[len(ENV_PREFIX) :].lower().split("__")
    model: type[BaseModel] = DaemonSettings
    for i, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            raise KeyError(f"{env_name}: no settings key {'.'.join(parts[: i + 1])}")
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
            if i == len(parts) - 1:
                return ".".join(parts)
            continue
        if typing.get_origin(annotation) is dict:
            if i == len(parts) - 1:
                return ".".join(parts)  # the whole map, as JSON
            if len(parts) != i + 2 or not parts[-1]:
                raise KeyError(f"{env_name}: a map key is one segment after {'.'.join(parts[: i + 1])}")
            return ".".join(parts[: i + 1]) + f"[{parts[-1]}]"
        if i != len(parts) - 1:
            raise KeyError(f"{env_name}: {'.'.join(parts[: i + 1])} has no sub-keys")
        return ".".join(parts)
    raise KeyError(env_name)


def _env_of(container: dict[str, Any]) -> dict[str, str]:
    """The container's LAKEWARD_* variables with sample values, as the pod would see them."""
    env = {}
    for item in container.get("env", []):
        name = item["name"]
        if not name.startswith(ENV_PREFIX):
            continue
        if "value" in item:
            value = item["value"]
            for ref, sample in DOWNWARD.items():
                value = value.replace(ref, sample)
        else:
            assert "secretKeyRef" in item["valueFrom"], f"{name}: only Secrets feed LAKEWARD_* variables"
            value = SAMPLES[name]
        env[name] = value
    return env


def _check(configmap: dict[str, Any], container: dict[str, Any], tmp_path: Path) -> Any:
    config = tmp_path / "lakeward.yaml"
    config.write_text(configmap["data"]["lakeward.yaml"], encoding="utf-8")
    env = _env_of(container)
    assert env[CONFIG_ENV_VAR].endswith("/lakeward.yaml")
    for name in env:
        if name != CONFIG_ENV_VAR:
            settings_key(name)  # raises for a variable the daemon does not read
    env[CONFIG_ENV_VAR] = str(config)
    settings = load_settings(None, env)  # the file named by LAKEWARD_CONFIG, like the daemon
    assert settings.replica_id == DOWNWARD["$(POD_NAME)"]
    return settings


@pytest.mark.parametrize("name", list(tools.VALUES_FILES))
def test_chart_settings_load_through_the_daemon_model(
    rendered: dict[str, list[dict[str, Any]]], name: str, tmp_path: Path
) -> None:
    docs = rendered[name]
    container = tools.one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    settings = _check(tools.one(docs, "ConfigMap"), container, tmp_path)
    values = yaml.safe_load(tools.VALUES_FILES[name].read_text()) if tools.VALUES_FILES[name] else {}  # type: ignore[union-attr]
    assert settings.http.host == "0.0.0.0"
    assert settings.spark.conf["spark.local.dir"].startswith("/scratch/")
    assert settings.zookeeper.hosts is not None
    if name == "default":
        assert not settings.http.api_tokens and settings.zookeeper.digest_user is None
    if name == "zookeeper-auth":
        assert [t.name for t in settings.static_tables()] == ["orders", "events"]
        assert settings.zookeeper.digest_user == SAMPLES["LAKEWARD_ZOOKEEPER__DIGEST_USER"]
        assert settings.zookeeper.digest_password is not None
        assert settings.policy_for("orders").compaction.max_delta_commits == 10
        assert settings.drain_time_s == values["settings"]["drain_time_s"]
    if name == "spark-kubernetes":
        assert [t.get_secret_value() for t in settings.http.api_tokens] == ["token-one", "token-two"]
        assert settings.spark.master.startswith("k8s://")
        # Per-pod conf from env merges into the file's spark.conf.
        assert settings.spark.conf["spark.driver.host"] == DOWNWARD["$(POD_IP)"]
        assert settings.spark.conf["spark.kubernetes.driver.pod.name"] == DOWNWARD["$(POD_NAME)"]
        assert settings.spark.conf["spark.hadoop.fs.s3a.endpoint"] == "http://minio:9000"


def test_k8s_settings_load_through_the_daemon_model(tmp_path: Path) -> None:
    docs = tools.documents((tools.K8S_DIR / "lakeward.yaml").read_text())
    container = tools.one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    settings = _check(tools.one(docs, "ConfigMap"), container, tmp_path)
    assert settings.zookeeper.hosts == "zookeeper:2181"
    assert len(settings.http.api_tokens) == 2


def test_settings_key_walks_the_model() -> None:
    assert settings_key("LAKEWARD_HTTP__API_TOKENS") == "http.api_tokens"
    assert settings_key("LAKEWARD_REPLICA_ID") == "replica_id"
    assert settings_key("LAKEWARD_SPARK__CONF__SPARK.DRIVER.HOST") == "spark.conf[spark.driver.host]"
    assert settings_key("LAKEWARD_SPARK__CONF") == "spark.conf"
    # The environment source ignores unknown top-level names silently: the walk must not.
    for bad in (
        "LAKEWARD_BOGUS",
        "LAKEWARD_HTTP__NOPE",
        "LAKEWARD_REPLICA_ID__X",
        "LAKEWARD_SPARK__CONF__A__B",
        "HOME",
    ):
        with pytest.raises(KeyError):
            settings_key(bad)
