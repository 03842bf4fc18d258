"""configs/grafana/zmqdata.json queries only metrics our servers export.

Every metric name in the dashboard's PromQL (panels and variables) must appear
in a live scrape of an in-process dispatcher and worker; so must the metric the
HorizontalPodAutoscaler (configs/k8s/hpa.yaml) scales on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import scrape
from zmqdata import service

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "configs" / "grafana" / "zmqdata.json"
RECOMMENDED = "zmqdata_dispatcher_recommended_workers"
# PromQL words that look like metric names: keywords, and functions and
# aggregations (always followed by "(", which the extraction skips anyway).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS |= {"bool", "and", "or", "unless", "offset", "inf", "nan"}


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL text in a dashboard: targets' ``expr`` and variables' queries."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or ``label_values(m, l)``) reads.

    >>> sorted(metric_names('sum(rate(a_total{job=~"$job"}[5m])) by (x) / b'))
    ['a_total', 'b']
    >>> sorted(metric_names("label_values(zmqdata_build_info, job)"))
    ['zmqdata_build_info']
    """
    expr = re.sub(r"label_values\(\s*([a-zA-Z_:][\w:]*)\s*,[^)]*\)", r"\1", expr)
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)  # matchers, ranges
    expr = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr
    )
    names = re.findall(r"(?<![\w$:.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
    return {name for name in names if name.lower() not in KEYWORDS}


def dashboard_metrics() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return sorted({n for e in expressions(dashboard) for n in metric_names(e)})


def hpa_metrics() -> list[str]:
    text = (ROOT / "configs" / "k8s" / "hpa.yaml").read_text()
    return [
        metric["external"]["metric"]["name"]
        for doc in yaml.safe_load_all(text)
        for metric in doc["spec"]["metrics"]
    ]


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Sample names a dispatcher and a worker serve (one scrape of each)."""
    with (
        service.DispatchServer(service.DispatcherConfig(metrics_port=0)) as dispatcher,
        service.WorkerServer(
            service.WorkerConfig(dispatcher.target, metrics_port=0)
        ) as worker,
    ):
        return {
            name
            for server in (dispatcher, worker)
            for name in scrape(str(server.metrics_address))
        }


def test_the_dashboard_covers_what_operators_watch():
    names = dashboard_metrics()
    for needed in (
        "zmqdata_dispatcher_workers",
        RECOMMENDED,
        "zmqdata_dispatcher_consumers",
        "zmqdata_dispatcher_splits_total",
        "zmqdata_worker_elements_total",
        "zmqdata_worker_bytes_total",
        "zmqdata_worker_buffered_elements",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "zmqdata_build_info",
    ):
        assert needed in names


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted({*dashboard_metrics(), *hpa_metrics()}))
def test_every_queried_metric_is_exported(exported, name):
    hint = (
        " (the gauge comes with the ops-autoscale branch of issue 16)"
        if name == RECOMMENDED
        else ""
    )
    assert name in exported, f"{name} is queried but no server exports it{hint}"


def test_the_extraction_sees_through_promql():
    expr = (
        'rate(process_cpu_seconds_total{job=~"$job"}[$__rate_interval]) '
        "and on(instance) zmqdata_build_info"
    )
    assert metric_names(expr) == {"process_cpu_seconds_total", "zmqdata_build_info"}
