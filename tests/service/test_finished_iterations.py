"""Joining an iteration that has already finished: an error, never 0 silent steps.

A multi-rank read (``num_consumers``) run again under the job name of a run
that read its iteration to the end is refused, naming the job; a first-come
consumer keeps the k-th iteration rule (it gets nothing of an iteration
already drained) and is warned. The legitimate joins still read.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from tests.service.cluster import Cluster
from tests.service.logs import warnings_from
from tests.service.test_multirank import (
    PLAIN,
    Opened,
    fresh,
    on_ranks,
    rank_dataset,
    read,
)
from zmqdata import errors, service


def test_a_multi_rank_run_again_under_a_finished_jobs_name_is_refused(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster(num_workers=2).target
    name = fresh("again")
    first = read(target, PLAIN, 2, name=name)
    assert [len(stream) for stream in first] == [200, 200]
    with pytest.raises(errors.FailedPreconditionError) as caught:
        read(target, PLAIN, 2, name=name)
    message = str(caught.value)
    assert f"iteration 0 of job {name!r} has already finished" in message
    assert "all its 2 consumers read it to the end" in message
    assert "fresh job_name" in message


def test_ranks_repeating_one_job_read_every_epoch(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster(num_workers=2).target
    name = fresh("epochs")

    def body(r: int, opened: Opened) -> list[int]:
        dataset = rank_dataset(target, PLAIN, 2, r, name, seed=7)
        return [int(x) for _ in range(2) for x in opened(dataset)]

    streams = on_ranks(2, body)
    assert sorted(streams[0] + streams[1]) == sorted(2 * list(range(400)))
    with pytest.raises(errors.FailedPreconditionError, match="iteration 0 of job"):
        read(target, PLAIN, 2, name=name)


def test_a_first_come_consumer_of_a_drained_iteration_is_warned(
    cluster: Callable[..., Cluster], caplog: pytest.LogCaptureFixture
) -> None:
    target = cluster(num_workers=1).target

    def consumer() -> zd.Dataset:
        return zd.Dataset.range(20).apply(
            service.distribute("distributed_epoch", target, job_name="once")
        )

    assert sorted(ints(consumer())) == list(range(20))
    assert warnings_from(caplog, "zmqdata.client") == []
    assert ints(consumer()) == []  # the k-th iteration rule: iteration 0 is drained
    (warning,) = warnings_from(caplog, "zmqdata.client")
    assert "iteration 0 of job 'once' was drained by other consumers" in warning
    assert "fresh job_name" in warning
