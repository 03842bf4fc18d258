"""Consumers sharing a named job each get a share (tf.data's shared job name tests)."""

from __future__ import annotations

from collections.abc import Callable

import zmqdata as zd
from tests.service.cluster import Cluster
from zmqdata import service


def _shared(target: str, n: int, job_name: str = "shared") -> zd.Dataset:
    """A new dataset object reading ``range(n)`` from the job ``job_name``."""
    return zd.Dataset.range(n).apply(
        service.distribute("parallel_epochs", target, job_name=job_name)
    )


def test_shared_job_name(cluster: Callable[..., Cluster]) -> None:
    target = cluster(num_workers=1).target
    first, second = iter(_shared(target, 1000)), iter(_shared(target, 1000))
    got: tuple[list[int], list[int]] = ([], [])
    for _ in range(100):
        got[0].append(int(next(first)))
        got[1].append(int(next(second)))
    got[0].extend(int(x) for x in first)
    got[1].extend(int(x) for x in second)
    assert all(got), "a consumer got nothing"
    assert sorted(got[0] + got[1]) == list(range(1000))


def test_shared_job_name_repeat(cluster: Callable[..., Cluster]) -> None:
    target = cluster(num_workers=1).target
    first = iter(_shared(target, 100).repeat(3))
    second = iter(_shared(target, 100).repeat(3))
    results = [int(next(first)) for _ in range(60)]
    results += [int(next(second)) for _ in range(60)]
    results += [int(x) for x in first]
    results += [int(x) for x in second]
    assert sorted(results) == sorted(3 * list(range(100)))


def test_a_late_consumers_endless_repeat_moves_on_to_later_iterations(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster(num_workers=1).target
    with iter(_shared(target, 100).repeat()) as early:
        for _ in range(250):  # iterations 0 and 1 drained, 2 under way
            next(early)
        with iter(_shared(target, 100).repeat()) as late:
            # Its iterations 0 and 1 are empty: it goes on to iteration 2.
            assert len([next(late) for _ in range(300)]) == 300
