"""The Grafana dashboard and the alert rules use only metrics that the daemon exports."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from lakeward.core.metadata_table.compaction import DEFAULT_MAX_DELTA_COMMITS
from lakeward.services.metrics import DaemonMetrics
from tests.deploy import tools
from tests.deploy.promql import exported_series, label_values_metric, metric_names

DASHBOARD = tools.REPO / "deploy" / "grafana" / "lakeward-dashboard.json"
RULES = tools.REPO / "deploy" / "prometheus" / "lakeward-alerts.yaml"
RUNBOOK = tools.REPO / "docs" / "operations.md"

#: What the dashboard must show (issue: pending plans and age, outcomes and durations, claims and
#: conflicts, discovery cycle time, ZooKeeper connection, quarantined plans).
DASHBOARD_MUST_USE = {
    "lakeward_pending_plans",
    "lakeward_oldest_pending_plan_age_seconds",
    "lakeward_runs_total",
    "lakeward_run_duration_seconds_bucket",
    "lakeward_claim_attempts_total",
    "lakeward_discovery_cycle_seconds_bucket",
    "lakeward_zookeeper_connected",
    "lakeward_quarantined_plans",
    "lakeward_table_health_score",
    "lakeward_table_health_factor_penalty",
    "lakeward_table_metadata_lag_instants",
    "lakeward_table_metadata_lag_seconds",
}
#: Alert -> the metric it must watch (issue: old pending plan, repeated failures, quarantine,
#: ZooKeeper disconnected, no successful discovery, replica not ready).
ALERTS = {
    "LakewardPendingPlanTooOld": "lakeward_oldest_pending_plan_age_seconds",
    "LakewardPlanFailingRepeatedly": "lakeward_runs_total",
    "LakewardPlanQuarantined": "lakeward_quarantined_plans",
    "LakewardZooKeeperDisconnected": "lakeward_zookeeper_connected",
    "LakewardDiscoveryStalled": "lakeward_last_successful_discovery_timestamp_seconds",
    "LakewardReplicaNotReady": "lakeward_ready",
    "LakewardTableUnhealthy": "lakeward_table_health_score",
    "LakewardTableUnreadable": "lakeward_table_failing",
    "LakewardMetadataTableLagging": "lakeward_table_metadata_lag_instants",
    "LakewardMetadataCompactionBlocked": "lakeward_table_metadata_uncompacted_instants",
}


def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, set[str]]]:
    """(where, metric names) for every panel target and every query variable."""
    out = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            for target in panel.get("targets", []):
                out.append((f"panel {panel['title']!r}", metric_names(target["expr"])))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"variable {var['name']}", label_values_metric(query)))
    return out


def rules_queries(rules: dict[str, Any]) -> list[tuple[str, set[str]]]:
    return [(f"alert {r['alert']}", metric_names(r["expr"])) for g in rules["groups"] for r in g["rules"]]


@pytest.fixture(scope="module")
def exported() -> set[str]:
    text = DaemonMetrics().render().decode()
    assert text.count("# HELP ") == text.count("# TYPE ") >= 15
    return exported_series(text)


def test_promql_metric_names() -> None:
    assert metric_names('sum by (table, action) (increase(lakeward_runs_total{outcome=~"failed|x"}[1h])) >= 3') == {
        "lakeward_runs_total"
    }
    assert metric_names("time() - lakeward_last_successful_discovery_timestamp_seconds > 600") == {
        "lakeward_last_successful_discovery_timestamp_seconds"
    }
    expr = 'histogram_quantile(0.95, sum by (le) (rate(a_bucket{x="y"}[$__rate_interval]))) / on (job) b_count'
    assert metric_names(expr) == {"a_bucket", "b_count"}
    assert metric_names("max(up) and on (table, action) other > 0") == {"up", "other"}


def test_exported_series_names(exported: set[str]) -> None:
    assert {"lakeward_runs_total", "lakeward_run_duration_seconds_bucket", "lakeward_ready"} <= exported
    assert "lakeward_runs" not in exported and "lakeward_run_duration_seconds" not in exported


def test_dashboard_uses_only_exported_metrics(exported: set[str]) -> None:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] and dashboard["title"]
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 20
    used: set[str] = set()
    for where, names in queries:
        assert names, f"{where}: selects no metric"
        unknown = names - exported
        assert not unknown, f"{where}: not exported by the daemon: {sorted(unknown)}"
        used |= names
    missing = DASHBOARD_MUST_USE - used
    assert not missing, f"the dashboard does not show {sorted(missing)}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"


def test_alert_rules_use_only_exported_metrics(exported: set[str]) -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    by_name = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert set(ALERTS) <= set(by_name)
    for where, names in rules_queries(rules):
        assert names, f"{where}: selects no metric"
        assert not names - exported, f"{where}: not exported by the daemon: {sorted(names - exported)}"
    for alert, metric in ALERTS.items():
        rule = by_name[alert]
        assert metric in metric_names(rule["expr"]), alert
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert re.fullmatch(r"\d+[smh]", rule["for"]), alert
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


def test_runbook_covers_every_alert() -> None:
    text = RUNBOOK.read_text(encoding="utf-8")
    assert "\n## On-call runbook\n" in text
    section = text.split("\n## On-call runbook\n", 1)[1]
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    for rule in (r for g in rules["groups"] for r in g["rules"]):
        assert f"\n### {rule['alert']}\n" in section, f"the runbook (docs/operations.md) lacks {rule['alert']}"


def test_unhealthy_table_alert_fires_after_30_minutes_below_the_chart_default() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LakewardTableUnhealthy")
    chart = yaml.safe_load((tools.CHART / "values.yaml").read_text())["prometheusRule"]
    assert rule["for"] == chart["healthScoreFor"] == "30m"
    assert rule["expr"] == f"min by (table) (lakeward_table_health_score) < {chart['healthScoreBelow']}"


def test_metadata_table_lag_alert_fires_after_the_chart_default() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LakewardMetadataTableLagging")
    chart = yaml.safe_load((tools.CHART / "values.yaml").read_text())["prometheusRule"]
    assert rule["for"] == chart["metadataLagFor"] == "15m"
    assert rule["expr"] == "max by (table) (lakeward_table_metadata_lag_instants) > 0"


def test_metadata_compaction_blocked_alert_fires_above_twice_the_default_threshold() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LakewardMetadataCompactionBlocked")
    chart = yaml.safe_load((tools.CHART / "values.yaml").read_text())["prometheusRule"]
    assert rule["for"] == chart["metadataUncompactedFor"] == "30m"
    assert chart["metadataUncompactedAbove"] == 2 * DEFAULT_MAX_DELTA_COMMITS
    expr = f"max by (table) (lakeward_table_metadata_uncompacted_instants) > {chart['metadataUncompactedAbove']}"
    assert rule["expr"] == expr


def test_unreadable_table_alert_fires_after_the_chart_default() -> None:
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rule = next(r for g in rules["groups"] for r in g["rules"] if r["alert"] == "LakewardTableUnreadable")
    chart = yaml.safe_load((tools.CHART / "values.yaml").read_text())["prometheusRule"]
    assert rule["for"] == chart["unreadableFor"] == "15m"
    assert rule["expr"] == "max by (table) (lakeward_table_failing) > 0"
    assert rule["labels"]["severity"] == "critical"
