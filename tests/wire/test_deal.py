"""Multi-rank reads' vocabulary (``_wire/deal.py``): split order, streams, merging.

Pure: no sockets, no clock. ``merge`` is checked against a model of the
read: an epoch of splits with counts (0 for a split a filter emptied), a
stream (possibly a restored one, with skips), and R consumers that each took
their dealt indices ``r, r+R, ...`` up to some count.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zmqdata._wire import deal
from zmqdata._wire.deal import DealtPosition, Resume, Stream, merge, split_order
from zmqdata._wire.lineage import Ranges
from zmqdata.errors import InvalidArgumentError

# ------------------------------------------------------------------ split_order


def test_split_order_is_a_permutation_fixed_by_seed_and_epoch():
    for seed, epoch, count in [(0, 0, 1), (7, 3, 10), (2**40, 1, 257), (5, 0, 0)]:
        order = split_order(seed, epoch, count)
        assert sorted(order.tolist()) == list(range(count))
        assert order.dtype == np.int64
        assert split_order(seed, epoch, count).tolist() == order.tolist()


def test_split_order_is_read_only():
    order = split_order(3, 0, 8)
    with pytest.raises(ValueError, match="read-only"):
        order[0] = 1


def test_split_order_without_a_seed_is_the_source_order():
    for epoch in (0, 1, 9):
        assert split_order(None, epoch, 6).tolist() == [0, 1, 2, 3, 4, 5]


def test_split_order_differs_across_epochs_and_seeds():
    count = 50
    by_epoch = {tuple(split_order(11, epoch, count).tolist()) for epoch in range(20)}
    by_seed = {tuple(split_order(seed, 0, count).tolist()) for seed in range(20)}
    assert len(by_epoch) == 20
    assert len(by_seed) == 20
    assert split_order(11, 0, count).tolist() != list(range(count))


def test_split_order_values_are_pinned():
    """A checkpoint outlives upgrades: these orders must never change."""
    assert split_order(0, 0, 10).tolist() == [0, 7, 3, 1, 9, 5, 4, 6, 8, 2]
    assert split_order(7, 0, 10).tolist() == [1, 6, 7, 0, 5, 8, 9, 3, 2, 4]
    assert split_order(7, 1, 10).tolist() == [9, 7, 1, 6, 3, 0, 5, 8, 4, 2]
    assert split_order(12345, 3, 10).tolist() == [2, 5, 4, 9, 3, 7, 0, 8, 1, 6]
    assert split_order(2**64 + 5, 0, 5).tolist() == [0, 3, 4, 1, 2]


def test_fewer_splits_keep_their_relative_order():
    """Keys are hashed per ordinal: dropping the last splits keeps the others' order."""
    long, short = split_order(7, 0, 10).tolist(), split_order(7, 0, 5).tolist()
    assert [q for q in long if q < 5] == short


# ------------------------------------------------------------------ Stream


@st.composite
def streams(draw: Any, limit: int = 200) -> Stream:
    """A stream from some start, with random skipped tokens (some below start)."""
    start = draw(st.integers(0, 50))
    skipped = draw(st.sets(st.integers(0, limit), max_size=60))
    skip = Ranges()
    for token in skipped:
        skip.add(token, token + 1)
    return Stream(start, skip)


@settings(max_examples=300, deadline=None)
@given(streams(), st.integers(0, 150))
def test_token_at_and_index_of_are_inverse(stream, n):
    token = stream.token_at(n)
    assert token >= stream.start
    assert token not in stream.skip
    assert stream.index_of(token) == n
    assert stream.token_at(n + 1) > token


@settings(max_examples=300, deadline=None)
@given(streams(), st.integers(0, 260))
def test_index_of_counts_the_dealt_tokens_before(stream, token):
    token = max(token, stream.start)
    before = [t for t in range(stream.start, token) if t not in stream.skip]
    assert stream.index_of(token) == len(before)
    if token not in stream.skip:
        assert stream.token_at(stream.index_of(token)) == token


@settings(max_examples=200, deadline=None)
@given(streams())
def test_token_at_lists_the_tokens_from_start_less_skip(stream):
    expected = [t for t in range(stream.start, 300) if t not in stream.skip][:100]
    assert [stream.token_at(n) for n in range(len(expected))] == expected


@settings(max_examples=200, deadline=None)
@given(streams(), st.lists(st.integers(0, 150), max_size=40))
def test_tokens_at_is_token_at_of_each(stream, indices):
    tokens = stream.tokens_at(np.array(indices, dtype=np.int64))
    assert tokens.tolist() == [stream.token_at(n) for n in indices]


def test_stream_wire_form():
    assert Stream(4, Ranges([5, 7])).to_wire() == [4, 5, 7]
    assert Stream().to_wire() == [0]


