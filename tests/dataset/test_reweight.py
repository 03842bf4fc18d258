"""Re-weighting a mixture on resume, locally: every input goes on where it stood.

A state saved from ``sample_from_datasets`` with weights ``w`` restores into
the same pipeline with other weights (and ``choose_from_datasets`` with
another ``choice_dataset``): each input continues exactly where it stood
(nothing it delivered comes again, nothing is skipped), the new weights apply
from the resume on. Anything else that differs is refused, naming it.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import ints
from zmqdata.errors import InvalidArgumentError

SIZES = (3_000, 3_000, 3_000)
"""Elements of each input: source ``k`` holds ``k * 10_000 + 0..n``."""
SAVED_AT = 900


def inputs(sizes: tuple[int, ...] = SIZES) -> list[zd.Dataset]:
    return [zd.Dataset.range(10_000 * k, 10_000 * k + n) for k, n in enumerate(sizes)]


def sample(weights: list[float], **options: Any) -> zd.Dataset:
    return zd.Dataset.sample_from_datasets(
        inputs(), weights=weights, **{"seed": 4, **options}
    )


def by_source(elements: list[int]) -> list[list[int]]:
    """Each input's elements, in the order they came."""
    return [[x for x in elements if x // 10_000 == k] for k in range(len(SIZES))]


def saved_mid_way(ds: zd.Dataset, at: int = SAVED_AT) -> tuple[list[int], bytes]:
    """The first ``at`` elements and the state after them (more read, not saved)."""
    with iter(ds) as it:
        before = ints(itertools.islice(it, at))
        state = it.save()
        ints(itertools.islice(it, 50))  # read after the save: comes again
    return before, state


def restored(ds: zd.Dataset, state: bytes) -> list[int]:
    """What ``ds`` gives after ``restore(state)``."""
    with iter(ds) as it:
        it.restore(state)
        return ints(it)


def test_new_weights_continue_every_input_where_it_stood_and_apply_from_the_resume():
    before, state = saved_mid_way(sample([1, 1, 1]))
    after = restored(sample([0.1, 0.3, 0.6]), state)
    # Each input: every element once, in its order, before and after together.
    for k, (n, got) in enumerate(zip(SIZES, by_source(before + after), strict=True)):
        assert got == list(range(10_000 * k, 10_000 * k + n)), f"input {k}"
    # The saved weights before, the new ones after (to where an input runs out).
    assert [len(s) / SAVED_AT for s in by_source(before)] == pytest.approx(
        [1 / 3] * 3, abs=0.06
    )
    head = after[:1_500]  # no input ends before: 2,000 left in each
    assert [len(s) / len(head) for s in by_source(head)] == pytest.approx(
        [0.1, 0.3, 0.6], abs=0.04
    )


def test_the_same_weights_restore_the_uninterrupted_run():
    ds = sample([0.2, 0.5, 0.3])
    before, state = saved_mid_way(ds)
    assert before + restored(sample([0.2, 0.5, 0.3]), state) == ints(ds)


def test_a_restored_input_that_had_ended_stays_ended():
    ds = zd.Dataset.sample_from_datasets(
        inputs((10, 3_000, 3_000)), weights=[0.8, 0.1, 0.1], seed=2
    )
    before, state = saved_mid_way(ds, at=400)  # input 0 ended long before
    assert len(by_source(before)[0]) == 10
    reweighted = zd.Dataset.sample_from_datasets(
        inputs((10, 3_000, 3_000)), weights=[0.9, 0.05, 0.05], seed=2
    )
    after = restored(reweighted, state)
    assert by_source(after)[0] == []
    assert sorted(before + after) == sorted(
        ints(zd.Dataset.range(10))
        + [x for k in (1, 2) for x in range(10_000 * k, 10_000 * k + 3_000)]
    )


def test_a_mixture_that_stopped_on_an_empty_input_stays_stopped():
    def stopping(weights: list[float]) -> zd.Dataset:
        return zd.Dataset.sample_from_datasets(
            inputs((10, 3_000, 3_000)), weights, seed=2, stop_on_empty_dataset=True
        )

    with iter(stopping([0.8, 0.1, 0.1])) as it:
        whole = ints(it)
        ended = it.save()
    assert len(by_source(whole)[0]) == 10
    assert len(whole) < 100
    assert restored(stopping([0.01, 0.5, 0.49]), ended) == []  # no weights revive it


def test_another_choice_dataset_applies_from_its_start():
    def choose(pattern: list[int]) -> zd.Dataset:
        choices = zd.Dataset.from_tensor_slices(np.array(pattern)).repeat()
        return zd.Dataset.choose_from_datasets(inputs((30, 30)), choices, False)

    before, state = saved_mid_way(choose([0, 1]), at=11)  # 6 of input 0, 5 of 1
    after = restored(choose([1, 1, 0]), state)
    assert after[:6] == [10_005, 10_006, 6, 10_007, 10_008, 7]
    assert sorted(before + after) == list(range(30)) + list(range(10_000, 10_030))
    assert restored(choose([0, 1]), state)[:2] == [10_005, 6]  # the saved choices


@pytest.mark.parametrize(
    ("other", "named"),
    [
        (lambda: zd.Dataset.sample_from_datasets(inputs()[:2], seed=4), "3 datasets"),
        (
            lambda: zd.Dataset.sample_from_datasets(
                [*inputs()[:2], zd.Dataset.range(5)], seed=4
            ),
            r"datasets\[2\] is not the saved",
        ),
        (
            lambda: zd.Dataset.sample_from_datasets(
                [inputs()[0].map(lambda x: x + 1), *inputs()[1:]], seed=4
            ),
            r"datasets\[0\] is not the saved",
        ),
        (lambda: sample([1, 1, 1], seed=5), "seed=4, this one seed=5"),
        (
            lambda: sample([1, 1, 1], stop_on_empty_dataset=True),
            "stop_on_empty_dataset=False, this one stop_on_empty_dataset=True",
        ),
        (
            lambda: zd.Dataset.choose_from_datasets(inputs(), zd.Dataset.range(3)),
            "not one of a choose_from_datasets but of sample_from_datasets",
        ),
    ],
    ids=["count", "dataset", "function", "seed", "stop", "kind"],
)
def test_anything_else_that_differs_is_refused_naming_it(other, named):
    _, state = saved_mid_way(sample([1, 1, 1]), at=20)
    with iter(other()) as it, pytest.raises(InvalidArgumentError, match=named):
        it.restore(state)


def test_a_state_of_another_op_is_refused():
    with iter(zd.Dataset.range(5).batch(2)) as it:
        state = it.save()
    with (
        iter(sample([1, 1, 1])) as it,
        pytest.raises(
            InvalidArgumentError,
            match="not one of a sample_from_datasets but of another",
        ),
    ):
        it.restore(state)


def test_a_weight_of_zero_leaves_an_input_out_and_is_refused_naming_why():
    _, state = saved_mid_way(sample([1, 1, 1]), at=20)
    with (
        iter(sample([1, 0, 1])) as it,
        pytest.raises(InvalidArgumentError, match="weight 0 are left out"),
    ):
        it.restore(state)


def test_a_nested_mixture_takes_new_weights_at_both_levels():
    def nested(outer: list[float], inner: list[float]) -> zd.Dataset:
        a, b, c = inputs()
        both = zd.Dataset.sample_from_datasets([a, b], weights=inner, seed=1)
        return zd.Dataset.sample_from_datasets([both, c], weights=outer, seed=2)

    before, state = saved_mid_way(nested([1, 1], [1, 1]))
    after = restored(nested([3, 1], [1, 4]), state)
    assert Counter(before + after) == Counter(
        x for k, n in enumerate(SIZES) for x in range(10_000 * k, 10_000 * k + n)
    )
