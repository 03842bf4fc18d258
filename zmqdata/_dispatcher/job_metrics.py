"""Per-job, per-op and per-consumer Prometheus series, from the dispatcher's status.

Pure: ``families(status)`` turns ``get_status``'s dict into metric families;
the dispatcher's endpoint calls it with a status made on its loop thread at
scrape time. Every series is labelled ``job_id`` and ``job_name`` (``""`` for
an unnamed job): ``job`` is the label Prometheus gives the scrape job.

Label sets are bounded per job: ``MAX_OP_LABELS`` ``op`` values (past that,
the ops that took the least time are summed under ``op="other"``) and
``MAX_CONSUMER_LABELS`` ``consumer`` values (a consumer is its rank, else
``client-<id>``; past that, the consumers that waited the least are folded
into ``consumer="other"``: mean wait, summed rate, largest lag).

>>> job = {"job_id": 3, "job_name": "train", "elements": 10,
...        "ops": [{"op": "map(load)", "index": 1, "own_s": 2.5, "busy": 0.9}]}
>>> for family in families({"jobs": [job]}):
...     for sample in family.samples:
...         print(sample.name, sorted(sample.labels.items()), sample.value)
zmqdata_job_elements_total [('job_id', '3'), ('job_name', 'train')] 10
zmqdata_job_op_seconds_total [('job_id', '3'), ('job_name', 'train'), ('op', 'map(load)')] 2.5
zmqdata_job_op_busy_ratio [('job_id', '3'), ('job_name', 'train'), ('op', 'map(load)')] 0.9
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from zmqdata._dispatcher import job_view
from zmqdata._dispatcher.job_view import ConsumerView, OpView

if TYPE_CHECKING:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
    from prometheus_client.metrics_core import Metric

T = TypeVar("T")

MAX_OP_LABELS = 32
"""``op`` values per job at most, ``"other"`` included."""
MAX_CONSUMER_LABELS = 64
"""``consumer`` values per job at most, ``"other"`` included."""
OTHER = "other"
JOB_LABELS = ("job_id", "job_name")
CONSUMER_SERIES: tuple[tuple[str, str, Callable[[ConsumerView], float | None]], ...] = (
    (
        "zmqdata_job_consumer_wait_ratio",
        "Fraction of the last minute the consumer's trainer waited for data.",
        lambda c: c.waited,
    ),
    (
        "zmqdata_job_consumer_elements_per_second",
        "Elements per second the consumer reads.",
        lambda c: c.elements_per_s,
    ),
    (
        "zmqdata_job_consumer_lag_elements",
        "The consumer's lag in elements (get_status: jobs[].consumers[].lag).",
        lambda c: c.lag,
    ),
)
"""Gauges per consumer: name, help and value."""


def bounded(
    items: Sequence[T], limit: int, weight: Callable[[T], float]
) -> tuple[list[T], list[T]]:
    """``(kept, folded)``: the heaviest ``items`` and the rest, to fold as one.

    All of them are kept if there are at most ``limit``, else the ``limit - 1``
    heaviest (in their order).

    >>> bounded([5, 1, 7, 3], 3, float)
    ([5, 7], [1, 3])
    >>> bounded([5, 1], 3, float)
    ([5, 1], [])
    """
    if len(items) <= limit:
        return list(items), []
    ranked = sorted(range(len(items)), key=lambda i: -weight(items[i]))
    heaviest = set(ranked[: limit - 1])
    kept = [item for i, item in enumerate(items) if i in heaviest]
    folded = [item for i, item in enumerate(items) if i not in heaviest]
    return kept, folded


def _total(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _mean(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _largest(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _bounded_ops(job: Mapping[str, Any]) -> list[OpView]:
    """The job's ops, the lightest summed into one ``"other"`` past the bound."""
    kept, folded = bounded(job_view.ops(job), MAX_OP_LABELS, lambda op: op.own_s or 0)
    if not folded:
        return kept
    other = OpView(
        label=OTHER,
        index=None,
        own_s=_total(op.own_s for op in folded),
        share=_total(op.share for op in folded),
        waited_s=_total(op.waited_s for op in folded),
        elements=_total(op.elements for op in folded),
        elements_per_s=_total(op.elements_per_s for op in folded),
        bytes=_total(op.bytes for op in folded),
        threads=None,
        busy=None,
    )
    return [*kept, other]