def test_first_skip_counts_the_leading_skipped_elements_of_a_split():
    stream = Stream(8, Ranges([8, 11, 13, 14]))
    assert deal.first_skip(stream, 8) == 3
    assert deal.first_skip(stream, 9) == 2
    assert deal.first_skip(stream, 11) == 0
    assert deal.first_skip(stream, 13) == 1
    assert deal.first_skip(Stream(0), 0) == 0


# ------------------------------------------------------------------ positions


def position(**overrides: Any) -> DealtPosition:
    fields: dict[str, Any] = {
        "dataset_id": "7",
        "epoch": 0,
        "seed": 3,
        "num_consumers": 2,
        "consumer_index": 0,
        "stream": Stream(),
        "consumed": 0,
        "anchor": (0, 0),
    }
    return DealtPosition(**(fields | overrides))


def test_a_position_round_trips_through_its_state():
    p = position(stream=Stream(5, Ranges([6, 8])), consumed=4, anchor=(2, 5))
    state = p.to_state()
    assert state["format"] == deal.POSITION_FORMAT
    assert DealtPosition.from_state(state) == p
    assert deal.is_position(state)
    assert p.next_index() == 0 + 4 * 2
    assert DealtPosition.from_state(position(seed=None).to_state()).seed is None


@pytest.mark.parametrize(
    "state",
    [
        None,
        b"bytes",
        {"format": "zmqdata.distributed_read/1"},
        {"format": deal.POSITION_FORMAT},
        position(consumer_index=2).to_state(),
        position(consumed=-1).to_state(),
        position().to_state() | {"stream": [1, 2]},
        position().to_state() | {"anchor": [1]},
        position().to_state() | {"epoch": "x"},
    ],
)
def test_what_is_not_a_position_is_an_invalid_argument(state):
    with pytest.raises(InvalidArgumentError):
        DealtPosition.from_state(state)
    with pytest.raises(InvalidArgumentError):
        merge([state])


def test_resume_round_trips_and_refuses_malformed_values():
    resume = Resume(2, 5, Stream(40, Ranges([41, 43])))
    assert resume.to_wire() == [2, 5, 40, 41, 43]
    assert Resume.from_wire(resume.to_wire()) == resume
    for bad in ([], [1, 2], [1, 2, 3, 4], [0, 0, 5, 9, 7], [-1, 0, 0], [0, 0, True]):
        with pytest.raises(InvalidArgumentError):
            Resume.from_wire(bad)


def test_resume_of_a_single_consumer_state_is_refused():
    with pytest.raises(InvalidArgumentError, match="merge_positions"):
        deal.resume_of(position().to_state())
    merged = merge([position().to_state(), position(consumer_index=1).to_state()])
    assert deal.resume_of(merged) == Resume(0, 0, Stream(0))


# ------------------------------------------------------------------ merge: a model


@dataclass
class Epoch:
    """An epoch of splits (``counts`` by ordinal) and their token offsets."""

    counts: list[int]

    @property
    def offsets(self) -> list[int]:
        return [0, *itertools.accumulate(self.counts)]

    @property
    def end(self) -> int:
        return self.offsets[-1]

    def split_of(self, token: int) -> tuple[int, int]:
        """``(ordinal, offset)`` of the split that holds ``token``."""
        offsets = self.offsets
        for q, count in enumerate(self.counts):
            if offsets[q] <= token < offsets[q] + count:
                return q, offsets[q]
        raise AssertionError(f"token {token} is past the epoch")

    def dealt(self, stream: Stream) -> list[int]:
        """The tokens ``stream`` deals in this epoch."""
        return [t for t in range(stream.start, self.end) if t not in stream.skip]


def read(
    epoch: Epoch,
    stream: Stream,
    anchor: tuple[int, int],
    consumed: list[int],
    **fields: Any,
) -> tuple[list[dict[str, Any]], set[int]]:
    """Every consumer's state after taking ``consumed[r]`` elements; the tokens taken."""
    R = len(consumed)
    tokens = epoch.dealt(stream)
    states, taken = [], set()
    for r, count in enumerate(consumed):
        mine = [tokens[r + k * R] for k in range(count)]
        taken |= set(mine)
        at = epoch.split_of(mine[-1]) if mine else anchor
        p = DealtPosition(
            fields.get("dataset_id", "d"),
            fields.get("epoch", 1),
            fields.get("seed", 9),
            R,
            r,
            stream,
            count,
            at,
        )
        states.append(p.to_state())
    return states, taken


