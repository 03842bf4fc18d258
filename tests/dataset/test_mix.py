"""``Dataset.sample_from_datasets`` and ``Dataset.choose_from_datasets``."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zmqdata as zd
from tests.dataset.checks import assert_state_roundtrip, ints
from tests.dataset.test_lineage import (
    SPLITS,
    check_invariant,
    claimed,
    drive,
    key_of,
)
from zmqdata._dataset import graph
from zmqdata._dataset.ops.source import find_split_source
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.timeout(60)

INT64 = zd.TensorSpec((), np.dtype(np.int64))
INF, UNKNOWN = zd.INFINITE_CARDINALITY, zd.UNKNOWN_CARDINALITY
CHI2_CRITICAL_P001 = {1: 10.828, 2: 13.816}
"""Chi-square critical values at p = 0.001, by degrees of freedom."""


def sample(datasets, **options) -> zd.Dataset:
    return zd.Dataset.sample_from_datasets(datasets, **options)


def constant(value: int) -> zd.Dataset:
    return zd.Dataset.from_tensors(np.int64(value)).repeat()


def chi_square(observed: list[int], probabilities: list[float]) -> float:
    total = sum(observed)
    return sum(
        (o - total * p) ** 2 / (total * p)
        for o, p in zip(observed, probabilities, strict=True)
    )


def origins(elements: list[int], starts: list[int]) -> list[int]:
    """Which input each element came from: input ``k`` yields ``starts[k] + i``."""
    return [max(k for k, s in enumerate(starts) if x >= s) for x in elements]


# ---------------------------------------------------------------- tf.data's examples


def test_choose_from_datasets_tf_docs_example():
    datasets = [
        zd.Dataset.from_tensors("foo").repeat(),
        zd.Dataset.from_tensors("bar").repeat(),
        zd.Dataset.from_tensors("baz").repeat(),
    ]
    choice_dataset = zd.Dataset.range(3).repeat(3)  # [0, 1, 2, 0, 1, 2, 0, 1, 2]
    result = zd.Dataset.choose_from_datasets(datasets, choice_dataset)
    assert list(result) == ["foo", "bar", "baz", "foo", "bar", "baz", "foo", "bar",
                            "baz"]  # fmt: skip
    assert result.cardinality() == 9
    assert result.element_spec == zd.TensorSpec((), str)


def test_sample_from_datasets_tf_docs_example():
    dataset1 = zd.Dataset.range(0, 3)
    dataset2 = zd.Dataset.range(100, 103)
    for seed in range(20):
        out = ints(sample([dataset1, dataset2], weights=[0.5, 0.5], seed=seed))
        # tf.data: "One possible outcome ... [100, 0, 1, 101, 2, 102]"
        assert sorted(out) == [0, 1, 2, 100, 101, 102]
        assert [x for x in out if x < 100] == [0, 1, 2]  # each input keeps its order
        assert [x for x in out if x >= 100] == [100, 101, 102]
    out = sample([dataset1, dataset2], weights=[0.5, 0.5], seed=137)
    assert ints(out) == [100, 0, 1, 101, 2, 102]
    assert out.cardinality() == 6
    assert out.element_spec == INT64


# ---------------------------------------------------------------- distribution


def test_proportions_match_the_weights_chi_square():
    weights = [0.5, 0.3, 0.2]
    ds = sample([constant(0), constant(1), constant(2)], weights=weights, seed=0)
    counts = Counter(ints(ds.take(10_000)))
    statistic = chi_square([counts[k] for k in range(3)], weights)
    assert statistic < CHI2_CRITICAL_P001[2], (counts, statistic)


def test_weights_are_normalized():
    a = sample([constant(0), constant(1)], weights=[3, 1], seed=4).take(4_000)
    counts = Counter(ints(a))
    assert chi_square([counts[0], counts[1]], [0.75, 0.25]) < CHI2_CRITICAL_P001[1]
    uniform = Counter(ints(sample([constant(0), constant(1)], seed=4).take(4_000)))
    assert chi_square([uniform[0], uniform[1]], [0.5, 0.5]) < CHI2_CRITICAL_P001[1]


def test_an_ended_input_leaves_the_others_renormalized():
    """tf.data: with stop_on_empty_dataset=False an empty input is skipped."""
    ds = sample(
        [zd.Dataset.range(200), constant(1_000), constant(2_000)],
        weights=[0.5, 0.3, 0.2],
        seed=3,
    )
    out = ints(ds.take(8_000))
    last = out.index(199)
    assert sorted(x for x in out if x < 1_000) == list(range(200))
    after = Counter(x for x in out[last + 1 :])
    statistic = chi_square([after[1_000], after[2_000]], [0.6, 0.4])
    assert statistic < CHI2_CRITICAL_P001[1], (after, statistic)


# ---------------------------------------------------------------- seeds


def test_same_seed_same_sequence_every_pass():
    datasets = [zd.Dataset.range(50), zd.Dataset.range(100, 150)]
    ds = sample(datasets, weights=[0.7, 0.3], seed=11)
    first = ints(ds)
    assert first == ints(ds)
    assert first == ints(sample(datasets, weights=[0.7, 0.3], seed=11))
    assert first != ints(sample(datasets, weights=[0.7, 0.3], seed=12))
    assert ints(ds.repeat(2)) == first * 2  # tf.data: no new draw per epoch


def test_no_seed_draws_anew_each_pass():
    ds = sample([zd.Dataset.range(100), zd.Dataset.range(100, 200)])
    first, second = ints(ds), ints(ds)
    assert sorted(first) == sorted(second) == list(range(200))
    assert first != second  # equal with probability about 2**-100


# ---------------------------------------------------------------- ending


def test_stop_on_empty_dataset_ends_at_the_first_ended_input():
    datasets = [zd.Dataset.range(3), zd.Dataset.range(100, 200)]
    go_on = ints(sample(datasets, seed=5))
    stop = ints(sample(datasets, seed=5, stop_on_empty_dataset=True))
    assert len(go_on) == 103
    assert go_on[: len(stop)] == stop  # the same draws, up to the end
    assert 2 in stop  # input 0 ended, then was picked again
    assert len(stop) < 103
    assert sample(datasets, seed=5, stop_on_empty_dataset=True).cardinality() == UNKNOWN


def test_stop_on_empty_dataset_with_an_empty_input():
    datasets = [zd.Dataset.range(0), constant(7)]
    ds = sample(datasets, seed=1, stop_on_empty_dataset=True)
    out = ints(ds)
    assert set(out) <= {7}
    assert len(out) < 60  # ends when the empty one is picked
    assert ints(sample(datasets, seed=1).take(5)) == [7] * 5


def test_an_ended_mixture_stays_ended():
    it = iter(sample([zd.Dataset.range(1), zd.Dataset.range(1)], seed=0))
    assert sorted(ints([next(it), next(it)])) == [0, 0]
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(it)


def test_choose_stop_on_empty_dataset_both_ways():
    datasets = [zd.Dataset.range(2), zd.Dataset.range(10, 20)]
    choice = zd.Dataset.from_tensor_slices(np.array([0, 1, 0, 1, 0, 1, 0, 1]))
    stop = zd.Dataset.choose_from_datasets(datasets, choice)
    assert ints(stop) == [0, 10, 1, 11]  # the third 0 finds input 0 ended
    go_on = zd.Dataset.choose_from_datasets(
        datasets, choice, stop_on_empty_dataset=False
    )
    assert ints(go_on) == [0, 10, 1, 11, 12, 13]  # the later 0s are skipped
    every_input_ended = zd.Dataset.choose_from_datasets(
        [zd.Dataset.range(1), zd.Dataset.range(1)],
        zd.Dataset.range(2).repeat(),
        stop_on_empty_dataset=False,
    )
    assert ints(every_input_ended) == [0, 0]


# ---------------------------------------------------------------- weights of 0, specs


def test_an_input_of_weight_zero_is_never_read():
    def never():
        raise AssertionError("read an input of weight 0")
        yield  # pragma: no cover

    ds = sample(
        [zd.Dataset.range(5), zd.Dataset.from_generator(never), zd.Dataset.range(5)],
        weights=[1, 0, 1],
        seed=0,
        stop_on_empty_dataset=True,
    )
    assert len(ints(ds)) >= 5
    only = zd.Dataset.range(4)
    assert sample([only, constant(9)], weights=[2.0, 0.0])._node is only._node


def test_cardinality():
    fin, inf = zd.Dataset.range(3), constant(1)
    unknown = zd.Dataset.range(4).filter(lambda x: True)
    assert sample([fin, zd.Dataset.range(5)]).cardinality() == 8
    assert sample([fin, inf]).cardinality() == INF
    assert sample([fin, unknown]).cardinality() == UNKNOWN
    assert sample([inf, inf], stop_on_empty_dataset=True).cardinality() == INF
    assert sample([fin, inf], stop_on_empty_dataset=True).cardinality() == UNKNOWN
    choose = zd.Dataset.choose_from_datasets
    assert choose([inf, inf], zd.Dataset.range(2).repeat(4)).cardinality() == 8
    assert choose([inf, inf], zd.Dataset.range(2).repeat()).cardinality() == INF
    assert choose([fin, inf], zd.Dataset.range(2).repeat(4)).cardinality() == UNKNOWN
    assert choose([fin], zd.Dataset.range(0)).cardinality() == 0


def test_element_spec_is_the_common_spec():
    a = zd.Dataset.from_tensors({"x": np.zeros(2, np.float32)})
    b = zd.Dataset.from_tensors({"x": np.zeros(3, np.float32)})
    spec = {"x": zd.TensorSpec((None,), np.dtype(np.float32))}
    assert sample([a, b]).element_spec == spec
    assert zd.Dataset.choose_from_datasets(
        [a, b], zd.Dataset.range(2)
    ).element_spec == (spec)
    assert sample([a, a.map(lambda d: d)]).element_spec is None
    out = ints(zd.Dataset.choose_from_datasets([a, b], zd.Dataset.range(2)))
    assert out == [{"x": [0.0, 0.0]}, {"x": [0.0, 0.0, 0.0]}]


# ---------------------------------------------------------------- state


@pytest.mark.parametrize(
    "build",
    [
        lambda: sample([zd.Dataset.range(6), zd.Dataset.range(10, 16)], seed=2),
        lambda: sample([zd.Dataset.range(6), zd.Dataset.range(10, 30)]),  # no seed
        lambda: sample(
            [zd.Dataset.range(4), zd.Dataset.range(10, 30), zd.Dataset.range(50, 52)],
            weights=[0.2, 0.5, 0.3],
            seed=9,
            stop_on_empty_dataset=True,
        ),
        lambda: sample(
            [zd.Dataset.range(300), zd.Dataset.range(1000, 1100)], seed=1
        ).take(290),  # past one draw of uniform numbers
        lambda: zd.Dataset.choose_from_datasets(
            [zd.Dataset.range(3), zd.Dataset.range(10, 20).shuffle(4, seed=1)],
            zd.Dataset.from_tensor_slices(np.array([1, 0, 1, 0, 0, 0, 1, 1])),
            stop_on_empty_dataset=False,
        ),
    ],
)
def test_state_roundtrip(build):
    assert_state_roundtrip(build(), max_elements=300)


def _mixture(lengths, weights, seed, stop):
    datasets = [
        zd.Dataset.range(1_000 * k, 1_000 * k + n) for k, n in enumerate(lengths)
    ]
    return sample(datasets, weights=weights, seed=seed, stop_on_empty_dataset=stop)


@settings(max_examples=60, deadline=None, database=None)
@given(
    shape=st.lists(
        st.tuples(st.integers(0, 40), st.floats(0.01, 10)), min_size=2, max_size=4
    ),
    seed=st.one_of(st.none(), st.integers(0, 2**32)),
    stop=st.booleans(),
    data=st.data(),
)
def test_saved_at_any_step_the_restored_run_goes_on_as_before(shape, seed, stop, data):
    lengths, weights = [n for n, _ in shape], [w for _, w in shape]
    ds = _mixture(lengths, weights, seed, stop)
    at = data.draw(st.integers(0, sum(lengths)))
    with iter(ds) as it:
        before = ints(itertools.islice(it, at))
        state = it.save()
        uninterrupted = before + ints(it)
    with iter(_mixture(lengths, weights, seed, stop)) as resumed:
        resumed.restore(state)  # a fresh dataset: nothing shared but the bytes
        assert before + ints(resumed) == uninterrupted
    if seed is not None:  # and a seeded mixture makes the same run every pass
        assert uninterrupted == ints(ds)


def test_restoring_an_iterator_that_ran_on_brings_ended_inputs_back():
    ds = sample([zd.Dataset.range(3), zd.Dataset.range(10, 40)], seed=8)
    with iter(ds) as it:
        state = it.get_state()
        whole = ints(it)  # every input ended
        it.set_state(state)
        assert ints(it) == whole


def test_a_state_of_another_mixture_is_refused():
    two = iter(sample([zd.Dataset.range(3), zd.Dataset.range(3)], seed=1))
    three = iter(sample([zd.Dataset.range(3)] * 3, seed=1))
    with pytest.raises(
        InvalidArgumentError, match="the saved mixture has 3 datasets, this one 2"
    ):
        two.set_state(three.get_state())


def test_pipelines_serialize_and_run_the_same():
    mixes = [
        sample(
            [zd.Dataset.range(20), zd.Dataset.range(100, 130)],
            weights=[0.2, 0.8],
            seed=3,
        ),
        zd.Dataset.choose_from_datasets(
            [zd.Dataset.range(5), zd.Dataset.range(10, 15)],
            zd.Dataset.range(10).map(lambda x: x % 2),
            stop_on_empty_dataset=False,
        ),
    ]
    for ds in mixes:
        again = zd.Dataset(graph.deserialize(graph.serialize(ds._node)))
        assert ints(again) == ints(ds)
        assert graph.fingerprint(graph.serialize(again._node)) == graph.fingerprint(
            graph.serialize(ds._node)
        )


# ---------------------------------------------------------------- lineage


def test_each_element_claims_what_it_stood_for_in_its_input():
    source, other = zd.Dataset.range(20), zd.Dataset.range(100, 140)
    for stop in (False, True):
        ds = sample(
            [source.map(lambda x: x), other], seed=4, stop_on_empty_dataset=stop
        )
        out = drive(ds, source)
        for element, indices in zip([x for x, _ in out], claimed(out), strict=True):
            assert indices == ([] if element >= 100 else [int(element)])
        covered = check_invariant(out, SPLITS)
        if not stop:
            assert covered == set(key_of(SPLITS).values())


@pytest.mark.parametrize(
    "build",
    [
        lambda s, o: sample([s.batch(3).unbatch(), o], seed=1).shuffle(5, seed=2),
        lambda s, o: sample([s.filter(lambda x: x % 3 > 0), o], seed=1).batch(4),
        lambda s, o: sample([o, s.shuffle(6, seed=3).batch(2).unbatch()], seed=2),
        lambda s, o: zd.Dataset.choose_from_datasets(
            [s.batch(4).unbatch(), o], zd.Dataset.range(2).repeat(), False
        ),
        lambda s, o: sample([s, o], seed=5).batch(3).unbatch().shuffle(4, seed=1),
    ],
)
def test_no_key_is_claimed_early_or_twice_through_a_mixture(build):
    source, other = zd.Dataset.range(20), zd.Dataset.range(100, 107)
    out = drive(build(source, other), source)
    assert check_invariant(out, SPLITS) == set(key_of(SPLITS).values())


def test_a_mixture_is_not_splittable():
    for ds in (
        sample([zd.Dataset.range(3), zd.Dataset.range(3)]),
        zd.Dataset.choose_from_datasets([zd.Dataset.range(3)], zd.Dataset.range(3)),
    ):
        op = ds._node.op
        with pytest.raises(InvalidArgumentError, match=f"op '{op}' has 2 inputs"):
            find_split_source(ds.map(lambda x: x)._node)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        ([0.5, -0.5], ValueError, r"weights\[1\] must be finite and >= 0, got -0.5"),
        ([float("nan"), 1], ValueError, r"weights\[0\] must be finite .*got nan"),
        ([1, math.inf], ValueError, r"weights\[1\] must be finite .*got inf"),
        ([1.0], ValueError, r"one weight per dataset: 2 datasets, 1 weights \[1.0\]"),
        ([1, 2, 3], ValueError, r"2 datasets, 3 weights \[1, 2, 3\]"),
        ([0, 0.0], ValueError, r"weights must not all be 0, got \[0, 0.0\]"),
        (["1", 1], TypeError, r"weights\[0\] must be a float, got '1'"),
        ([True, 1], TypeError, r"weights\[0\] must be a float, got True"),
        (0.5, TypeError, r"weights must be a list of floats, got 0.5"),
    ],
)
def test_bad_weights_are_named(weights, error, match):
    with pytest.raises(error, match=match):
        sample([zd.Dataset.range(2), zd.Dataset.range(2)], weights=weights)


def test_weights_may_be_a_numpy_array():
    ds = sample([constant(0), constant(1)], weights=np.array([1.0, 0.0]))
    assert ints(ds.take(3)) == [0, 0, 0]


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: sample([]), ValueError, r"needs at least one dataset, got \[\]"),
        (lambda: sample(zd.Dataset.range(2)), TypeError, "takes a list of datasets"),
        (
            lambda: sample([zd.Dataset.range(2), [1, 2]]),
            TypeError,
            r"datasets\[1\] must be a Dataset, got \[1, 2\]",
        ),
        (
            lambda: sample([zd.Dataset.range(2)], seed=-1),
            ValueError,
            "sample_from_datasets seed must be >= 0, got -1",
        ),
        (
            lambda: sample([zd.Dataset.range(2)], stop_on_empty_dataset=1),
            TypeError,
            "stop_on_empty_dataset must be a bool, got 1",
        ),
        (
            lambda: zd.Dataset.choose_from_datasets([], zd.Dataset.range(1)),
            ValueError,
            "choose_from_datasets needs at least one dataset",
        ),
        (
            lambda: zd.Dataset.choose_from_datasets([zd.Dataset.range(2)], [0, 1]),
            TypeError,
            r"choice_dataset must be a Dataset, got \[0, 1\]",
        ),
        (
            lambda: zd.Dataset.choose_from_datasets(
                [zd.Dataset.range(2)], zd.Dataset.from_tensor_slices([0.0, 1.0])
            ),
            TypeError,
            r"must yield int64 scalars, got elements TensorSpec\(shape=\(\), dtype=float64",
        ),
    ],
)
def test_bad_arguments_are_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("choose", [False, True])
def test_mismatched_structures_are_named(choose):
    datasets = [
        zd.Dataset.range(3),
        zd.Dataset.range(3).map(lambda x: x),  # unknown: not checked
        zd.Dataset.from_tensors((np.int64(1), np.int64(2))),
    ]
    mix = zd.Dataset.choose_from_datasets if choose else sample
    args = (datasets, zd.Dataset.range(3)) if choose else (datasets,)
    with pytest.raises(
        TypeError,
        match=r"datasets\[2\] has elements \(TensorSpec\(shape=\(\), dtype=int64\), "
        r"TensorSpec\(shape=\(\), dtype=int64\)\), incompatible with datasets\[0\]'s "
        r"TensorSpec\(shape=\(\), dtype=int64\)",
    ):
        mix(*args)
    with pytest.raises(TypeError, match=r"datasets\[1\] has elements .*float32"):
        sample([zd.Dataset.range(3), zd.Dataset.from_tensors(np.float32(1))])


@pytest.mark.parametrize(
    ("choices", "match"),
    [
        (
            [0, 2],
            r"gave 2, which is not an index of the 2 datasets \(an int from 0 to 1\)",
        ),
        ([-1], "gave -1, which is not an index"),
        ([True], "gave True, which is not an index"),
        (["1"], "gave '1', which is not an index"),
    ],
)
def test_a_bad_choice_is_named_at_run_time(choices: list[Any], match):
    ds = zd.Dataset.choose_from_datasets(
        [zd.Dataset.range(5), zd.Dataset.range(5)],
        zd.Dataset.from_generator(lambda: iter(choices)),
    )
    with pytest.raises(InvalidArgumentError, match=match):
        ints(ds)