def _merged(label: str, group: Sequence[ConsumerView]) -> ConsumerView:
    """Consumers under one label as one: mean wait, summed rate, largest lag."""
    if len(group) == 1:
        return group[0]
    return ConsumerView(
        label=label,
        client_id=None,
        consumer_index=None,
        waited=_mean(c.waited for c in group),
        elements=_total(c.elements for c in group),
        elements_per_s=_total(c.elements_per_s for c in group),
        lag=_largest(c.lag for c in group),
        straggler=any(c.straggler for c in group),
    )


def _bounded_consumers(job: Mapping[str, Any]) -> list[ConsumerView]:
    """One entry per label (a rank read twice is merged), at most the bound."""
    by_label: dict[str, list[ConsumerView]] = {}
    for consumer in job_view.consumers(job):
        by_label.setdefault(consumer.label, []).append(consumer)
    merged = [_merged(label, group) for label, group in by_label.items()]
    kept, folded = bounded(merged, MAX_CONSUMER_LABELS, lambda c: c.waited or 0)
    return [*kept, _merged(OTHER, folded)] if folded else kept


class _Families:
    """The families of one scrape, by name, filled job by job."""

    def __init__(self) -> None:
        self.all: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}

    def add(
        self,
        kind: str,
        name: str,
        documentation: str,
        labels: Sequence[str],
        values: Iterable[tuple[Sequence[str], float | None]],
    ) -> None:
        """Adds the samples whose value is known to family ``name`` (made once)."""
        family = self.all.get(name)
        if family is None:
            from prometheus_client import core

            make = (
                core.CounterMetricFamily
                if kind == "counter"
                else core.GaugeMetricFamily
            )
            family = make(name, documentation, labels=(*JOB_LABELS, *labels))
            self.all[name] = family
        for label_values, value in values:
            if value is not None:
                family.add_metric(list(label_values), value)


def _job(found: _Families, job: Mapping[str, Any]) -> None:
    job_id = job.get("job_id")
    name = job.get("job_name")
    ids = (str(job_id), name if isinstance(name, str) else "")
    found.add(
        "counter",
        "zmqdata_job_elements",
        "Elements the job's tasks served (over its workers' latest reports).",
        (),
        [(ids, job_view.number(job.get("elements")))],
    )
    ops = _bounded_ops(job)
    found.add(
        "counter",
        "zmqdata_job_op_seconds",
        "Seconds spent in the op's own code, over the job's workers and threads.",
        ("op",),
        [((*ids, op.label), op.own_s) for op in ops],
    )
    found.add(
        "counter",
        "zmqdata_job_op_elements",
        "Elements the op produced, over the job's workers.",
        ("op",),
        [((*ids, op.label), op.elements) for op in ops],
    )
    found.add(
        "gauge",
        "zmqdata_job_op_busy_ratio",
        "Fraction of the op's threads' time spent working (ops with threads).",
        ("op",),
        [((*ids, op.label), op.busy) for op in ops],
    )
    consumers = _bounded_consumers(job)
    for metric, documentation, value in CONSUMER_SERIES:
        found.add(
            "gauge",
            metric,
            documentation,
            ("consumer",),
            [((*ids, c.label), value(c)) for c in consumers],
        )
    verdict = job_view.bottleneck(job)
    if verdict is not None:
        found.add(
            "gauge",
            "zmqdata_job_bottleneck",
            "1 for the job's current bottleneck kind, 0 for the others.",
            ("kind",),
            [((*ids, kind), float(kind == verdict.kind)) for kind in job_view.KINDS],
        )


def families(status: Mapping[str, Any]) -> list[Metric]:
    """The job series of a ``get_status`` dict (families without samples left out)."""
    found = _Families()
    jobs = status.get("jobs")
    for job in jobs if isinstance(jobs, list) else []:
        if isinstance(job, Mapping) and isinstance(job.get("job_id"), int):
            _job(found, job)
    return [family for family in found.all.values() if family.samples]