@st.composite
def reads(draw: Any) -> tuple[Epoch, Stream, tuple[int, int], list[int]]:
    """An epoch, a (restored) stream into it, and near-equal per-rank counts."""
    counts = draw(st.lists(st.integers(0, 6), min_size=1, max_size=12))
    epoch = Epoch(counts)
    q0 = draw(st.integers(0, len(counts) - 1))
    start = epoch.offsets[q0]
    skipped = draw(st.sets(st.integers(start, max(start, epoch.end - 1)), max_size=8))
    skip = Ranges()
    for token in skipped:
        if token < epoch.end:
            skip.add(token, token + 1)
    stream = Stream(start, skip)
    R = draw(st.integers(1, 6))
    rounds = len(epoch.dealt(stream)) // R
    base = draw(st.integers(0, rounds))
    consumed = [max(0, min(rounds, base + draw(st.integers(-1, 1)))) for _ in range(R)]
    return epoch, stream, (q0, start), consumed


@settings(max_examples=400, deadline=None)
@given(reads(), st.randoms(use_true_random=False))
def test_the_merged_stream_deals_exactly_what_no_consumer_took(case, rng):
    epoch, stream, anchor, consumed = case
    states, taken = read(epoch, stream, anchor, consumed)
    rng.shuffle(states)  # any order
    merged = DealtPosition.from_state(merge(states))
    assert (merged.num_consumers, merged.consumer_index, merged.consumed) == (1, 0, 0)
    assert (merged.dataset_id, merged.epoch, merged.seed) == ("d", 1, 9)
    left = [t for t in epoch.dealt(stream) if t not in taken]
    assert epoch.dealt(merged.stream) == left
    # The anchor is a split boundary at or before the first token left.
    ordinal, offset = merged.anchor
    assert offset == merged.stream.start == epoch.offsets[ordinal]
    if left:
        assert offset <= left[0]
    # Restoring it starts the anchor's split with what every consumer had.
    resume = deal.resume_of(merge(states))
    assert resume.start_ordinal == ordinal
    first = deal.first_skip(resume.stream, offset)
    assert all(t in taken or t in stream.skip for t in range(offset, offset + first))


@settings(max_examples=200, deadline=None)
@given(reads(), st.integers(1, 6), st.data())
def test_merging_twice_leaves_what_neither_read_took(case, R2, data):
    """Save, merge, restore on R2 consumers, save again, merge: nothing twice."""
    epoch, stream, anchor, consumed = case
    states, taken = read(epoch, stream, anchor, consumed)
    first = DealtPosition.from_state(merge(states))
    rounds = len(epoch.dealt(first.stream)) // R2
    counts = data.draw(st.lists(st.integers(0, rounds), min_size=R2, max_size=R2))
    again, taken2 = read(epoch, first.stream, first.anchor, counts)
    assert not taken & taken2
    second = DealtPosition.from_state(merge(again))
    expected = [t for t in epoch.dealt(stream) if t not in taken | taken2]
    assert epoch.dealt(second.stream) == expected


def test_merge_of_the_docstring_example():
    a = position(num_consumers=2, consumer_index=0, consumed=2).to_state()
    b = position(num_consumers=2, consumer_index=1, consumed=3, anchor=(1, 4))
    merged = DealtPosition.from_state(merge([b.to_state(), a]))
    assert (merged.stream.start, list(merged.stream.skip)) == (4, [5, 6])


# ------------------------------------------------------------------ merge: errors


def three() -> list[dict[str, Any]]:
    return [position(num_consumers=3, consumer_index=r).to_state() for r in range(3)]


def test_merge_needs_every_consumer():
    with pytest.raises(InvalidArgumentError, match=r"missing \[1\]"):
        merge([three()[0], three()[2]])
    with pytest.raises(InvalidArgumentError):
        merge([])


def test_merge_refuses_a_consumer_twice():
    states = three()
    with pytest.raises(InvalidArgumentError, match="one state of each"):
        merge([states[0], states[1], states[1]])
    with pytest.raises(InvalidArgumentError):
        merge([states[0], states[1], states[1], states[2]])


@pytest.mark.parametrize(
    "change",
    [
        {"dataset_id": "8"},
        {"epoch": 1},
        {"seed": 4},
        {"seed": None},
        {"num_consumers": 4},
        {"stream": Stream(3)},
    ],
)
def test_merge_refuses_states_of_another_read(change):
    states = three()
    foreign = replace(DealtPosition.from_state(states[1]), **change).to_state()
    with pytest.raises(InvalidArgumentError):
        merge([states[0], foreign, states[2]])


def test_merge_refuses_what_is_not_a_position():
    states = three()
    with pytest.raises(InvalidArgumentError):
        merge([states[0], {"format": "x"}, states[2]])
    with pytest.raises(InvalidArgumentError):
        merge([states[0], "nope", states[2]])
