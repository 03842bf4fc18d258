"""Job GC: an iteration nobody reads is dropped after ``job_gc_timeout_ms``."""

from __future__ import annotations

from typing import Any

import zmqdata as zd
from tests.dataset.checks import ints
from tests.helpers import poll_for
from zmqdata import service

GC = {"job_gc_check_interval_ms": 50, "job_gc_timeout_ms": 200}
N = 5_000


def named(target: str, mode: str = "parallel_epochs") -> zd.Dataset:
    """A new dataset object each time: its first iter() joins repetition 0."""
    return zd.Dataset.range(N).apply(service.distribute(mode, target, job_name="gc"))


def test_an_abandoned_job_is_collected_and_starts_afresh(cluster):
    c = cluster(1, client_timeout_ms=200, dispatcher_options=GC)
    [worker] = c.workers
    with iter(named(c.target)) as it:
        head = [int(next(it)) for _ in range(10)]
        assert head == list(range(10))
        assert len(worker.stats()["tasks"]) == 1
    # The consumer went away mid-iteration: after the GC timeout its task goes.
    poll_for(lambda: len(worker.stats()["tasks"]) == 0)
    [job] = c.status()["jobs"]
    assert job["num_iterations"] == 0
    assert not job["finished"]
    # The same job name again: a fresh iteration, from element 0.
    assert ints(named(c.target)) == list(range(N))


def test_a_dynamic_job_is_not_collected(cluster):
    c = cluster(1, client_timeout_ms=200, dispatcher_options=GC)
    [worker] = c.workers

    def job(name: str) -> dict[str, Any]:
        [shown] = [j for j in c.status()["jobs"] if j["job_name"] == name]
        return shown

    canary = zd.Dataset.range(N).apply(
        service.distribute("parallel_epochs", c.target, job_name="canary")
    )
    with iter(canary) as reading:
        next(reading)
        with iter(named(c.target, "distributed_epoch")) as it:
            first = int(next(it))
        poll_for(lambda: job("gc")["num_clients"] == 0)
    # The canary's consumer left after the dynamic one's: the GC check that
    # collects the canary also looked at the dynamic iteration, past its timeout.
    poll_for(lambda: job("canary")["num_iterations"] == 0)
    assert job("gc")["num_iterations"] == 1
    assert not job("gc")["finished"]
    poll_for(lambda: len(worker.stats()["tasks"]) == 1)  # the canary's task goes
    # A later consumer continues the same iteration: no split is handed out twice.
    rest = ints(named(c.target, "distributed_epoch"))
    assert first not in rest
    assert len(rest) < N


def test_an_abandoned_unnamed_iterator_frees_its_job_and_buffers_at_once(cluster):
    """No job GC wait (default 300 s): nobody can join an unnamed job again."""
    c = cluster(2)
    for mode in ("parallel_epochs", "distributed_epoch"):
        ds = zd.Dataset.range(10**6).apply(service.distribute(mode, c.target))
        for element in ds:  # a `break` out of the training loop
            assert int(element) >= 0
            break
        poll_for(lambda: c.status()["jobs"] == [])
        poll_for(lambda: all(len(w.stats()["tasks"]) == 0 for w in c.workers))
        assert all(w.stats()["buffered_elements"] == 0 for w in c.workers)
