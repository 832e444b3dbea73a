"""The metric names the Grafana dashboard's PromQL uses, for tests that check each against a live ``/metrics``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "chat-serving.json"
METRIC_NAME = re.compile(r"(?<![\w:])(?:chat_[a-z0-9_]+|vllm:[a-z0-9_:]+)")
"""Our families' names (``chat_*``) and vLLM's (``vllm:*``); PromQL functions, labels and values match neither."""


def dashboard_expressions() -> list[str]:
    """Every PromQL expression of every panel (rows hold none)."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def dashboard_metric_names() -> set[str]:
    """The sample names used (``..._bucket`` for a histogram, ``..._total`` for a counter), as exposed."""
    names: set[str] = set()
    for expr in dashboard_expressions():
        used = METRIC_NAME.findall(expr)
        assert used, f"no chat_* or vllm:* metric in {expr!r}"
        names.update(used)
    return names


def exposed_sample_names(text: str) -> set[str]:
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}
