"""``padded_batch``, ``bucket_by_sequence_length`` and ``pack`` on workers and in the trainer.

Before ``distribute`` they run on the workers and give the local run's
elements; under ``distributed_epoch`` a worker lost while it holds partial
buckets or open rows loses none of their tokens, and repeats none delivered.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal
from tests.helpers import poll_for
from zmqdata import service

N = 400


def sequence(x):
    """Source element ``x`` as ``x % 7 + 1`` tokens, ``10 x, 10 x + 1, ...``."""
    return np.arange(10 * x, 10 * x + x % 7 + 1, dtype=np.int32)


def tokens():
    return zd.Dataset.range(N).map(sequence)


OPS = {
    "padded_batch": lambda ds: ds.padded_batch(4, padding_values=-1),
    "bucket_by_sequence_length": lambda ds: ds.bucket_by_sequence_length(
        len, [3, 5], [3, 4, 2], padding_values=-1
    ),
    "pack": lambda ds: ds.pack(16, num_open_rows=4).batch(2),
}


def delivered(element):
    """The tokens an element of ``OPS`` holds (not its padding)."""
    if isinstance(element, dict):
        return element["tokens"][element["segment_ids"] > 0].tolist()
    return element[element >= 0].tolist()


@pytest.mark.parametrize("name", sorted(OPS))
def test_on_the_workers_the_elements_are_the_local_ones(cluster, name):
    c = cluster(num_workers=1)
    local = list(OPS[name](tokens()))
    for mode in ("parallel_epochs", "distributed_epoch"):
        remote = OPS[name](tokens()).apply(service.distribute(mode, c.target))
        assert_bit_equal(list(remote), local)


@pytest.mark.parametrize("name", sorted(OPS))
def test_after_distribute_they_run_in_the_trainer(cluster, name):
    c = cluster(num_workers=1)
    remote = OPS[name](
        tokens().apply(service.distribute("distributed_epoch", c.target))
    )
    assert_bit_equal(list(remote), list(OPS[name](tokens())))


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_token_once_when_a_worker_stops_while_holding_some(cluster, name):
    c = cluster(num_workers=2)
    ds = OPS[name](tokens()).apply(
        service.distribute("distributed_epoch", c.target, max_outstanding_requests=2)
    )
    got: list[int] = []
    with iter(ds) as it:
        for _ in range(10):
            got += delivered(next(it))
        c.stop_worker(0)
        poll_for(lambda: c.num_registered_workers() == 1, timeout=10)
        for element in it:
            got += delivered(element)
    counts = Counter(got)
    assert not {t: n for t, n in counts.items() if n > 1}, "tokens repeated"
    assert sorted(counts) == sorted(t for x in range(N) for t in sequence(x).tolist())


def test_a_read_that_packs_in_the_trainer_saves_its_open_rows(cluster):
    c = cluster(num_workers=1)

    def read():
        return (
            tokens()
            .apply(service.distribute("distributed_epoch", c.target))
            .pack(16, num_open_rows=4)
        )

    whole = list(read())
    with iter(read()) as it:
        head = [next(it) for _ in range(7)]
        state = it.save()
    with iter(read()) as it:
        it.restore(state)
        tail = list(it)
    assert_bit_equal(head + tail, whole)


def test_the_bucketing_example_gives_every_replica_the_same_width(capsys):
    from examples import bucketing

    bucketing.main()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == bucketing.STEPS
    for line in lines:
        widths = line.rsplit("[", 1)[1].rstrip("]").split(", ")
        assert len(set(widths)) == 1, line
