"""Cross-trainer cache: trainers with different ids share one job's stream."""

from __future__ import annotations

import pytest

import zmqdata as zd
from zmqdata import errors, service
from zmqdata._client import rpc
from zmqdata._wire import messages as m


def trainer(target: str, trainer_id: str, name: str = "cache", **options) -> zd.Dataset:
    return (
        zd.Dataset.range(1 << 40)
        .repeat()
        .apply(
            service.distribute(
                "parallel_epochs",
                target,
                job_name=name,
                cross_trainer_cache=service.CrossTrainerCache(trainer_id),
                **options,
            )
        )
    )


def take(iterator, count: int) -> list[int]:
    return [int(next(iterator)) for _ in range(count)]


def test_two_trainer_ids_each_see_the_whole_stream(cluster):
    c = cluster(num_workers=1)
    with iter(trainer(c.target, "a")) as a, iter(trainer(c.target, "b")) as b:
        assert take(a, 10) == list(range(10))
        assert take(b, 10) == list(range(10))


def test_the_same_trainer_id_twice_splits_the_stream(cluster):
    c = cluster(num_workers=1)
    with iter(trainer(c.target, "a", max_outstanding_requests=1)) as first:
        assert take(first, 10) == list(range(10))
        with iter(trainer(c.target, "a", max_outstanding_requests=1)) as second:
            continued = take(second, 5)
    assert continued[0] > 9
    assert continued == list(range(continued[0], continued[0] + 5))


def test_a_slow_trainer_jumps_to_the_window_start_with_a_tiny_cache(cluster):
    # A scalar counts 16 bytes: the window holds 10 elements.
    c = cluster(num_workers=1, cross_trainer_cache_size_bytes=160)
    with iter(trainer(c.target, "fast", max_outstanding_requests=1)) as fast:
        assert take(fast, 100) == list(range(100))
        with iter(trainer(c.target, "slow", max_outstanding_requests=1)) as slow:
            late = take(slow, 10)
    assert late[0] >= 85  # skipped what fell out of the window ...
    assert late == list(range(late[0], late[0] + 10))  # ... yet got all it asked for


def test_twenty_trainers_in_lockstep_see_element_i_at_step_i(cluster):
    c = cluster(num_workers=1)
    iterators = [iter(trainer(c.target, f"t{i}")) for i in range(20)]
    try:
        for step in range(30):
            assert {int(next(it)) for it in iterators} == {step}
    finally:
        for it in iterators:
            it.close()


def test_cross_trainer_cache_needs_a_job_name():
    with pytest.raises(errors.InvalidArgumentError, match="job_name"):
        service.distribute(
            "parallel_epochs",
            "localhost:1",
            cross_trainer_cache=service.CrossTrainerCache("a"),
        )


def test_cross_trainer_cache_needs_an_infinite_dataset(cluster):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(10).apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            job_name="finite",
            cross_trainer_cache=service.CrossTrainerCache("a"),
        )
    )
    with pytest.raises(errors.InvalidArgumentError, match="infinite cardinality"):
        next(iter(ds))


def test_cross_trainer_cache_with_coordinated_reads_is_refused(cluster):
    """It used to hang; now refused before any read, and by the dispatcher too."""
    with pytest.raises(errors.InvalidArgumentError, match="coordinated"):
        service.distribute(
            "parallel_epochs",
            "localhost:1",
            job_name="j",
            consumer_index=0,
            num_consumers=2,
            cross_trainer_cache=service.CrossTrainerCache("a"),
        )
    c = cluster(num_workers=1)
    dataset_id = service.register_dataset(c.target, zd.Dataset.range(5).repeat())
    request = m.GetOrCreateJob(
        dataset_id=dataset_id,
        processing_mode=0,
        job_name="j",
        num_consumers=2,
        cross_trainer_cache=True,
    )
    with pytest.raises(errors.InvalidArgumentError, match="coordinated"):
        rpc.call(c.target, request, m.GetOrCreateJobReply, 5.0)
