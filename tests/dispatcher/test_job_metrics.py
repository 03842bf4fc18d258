"""Per-op and per-consumer series from hand-made status dicts (pure)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests import job_status as js
from zmqdata._dispatcher import job_metrics
from zmqdata._dispatcher.job_metrics import MAX_CONSUMER_LABELS, MAX_OP_LABELS


def samples(status: dict[str, Any], name: str) -> dict[tuple[str, ...], float]:
    """``{label values after job_id, job_name: value}`` of one series, via the
    text exposition (so what is checked is what Prometheus reads)."""

    class Collector:
        def collect(self) -> Any:
            return job_metrics.families(status)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                labels = dict(sample.labels)
                ids = (labels.pop("job_id"), labels.pop("job_name"))
                found[(*ids, *labels.values())] = sample.value
    return found


def test_op_series_carry_own_seconds_elements_and_busy_of_threaded_ops():
    status = js.status(js.job())
    assert samples(status, "zmqdata_job_op_seconds_total") == {
        ("3", "train", "range"): 0.5,
        ("3", "train", "map(load)"): 15.6,
        ("3", "train", "batch"): 2.0,
    }
    assert samples(status, "zmqdata_job_op_elements_total") == {
        ("3", "train", "range"): 1000,
        ("3", "train", "map(load)"): 1001,
        ("3", "train", "batch"): 1002,
    }
    assert samples(status, "zmqdata_job_op_busy_ratio") == {
        ("3", "train", "map(load)"): 0.96
    }
    assert samples(status, "zmqdata_job_elements_total") == {("3", "train"): 2000}


def test_consumer_series_are_labelled_by_rank_else_client_id():
    job = js.job(consumers=[js.consumer(7, 0, 0.4), js.consumer(9, None, 0.2)])
    status = js.status(job)
    assert samples(status, "zmqdata_job_consumer_wait_ratio") == {
        ("3", "train", "0"): 0.4,
        ("3", "train", "client-9"): 0.2,
    }
    assert samples(status, "zmqdata_job_consumer_elements_per_second") == {
        ("3", "train", "0"): 120.0,
        ("3", "train", "client-9"): 120.0,
    }
    assert samples(status, "zmqdata_job_consumer_lag_elements") == {
        ("3", "train", "0"): 3,
        ("3", "train", "client-9"): 3,
    }


def test_bottleneck_is_one_for_the_current_kind_only():
    got = samples(js.status(js.job()), "zmqdata_job_bottleneck")
    assert got == {
        ("3", "train", "input-bound"): 1,
        ("3", "train", "network-bound"): 0,
        ("3", "train", "trainer-bound"): 0,
        ("3", "train", "balanced"): 0,
        ("3", "train", "unknown"): 0,
    }
    odd = js.job(bottleneck={"kind": "gpu-bound; DROP", "line": 5})
    assert (
        samples(js.status(odd), "zmqdata_job_bottleneck")[("3", "train", "unknown")]
        == 1
    )


def test_past_the_bound_the_lightest_ops_are_summed_under_other():
    many = [js.op(f"map(f{i})", i, own_s=float(i)) for i in range(40)]
    got = samples(js.status(js.job(ops=many)), "zmqdata_job_op_seconds_total")
    assert len(got) == MAX_OP_LABELS
    kept = {f"map(f{i})" for i in range(40 - (MAX_OP_LABELS - 1), 40)}
    assert {labels[2] for labels in got} == {*kept, "other"}
    assert got[("3", "train", "other")] == sum(range(40 - (MAX_OP_LABELS - 1)))
    assert sum(got.values()) == sum(range(40))


def test_past_the_bound_consumers_fold_into_other_with_their_mean_wait():
    count = 100
    ranks = [js.consumer(100 + r, r, waited=r / 1000) for r in range(count)]
    status = js.status(js.job(consumers=ranks))
    waits = samples(status, "zmqdata_job_consumer_wait_ratio")
    assert len(waits) == MAX_CONSUMER_LABELS
    folded = range(count - (MAX_CONSUMER_LABELS - 1))  # the ones that waited least
    assert ("3", "train", str(count - 1)) in waits
    assert ("3", "train", "0") not in waits
    assert waits[("3", "train", "other")] == pytest.approx(
        sum(r / 1000 for r in folded) / len(folded)
    )
    rates = samples(status, "zmqdata_job_consumer_elements_per_second")
    assert rates[("3", "train", "other")] == 120.0 * len(folded)


def test_a_name_used_by_two_ops_gets_their_index_and_a_rank_read_twice_merges():
    job = js.job(
        ops=[js.op("map(<lambda>)", 1, 1.0), js.op("map(<lambda>)", 2, 2.0)],
        consumers=[js.consumer(7, 0, 0.2, lag=1), js.consumer(8, 0, 0.4, lag=9)],
    )
    status = js.status(job)
    assert samples(status, "zmqdata_job_op_seconds_total") == {
        ("3", "train", "map(<lambda>)#1"): 1.0,
        ("3", "train", "map(<lambda>)#2"): 2.0,
    }
    assert samples(status, "zmqdata_job_consumer_wait_ratio") == {
        ("3", "train", "0"): pytest.approx(0.3)
    }
    assert samples(status, "zmqdata_job_consumer_lag_elements") == {
        ("3", "train", "0"): 9
    }


def test_absent_or_malformed_values_are_skipped_not_fatal():
    job = js.job(
        name=None,
        ops=[
            {"op": "range", "index": 0, "own_s": "12", "elements": -1, "busy": True},
            {"index": 1, "own_s": 3.0},  # no name
            "not a dict",
            {"op": "map(f)", "index": 2, "own_s": float("nan"), "elements": 5},
        ],
        consumers=[{"waited": 0.5}, {"client_id": "7"}, {"consumer_index": 2}],
        phases="oops",
        bottleneck=None,
    )
    old = {"job_id": 4, "job_name": "old", "elements": 7}  # an old worker's job
    status = js.status(job, old, {"job_id": "x"}, "junk")
    assert samples(status, "zmqdata_job_op_seconds_total") == {}
    assert samples(status, "zmqdata_job_op_elements_total") == {("3", "", "map(f)"): 5}
    assert samples(status, "zmqdata_job_consumer_wait_ratio") == {}
    assert samples(status, "zmqdata_job_consumer_lag_elements") == {}
    assert samples(status, "zmqdata_job_bottleneck") == {}
    assert samples(status, "zmqdata_job_elements_total") == {
        ("3", ""): 2000,
        ("4", "old"): 7,
    }
    assert job_metrics.families({"jobs": "none"}) == []
    assert job_metrics.families({}) == []


def test_two_jobs_share_each_family():
    status = js.status(js.job("a", 1), js.job("b", 2))
    names = [family.name for family in job_metrics.families(status)]
    assert len(names) == len(set(names))
    got = samples(status, "zmqdata_job_op_busy_ratio")
    assert got == {("1", "a", "map(load)"): 0.96, ("2", "b", "map(load)"): 0.96}
