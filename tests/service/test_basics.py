"""The service's basic contract: OFF vs DYNAMIC, order, map placement, repeat."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, ints
from tests.helpers import poll_for, scrape
from zmqdata import errors, service


def test_module_docstring_example(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(6).apply(service.distribute("distributed_epoch", c.target))
    assert sorted(ints(ds)) == [0, 1, 2, 3, 4, 5]


def test_parallel_epochs_every_worker_produces_the_whole_dataset(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(10).apply(service.distribute("parallel_epochs", c.target))
    assert Counter(ints(ds)) == {i: 2 for i in range(10)}


@pytest.mark.parametrize("mode", ["distributed_epoch", service.ShardingPolicy.DYNAMIC])
def test_distributed_epoch_produces_each_element_once(cluster, mode):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(300).apply(service.distribute(mode, c.target))
    assert sorted(ints(ds)) == list(range(300))


def test_map_before_distribute_runs_on_workers_and_after_it_locally(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(5).map(lambda x: x * 10)
    ds = ds.apply(service.distribute("parallel_epochs", c.target))
    assert sorted(ints(ds.map(lambda x: x + 1))) == [1, 11, 21, 31, 41]


def test_map_after_distribute_with_two_workers(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(4).apply(service.distribute("parallel_epochs", c.target))
    ds = ds.map(lambda x: -x).filter(lambda x: x != -3)
    assert Counter(ints(ds)) == {0: 2, -1: 2, -2: 2}


@pytest.mark.parametrize("mode", ["parallel_epochs", "distributed_epoch"])
def test_one_worker_preserves_order(cluster, mode):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(500).map(lambda x: x * 3)
    ds = ds.apply(service.distribute(mode, c.target))
    assert ints(ds) == [x * 3 for x in range(500)]


def test_elements_keep_their_numpy_types(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(3).apply(service.distribute("parallel_epochs", c.target))
    assert_bit_equal(list(ds), list(zd.Dataset.range(3)))


def test_empty_dataset_ends_at_once(cluster):
    c = cluster(num_workers=2)
    for mode in ("parallel_epochs", "distributed_epoch"):
        ds = zd.Dataset.range(0).apply(service.distribute(mode, c.target))
        assert list(ds) == []


@pytest.mark.parametrize("job_name", [None, "passes"])
def test_repeat_after_distribute_gives_full_passes(cluster, job_name):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(7).apply(
        service.distribute("parallel_epochs", c.target, job_name=job_name)
    )
    assert ints(ds.repeat(3)) == list(range(7)) * 3


def test_repeat_after_distribute_with_two_dynamic_workers(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(20).apply(service.distribute("distributed_epoch", c.target))
    assert Counter(ints(ds.repeat(3))) == {i: 3 for i in range(20)}


def test_repeat_before_distributed_epoch_sees_each_element_per_repetition(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(10).repeat(3)
    ds = ds.apply(service.distribute("distributed_epoch", c.target))
    assert Counter(ints(ds)) == {i: 3 for i in range(10)}


def test_repeat_before_distributed_epoch_larger(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(1000).shuffle(50, seed=1).repeat(2).map(lambda x: x + 1)
    ds = ds.apply(service.distribute("distributed_epoch", c.target))
    assert Counter(ints(ds)) == {i: 2 for i in range(1, 1001)}


def test_take_of_an_infinite_distributed_dataset(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(5).repeat()
    ds = ds.apply(service.distribute("parallel_epochs", c.target)).take(12)
    got = ints(ds)
    assert len(got) == 12
    assert set(got) <= set(range(5))


# ------------------------------------------------------------------ dataset ids


def test_register_dataset_returns_a_stable_str_id(cluster):
    c = cluster(num_workers=1)
    first = service.register_dataset(c.target, zd.Dataset.range(10))
    assert isinstance(first, str)
    assert service.register_dataset(c.target, zd.Dataset.range(10)) == first
    assert service.register_dataset(c.target, zd.Dataset.range(11)) != first
    named = service.register_dataset(c.target, zd.Dataset.range(12), dataset_id="mine")
    assert named == "mine"
    again = service.register_dataset(c.target, zd.Dataset.range(12), dataset_id="mine")
    assert again == "mine"
    with pytest.raises(errors.InvalidArgumentError, match="'mine'"):
        service.register_dataset(c.target, zd.Dataset.range(13), dataset_id="mine")


def test_from_dataset_id_without_element_spec_fetches_it(cluster):
    c = cluster(num_workers=1)
    source = zd.Dataset.from_tensor_slices(
        {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "ok": np.ones(3, bool)}
    )
    dataset_id = service.register_dataset(c.target, source)
    ds = service.from_dataset_id("parallel_epochs", c.target, dataset_id)
    assert ds.element_spec == source.element_spec
    assert_bit_equal(list(ds), list(source))


def test_from_dataset_id_with_element_spec_uses_it(cluster):
    c = cluster(num_workers=1)
    dataset_id = service.register_dataset(c.target, zd.Dataset.range(4))
    spec = zd.Dataset.range(1).element_spec
    ds = service.from_dataset_id(
        "distributed_epoch", c.target, dataset_id, element_spec=spec
    )
    assert ds.element_spec == spec
    assert sorted(ints(ds)) == [0, 1, 2, 3]


def test_from_dataset_id_of_an_unknown_id_is_not_found(cluster):
    c = cluster(num_workers=1)
    with pytest.raises(errors.NotFoundError, match="no-such-id"):
        service.from_dataset_id("parallel_epochs", c.target, "no-such-id")


def test_unknown_id_with_element_spec_fails_at_once(cluster):
    c = cluster(num_workers=1)
    with pytest.raises(errors.NotFoundError, match="4711"):
        service.from_dataset_id(
            "parallel_epochs",
            c.target,
            "4711",
            element_spec=zd.Dataset.range(1).element_spec,
        )


def test_from_dataset_id_knows_an_infinite_dataset(cluster):
    c = cluster(num_workers=1)
    for dataset, expected in (
        (zd.Dataset.range(3).repeat(), zd.INFINITE_CARDINALITY),
        (zd.Dataset.range(3), zd.UNKNOWN_CARDINALITY),
    ):
        dataset_id = service.register_dataset(c.target, dataset)
        read = service.from_dataset_id("parallel_epochs", c.target, dataset_id)
        assert read.cardinality() == expected
        spec = zd.Dataset.range(1).element_spec
        given = service.from_dataset_id(
            "parallel_epochs", c.target, dataset_id, element_spec=spec
        )
        assert given.cardinality() == expected


def test_dynamic_sharding_of_an_unsplittable_pipeline_is_an_error(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.from_generator(lambda: iter(range(3)))
    ds = ds.apply(service.distribute("distributed_epoch", c.target))
    with pytest.raises(errors.InvalidArgumentError, match="from_generator"):
        list(ds)


# ------------------------------------------------------------------ status


def test_get_status_shows_workers_datasets_and_jobs(cluster):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(3).apply(
        service.distribute("distributed_epoch", c.target, job_name="shown")
    )
    assert sorted(ints(ds)) == [0, 1, 2]
    status = service.get_status(c.target)
    workers = sorted(status["workers"], key=lambda w: w["address"])
    expected = sorted(w.address.split("://", 1)[1] for w in c.workers)
    assert [w["address"] for w in workers] == expected
    assert all(isinstance(w["num_tasks"], int) and w["num_tasks"] >= 0 for w in workers)
    [dataset] = status["datasets"]
    assert isinstance(dataset["dataset_id"], str)
    [job] = status["jobs"]
    assert job["job_name"] == "shown"
    assert job["dataset_id"] == dataset["dataset_id"]
    assert job["processing_mode"] == "distributed_epoch"
    assert job["num_consumers"] is None
    assert job["finished"] is True


def test_get_status_counts_running_tasks(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(10_000).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=1)
    )
    with iter(ds) as it:
        next(it)
        [worker] = c.status()["workers"]
        assert worker["num_tasks"] == 1
        [job] = c.status()["jobs"]
        assert job["job_name"] is None
        assert job["processing_mode"] == "parallel_epochs"
        assert job["finished"] is False


def test_get_status_counts_the_records_of_each_table(cluster):
    """``records``: table sizes, what leak checks compare; ``index``: static only."""
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(10_000).apply(service.distribute("parallel_epochs", c.target))
    with iter(ds) as it:
        next(it)
        status = c.status()
        assert status["records"] == {
            "workers": 1,
            "datasets": 1,
            "jobs": 1,
            "iterations": 1,
            "tasks": 1,
            "clients": 1,
        }
        assert [w["index"] for w in status["workers"]] == [None]
    # The unnamed job goes with its only consumer; the dataset and worker stay.
    poll_for(lambda: c.status()["records"]["jobs"] == 0)
    records = c.status()["records"]
    assert (records["iterations"], records["clients"]) == (0, 0)
    assert (records["workers"], records["datasets"]) == (1, 1)


def test_with_default_settings_a_read_outlives_client_timeout(cluster, monkeypatch):
    """The default client heartbeat (100 ms) keeps a long read registered."""
    monkeypatch.delenv("ZMQDATA_CLIENT_HEARTBEAT_MS")  # set short by conftest
    c = cluster(num_workers=1, client_timeout_ms=400)
    ds = zd.Dataset.range(10).apply(
        service.distribute("parallel_epochs", c.target, max_outstanding_requests=1)
    )
    got = []
    with iter(ds) as iterator:
        for element in iterator:
            got.append(int(element))
            deadline = time.monotonic() + 0.15  # 10 x 150 ms: ~4 client timeouts
            poll_for(lambda d=deadline: time.monotonic() >= d, interval=0.02)
    assert got == list(range(10))


def test_cheap_file_splits_are_handed_out_in_batches_exactly_once(cluster, tmp_path):
    """One small file per split: workers ask for several per round trip."""
    paths = []
    for k in range(1000):
        path = tmp_path / f"{k}.txt"
        path.write_text(str(k))
        paths.append(str(path))
    c = cluster(num_workers=2, dispatcher_options={"metrics_port": 0})
    ds = zd.Dataset.list_files(paths, shuffle=False).map(read_number)
    ds = ds.apply(service.distribute("distributed_epoch", c.target))
    assert sorted(ints(ds)) == list(range(1000))
    address = c.dispatcher.metrics_address
    assert address is not None
    counters = scrape(address)
    assert counters["zmqdata_dispatcher_splits_total"] == 1000
    # Every request counts (heartbeats too): far fewer than one per split.
    assert counters["zmqdata_dispatcher_requests_total"] < 500


def read_number(path: Any) -> Any:
    return np.int64(Path(str(path)).read_text())


@pytest.mark.parametrize("exactly_once", [True, False])
@pytest.mark.parametrize(
    "make_nothing",
    [
        lambda ds: ds.filter(lambda x: x < 0),
        lambda ds: ds.flat_map(lambda x: zd.Dataset.range(0)),  # split runs
    ],
    ids=["filter", "flat_map"],
)
def test_an_endless_repeat_of_nothing_ends_as_it_does_locally(
    cluster, exactly_once, make_nothing
):
    c = cluster(num_workers=2)
    ds = make_nothing(zd.Dataset.range(40)).repeat()
    assert list(ds) == []  # locally (as tf.data)
    ds = ds.apply(
        service.distribute("distributed_epoch", c.target, exactly_once=exactly_once)
    )
    assert list(ds) == []


def test_an_endless_repeat_of_one_element_on_more_workers_than_splits_goes_on(cluster):
    c = cluster(num_workers=3)
    ds = zd.Dataset.range(1).filter(lambda x: x == 0).repeat()
    ds = ds.apply(service.distribute("distributed_epoch", c.target)).take(30)
    assert ints(ds) == [0] * 30
