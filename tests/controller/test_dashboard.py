"""deploy/grafana: every query of the dashboard names a metric the controller really exports (its Telemetry
registry) or a catalog preset's metric; every panel has a query; the policy variable comes from a real metric."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from autoscaler.controller.telemetry import Telemetry
from autoscaler.core.catalog import PRESETS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "accel-autoscaler.json"
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "on", "ignoring", "group_left", "group_right", "and",
    "or", "unless", "rate", "irate", "increase", "delta", "histogram_quantile", "label_values", "clamp_min",
    "offset", "bool", "topk", "bottomk", "abs", "time", "vector", "scalar",
}


def exported() -> set[str]:
    """The series names the controller's registry serves (counters as _total, histograms' parts)."""
    names: set[str] = set()
    for family in Telemetry(now=lambda: 0.0).registry.collect():
        if family.type == "counter":
            names |= {f"{family.name}_total", f"{family.name}_created"}
        elif family.type == "histogram":
            names |= {f"{family.name}_{part}" for part in ("bucket", "count", "sum", "created")}
        else:
            names.add(family.name)
    return names


def preset_metrics() -> set[str]:
    return {m.replace(":", "_") for p in PRESETS.values() for m in (*p.metrics, *p.denominator)} | {
        m for p in PRESETS.values() for m in (*p.metrics, *p.denominator)}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (labels, grouping, strings, durations and functions out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    text = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,\s*\w+\s*\)", r" \1 ", text)
    tokens = re.findall(r"[a-zA-Z_:][\w:]*", text)
    return {t for t in tokens if t not in PROMQL_WORDS}


def queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for var in dash["templating"]["list"]:
        if var.get("type") == "query":
            out.append((f"variable {var['name']}", var["definition"]))
    return out


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_every_query_names_a_real_metric() -> None:
    known = exported() | preset_metrics()
    found = set()
    for title, expr in queries(_dashboard()):
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        unknown = names - known
        assert not unknown, f"{title}: {sorted(unknown)} is not a metric the controller exports: {expr}"
        found |= names
    # The dashboard covers what the issue asks: own health, desired vs current, signals, reasons, hand-offs.
    for needed in ("autoscaler_desired_replicas", "autoscaler_current_replicas", "autoscaler_signal_value",
                   "autoscaler_decisions_total", "autoscaler_actions_total", "autoscaler_leader",
                   "autoscaler_loop_latency_seconds_bucket", "autoscaler_errors_total"):
        assert needed in found


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        pytest.param('sum by (reason) (increase(autoscaler_decisions_total{policy=~"$policy"}[5m]))',
                     {"autoscaler_decisions_total"}, id="grouping-labels-range"),
        pytest.param("histogram_quantile(0.99, sum by (le) (rate(autoscaler_loop_latency_seconds_bucket[5m])))",
                     {"autoscaler_loop_latency_seconds_bucket"}, id="histogram"),
        pytest.param("label_values(autoscaler_desired_replicas, policy)", {"autoscaler_desired_replicas"},
                     id="variable"),
        pytest.param("max(autoscaler_desired_replica)", {"autoscaler_desired_replica"}, id="typo-is-a-name"),
    ],
)
def test_metric_names_are_parsed(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_typo_would_fail() -> None:
    assert "autoscaler_desired_replica" not in exported() | preset_metrics()


def test_panels_are_laid_out_and_use_the_datasource_variable() -> None:
    dash = _dashboard()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        if p["type"] == "row":
            continue
        assert p["targets"], p["title"]
        assert p["datasource"]["uid"] == "${datasource}"
        assert p["gridPos"]["x"] >= 0
        assert p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
