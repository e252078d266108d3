"""Metric names used by PromQL expressions, and the series names a /metrics exposition offers."""

from __future__ import annotations

import re

_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])\s*(\()?")


def metric_names(expr: str) -> set[str]:
    """Every metric (series) name an expression selects: identifiers that are not functions,
    keywords, label names, grouping labels, durations or Grafana variables."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range and subquery durations
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\{?\w+\}?", "0", text)  # Grafana variables such as $__rate_interval
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names


def exported_series(exposition: str) -> set[str]:
    """Series names a text exposition can carry, from its # TYPE lines (one per metric family)."""
    names: set[str] = set()
    for line in exposition.splitlines():
        match = re.match(r"# TYPE (\S+) (\S+)$", line)
        if not match:
            continue
        name, kind = match.groups()
        if kind == "counter":
            base = name.removesuffix("_total")
            names |= {f"{base}_total", f"{base}_created"}
        elif kind == "histogram":
            names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count", f"{name}_created"}
        elif kind == "summary":
            names |= {name, f"{name}_sum", f"{name}_count", f"{name}_created"}
        else:
            names.add(name)
    return names


def label_values_metric(query: str) -> set[str]:
    """The metric of a Grafana `label_values(metric, label)` variable query."""
    match = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", query)
    return metric_names(match.group(1)) if match else metric_names(query)
