"""Mixtures on the service: on the workers, and of several ``distribute``d reads.

Before ``distribute`` a mixture runs on the workers like any op (it is not
splittable: ``distributed_epoch`` refuses it, naming it). After it, in the
trainer, a mixture of ``distributed_epoch`` reads gets each read's elements
exactly once, also when a worker stops, and resumes with the same choices.
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal, ints
from tests.helpers import poll_for
from zmqdata import service
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(60)

A, B = range(300), range(1_000, 1_200)
EVERY_ONCE = {x: 1 for x in (*A, *B)}


def mixtures() -> dict[str, zd.Dataset]:
    a = zd.Dataset.range(A.start, A.stop).map(lambda x: x * 2)
    b = zd.Dataset.range(B.start, B.stop)
    return {
        "sample": zd.Dataset.sample_from_datasets(
            [a, b], weights=[0.7, 0.3], seed=3
        ).batch(8),
        "choose": zd.Dataset.choose_from_datasets(
            [a, b], zd.Dataset.range(3).map(lambda x: x % 2).repeat(), False
        ),
    }


@pytest.mark.parametrize("name", ["sample", "choose"])
def test_a_mixture_before_distribute_runs_on_a_worker_as_it_runs_locally(cluster, name):
    c = cluster(num_workers=1)
    mixture = mixtures()[name]
    ds = mixture.apply(service.distribute("parallel_epochs", c.target))
    assert_bit_equal(list(ds), list(mixture))


def test_distributed_epoch_refuses_a_mixture_before_distribute_naming_it(cluster):
    c = cluster(num_workers=1)
    ds = mixtures()["sample"].apply(service.distribute("distributed_epoch", c.target))
    with pytest.raises(
        InvalidArgumentError, match="op 'sample_from_datasets' has 2 inputs"
    ):
        list(ds)


def read(c, values: range, **options) -> zd.Dataset:
    ds = zd.Dataset.range(values.start, values.stop)
    return ds.apply(service.distribute("distributed_epoch", c.target, **options))


def mix_reads(c, **options) -> zd.Dataset:
    return zd.Dataset.sample_from_datasets(
        [read(c, A, **options), read(c, B, **options)], weights=[0.6, 0.4], seed=1
    )


def from_b(elements: list[int]) -> list[bool]:
    return [x in B for x in elements]


def test_a_mixture_of_distributed_reads_gets_each_element_once(cluster):
    c = cluster(num_workers=2)
    assert Counter(ints(mix_reads(c))) == EVERY_ONCE
    choose = zd.Dataset.choose_from_datasets(
        [read(c, A), read(c, B)], zd.Dataset.range(2).repeat(), False
    )
    out = ints(choose)
    assert Counter(out) == EVERY_ONCE
    assert from_b(out[:400]) == [False, True] * 200  # then only A is left


def test_a_mixture_of_distributed_reads_resumes_with_the_same_choices(cluster):
    c = cluster(num_workers=2)
    whole = from_b(ints(mix_reads(c)))  # which read each step takes: the seed's
    with iter(mix_reads(c)) as it:
        before = ints(itertools.islice(it, 137))
        state = it.save()
        ints(itertools.islice(it, 20))  # consumed after the save: comes again
    with iter(mix_reads(c)) as resumed:
        resumed.restore(state)
        after = ints(resumed)
    assert Counter(before + after) == EVERY_ONCE
    assert from_b(before + after) == whole


def test_a_mixture_of_distributed_reads_stays_exactly_once_when_a_worker_stops(
    cluster,
):
    c = cluster(num_workers=2)
    with iter(mix_reads(c, max_outstanding_requests=2)) as it:
        got = ints(itertools.islice(it, 60))
        c.stop_worker(0)
        poll_for(lambda: c.num_registered_workers() == 1, timeout=10)
        got += ints(it)
    assert Counter(got) == EVERY_ONCE
