"""``service.advance_position``: a merged multi-rank position with the next elements skipped.

Against the reference order (``test_multirank.reference``: each epoch's
tokens, each split alone, splits seeded): R ranks read and save at a step, the
merged position is advanced by k elements, and R' ranks restore it: together
they read the uninterrupted order from ``R * step + k`` on, in equal steps;
an advance past the epoch's end continues in the next epoch's order; a
dataset of unknown size needs the dataset, whose splits it counts.
"""

from __future__ import annotations

import pytest

from tests.service.test_multirank import (
    BATCHED,
    FILTERED,
    dealt,
    fresh,
    interleaved,
    reference,
    restore,
    save_at,
    shared,  # noqa: F401 (the fixture)
)
from zmqdata import service
from zmqdata._client.advance import skip_steps
from zmqdata._client.position import positions_in
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("R2", [2, 3])
def test_restoring_an_advanced_position_skips_exactly_those_elements(shared, R2):  # noqa: F811
    ds, R, step, k = BATCHED, 2, 9, 14  # 125 batches: 18 read, 14 skipped
    took, states = save_at(shared.target, ds, R, step, 4, fresh("adv"))
    merged = service.merge_positions(states)
    advanced = service.advance_position(merged, k)
    resumed = restore(shared.target, ds, R2, advanced, 4, fresh("adv-restore"))
    tokens = reference(ds, 4)
    assert took == [s[:step] for s in dealt(tokens, R)]
    left = tokens[R * step + k :]
    assert len({len(s) for s in resumed}) == 1  # equal steps
    assert interleaved(resumed) == left[: R2 * len(resumed[0])]
    assert len(left) - R2 * len(resumed[0]) < R2


def test_an_advance_past_the_epochs_end_continues_in_the_next_epoch(shared):  # noqa: F811
    ds, R, step = BATCHED, 2, 50  # 100 of 125 read; 25 left: 24 dealt, 1 not
    _, states = save_at(shared.target, ds, R, step, 6, fresh("cross"))
    advanced = service.advance_position(service.merge_positions(states), 24 + 10)
    resumed = restore(shared.target, ds, R, advanced, 6, fresh("cross-restore"))
    next_epoch = reference(ds, 6, epoch=1)
    assert interleaved(resumed) == next_epoch[10 : 10 + R * len(resumed[0])]
    assert len(next_epoch) - 10 - R * len(resumed[0]) < R


def test_a_dataset_of_unknown_size_is_counted_when_given(shared):  # noqa: F811
    ds, R, step = FILTERED, 2, 90  # 180 batches read (of 210: splits' last are short)
    _, states = save_at(shared.target, ds, R, step, 3, fresh("filtered"))
    merged = service.merge_positions(states)
    with pytest.raises(FailedPreconditionError, match="pass the dataset"):
        service.advance_position(merged, 5)
    left = len(reference(ds, 3)) - R * step
    advanced = service.advance_position(merged, left + 10, ds)  # into epoch 1
    resumed = restore(shared.target, ds, R, advanced, 3, fresh("filtered-restore"))
    next_epoch = reference(ds, 3, epoch=1)
    assert interleaved(resumed) == next_epoch[10 : 10 + R * len(resumed[0])]


def test_bad_positions_and_counts_are_refused_naming_them(shared):  # noqa: F811
    _, states = save_at(shared.target, BATCHED, 2, 3, 4, fresh("bad"))
    with pytest.raises(InvalidArgumentError, match="not one consumer's"):
        service.advance_position(states[0], 2)
    merged = service.merge_positions(states)
    with pytest.raises(InvalidArgumentError, match="elements must be an int >= 0"):
        service.advance_position(merged, -1)
    with pytest.raises(TypeError, match="merge_positions"):
        service.advance_position("state", 1)  # type: ignore[arg-type]


def test_the_framework_helpers_skip_steps_of_every_rank(shared):  # noqa: F811
    torch_helpers = pytest.importorskip("zmqdata.torch")
    R, per_step = 2, 3
    _, states = save_at(shared.target, BATCHED, R, 6, 4, fresh("steps"))
    merged = service.merge_positions(states)
    expected = service.advance_position(merged, 5 * R * per_step)
    assert skip_steps(merged, 5, per_step) == expected  # zmqdata.jax's too
    state = {"position": merged, "other": 1}
    skipped = torch_helpers.skip_steps(state, 5, elements_per_step=per_step)
    assert skipped == {"position": expected, "other": 1}
    with pytest.raises(TypeError, match="gather_state_dict"):
        torch_helpers.skip_steps({"position": None}, 1)
    with pytest.raises(InvalidArgumentError, match="steps must be an int >= 0"):
        skip_steps(merged, -2)


def test_a_mixture_of_reads_is_refused_naming_why(shared):  # noqa: F811
    from zmqdata._dataset import saved

    _, states = save_at(shared.target, BATCHED, 2, 3, 4, fresh("mix"))
    [[_, merged]] = positions_in(saved.decode(service.merge_positions(states)))
    mixture = saved.encode({"inputs": [merged, merged], "used": 3})
    with pytest.raises(InvalidArgumentError, match="holds 2 \\(a mixture of reads\\)"):
        service.advance_position(mixture, 4)
