"""configs/grafana/zmqdata.json queries only metrics our servers export.

Every metric name in the dashboard's PromQL (panels and variables) must appear
in a live scrape of an in-process dispatcher and worker (a job running); so must
the metric the HorizontalPodAutoscaler (configs/k8s/hpa.yaml) scales on. The
per-op, per-consumer and bottleneck series also come from a hand-made status
with every key, since a dispatcher only has them once its status reports them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import zmqdata as zd
from tests import job_status
from tests.helpers import poll_for, scrape
from zmqdata import service
from zmqdata._dispatcher import job_metrics

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "configs" / "grafana" / "zmqdata.json"
RECOMMENDED = "zmqdata_dispatcher_recommended_workers"
# PromQL words that look like metric names: keywords, and functions and
# aggregations (always followed by "(", which the extraction skips anyway).
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS |= {"bool", "and", "or", "unless", "offset", "inf", "nan"}
STATUS_KEYS = {
    "zmqdata_job_op_": "ops",
    "zmqdata_job_consumer_": "consumers",
    "zmqdata_job_bottleneck": "bottleneck",
}
"""Job series by name prefix, and the job status key they are made from."""


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


def status_key(name: str) -> str | None:
    """The job status key series ``name`` is made from (None: not a job series)."""
    return next((k for p, k in STATUS_KEYS.items() if name.startswith(p)), None)


@pytest.fixture(scope="module")
def exported() -> tuple[set[str], set[str]]:
    """Sample names a dispatcher and a worker serve while a job runs, and the
    keys of that job's status entry (one scrape of each server)."""
    with (
        service.DispatchServer(service.DispatcherConfig(metrics_port=0)) as dispatcher,
        service.WorkerServer(
            service.WorkerConfig(
                dispatcher.target, metrics_port=0, heartbeat_interval_ms=50
            )
        ) as worker,
    ):
        ds = zd.Dataset.range(10).repeat().map(lambda x: x + 1, num_parallel_calls=2)
        reading = iter(
            ds.apply(
                service.distribute("parallel_epochs", dispatcher.target, job_name="g")
            )
        )
        queried = [n for n in dashboard_metrics() if n.startswith("zmqdata_job_")]

        def with_every_queried_job_series() -> tuple[set[str], set[str]] | None:
            """Scraped names, once every job series the status can make is there."""
            for _ in range(100):  # a reading trainer: its waits and rates are known
                next(reading)
            [job] = service.get_status(dispatcher.target)["jobs"]
            found = set(scrape(str(dispatcher.metrics_address)))
            makeable = [n for n in queried if status_key(n) in (None, *job)]
            return (found, set(job)) if set(makeable) <= found else None

        try:
            names, job_keys = poll_for(with_every_queried_job_series, timeout=10.0)
            return names | set(scrape(str(worker.metrics_address))), job_keys
        finally:
            reading.close()


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
        "zmqdata_job_op_seconds_total",
        "zmqdata_job_op_busy_ratio",
        "zmqdata_job_consumer_wait_ratio",
        "zmqdata_job_consumer_elements_per_second",
        "zmqdata_job_bottleneck",
    ):
        assert needed in names


@pytest.mark.timeout(30)
@pytest.mark.parametrize("name", sorted({*dashboard_metrics(), *hpa_metrics()}))
def test_every_queried_metric_is_exported(exported, name):
    names, job_keys = exported
    key = status_key(name)
    if name not in names and key is not None and key not in job_keys:
        pytest.skip(f"the dispatcher's job status has no {key!r} yet for {name}")
    hint = (
        " (the gauge comes with the ops-autoscale branch of issue 16)"
        if name == RECOMMENDED
        else ""
    )
    assert name in names, f"{name} is queried but no server exports it{hint}"


@pytest.mark.parametrize(
    "name", [name for name in dashboard_metrics() if name.startswith("zmqdata_job_")]
)
def test_every_queried_job_series_is_made_from_a_full_status(name):
    status = job_status.status(job_status.job())
    made = {
        sample.name
        for family in job_metrics.families(status)
        for sample in family.samples
    }
    assert name in made


def test_the_extraction_sees_through_promql():
    expr = (
        'rate(process_cpu_seconds_total{job=~"$job"}[$__rate_interval]) '
        "and on(instance) zmqdata_build_info"
    )
    assert metric_names(expr) == {"process_cpu_seconds_total", "zmqdata_build_info"}
