"""``interleave`` and ``flat_map``: tf.data's visiting order."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import ints, no_thread_leak

TF_EXAMPLE = [1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 3, 3, 4, 4]
TF_EXAMPLE += [5, 5, 5, 5, 5, 5]


class UserError(Exception):
    pass


def tf_example(**kwargs):
    return zd.Dataset.range(1, 6).interleave(
        lambda x: zd.Dataset.from_tensors(x).repeat(6),
        cycle_length=2,
        block_length=4,
        **kwargs,
    )


def reference_interleave(inputs, fn, cycle_length, block_length):
    """tf.data's InterleaveDataset loop, over Python lists."""
    pending = list(inputs)
    slots: list[list | None] = [None] * cycle_length
    out, cycle, block = [], 0, 0
    while pending or any(s is not None for s in slots):
        slot = slots[cycle]
        if slot is not None:
            if slot:
                out.append(slot.pop(0))
                block += 1
                if block == block_length:
                    cycle, block = (cycle + 1) % cycle_length, 0
                continue
            slots[cycle] = None
            cycle, block = (cycle + 1) % cycle_length, 0
        elif pending:
            slots[cycle] = list(fn(pending.pop(0)))
        else:
            cycle, block = (cycle + 1) % cycle_length, 0
    return out


def test_tf_documented_example():
    assert ints(tf_example()) == TF_EXAMPLE


def test_tf_documented_example_parallel_deterministic():
    with iter(tf_example(num_parallel_calls=2)) as it:
        assert ints(it) == TF_EXAMPLE
    with iter(tf_example(num_parallel_calls=zd.AUTOTUNE, deterministic=True)) as it:
        assert ints(it) == TF_EXAMPLE


def test_parallel_nondeterministic_same_multiset():
    with iter(tf_example(num_parallel_calls=3, deterministic=False)) as it:
        assert Counter(ints(it)) == Counter(TF_EXAMPLE)


@pytest.mark.parametrize("cycle_length", [1, 2, 3, 7])
@pytest.mark.parametrize("block_length", [1, 2, 5])
def test_matches_reference_with_uneven_lengths(cycle_length, block_length):
    sizes = [3, 0, 5, 1, 4, 2]
    ds = zd.Dataset.from_tensor_slices(np.array(sizes)).interleave(
        lambda n: zd.Dataset.range(n * 10, n * 10 + n),
        cycle_length=cycle_length,
        block_length=block_length,
    )
    expected = reference_interleave(
        sizes, lambda n: range(n * 10, n * 10 + n), cycle_length, block_length
    )
    assert ints(ds) == expected


def test_default_cycle_length_yields_every_element():
    ds = zd.Dataset.range(6).interleave(lambda x: zd.Dataset.range(x))
    assert Counter(ints(ds)) == Counter(y for x in range(6) for y in range(x))


def test_fn_receives_unpacked_tuples():
    ds = zd.Dataset.zip((zd.Dataset.range(3), zd.Dataset.range(10, 13)))
    ds = ds.interleave(
        lambda a, b: zd.Dataset.from_tensors(a + b).repeat(2), cycle_length=1
    )
    assert ints(ds) == [10, 10, 12, 12, 14, 14]


def test_interleave_spec_and_cardinality():
    ds = zd.Dataset.range(3).interleave(lambda x: zd.Dataset.range(2), cycle_length=2)
    assert ds.element_spec is None
    assert ds.cardinality() == zd.UNKNOWN_CARDINALITY
    assert zd.Dataset.range(0).flat_map(zd.Dataset.range).cardinality() == 0
    assert list(zd.Dataset.range(0).flat_map(zd.Dataset.range)) == []


def test_inner_datasets_may_be_infinite():
    ds = zd.Dataset.range(2).interleave(
        lambda x: zd.Dataset.from_tensors(x).repeat(), cycle_length=2, block_length=2
    )
    assert ints(ds.take(7)) == [0, 0, 1, 1, 0, 0, 1]


def test_fn_error_keeps_type_and_message():
    def fn(x):
        if x == 2:
            raise UserError("cannot open 2")
        return zd.Dataset.from_tensors(x)

    it = iter(zd.Dataset.range(4).interleave(fn, cycle_length=1))
    assert ints([next(it), next(it)]) == [0, 1]
    with pytest.raises(UserError, match="cannot open 2"):
        next(it)


def failing_inner(x):
    def gen():
        yield x
        raise UserError(f"inner {x} broke")

    return zd.Dataset.from_generator(gen)


def test_inner_error_keeps_type_and_message():
    with pytest.raises(UserError, match="inner 0 broke"):
        list(zd.Dataset.range(3).interleave(failing_inner, cycle_length=2))


def test_parallel_inner_error_keeps_type_and_message():
    ds = zd.Dataset.range(3).interleave(
        failing_inner, cycle_length=2, num_parallel_calls=2
    )
    with iter(ds) as it, pytest.raises(UserError, match="inner 0 broke"):
        list(it)


def test_fn_must_return_a_dataset():
    ds = zd.Dataset.range(3).interleave(lambda x: [x], cycle_length=1)
    with pytest.raises(TypeError, match="must return a Dataset, got list"):
        list(ds)


# ---------------------------------------------------------------- flat_map


def test_flat_map_concatenates_in_order():
    ds = zd.Dataset.range(5).flat_map(
        lambda x: zd.Dataset.range(x).map(lambda y: x * 10 + y)
    )
    assert ints(ds) == [x * 10 + y for x in range(5) for y in range(x)]


def test_flat_map_unpacks_tuples_and_keeps_structures():
    data = (np.array([[1, 2], [3, 4]]), np.array(["a", "b"]))
    ds = zd.Dataset.from_tensor_slices(data).flat_map(
        lambda row, tag: zd.Dataset.from_tensor_slices(row).map(lambda v: (tag, v))
    )
    assert ints(ds) == [("a", 1), ("a", 2), ("b", 3), ("b", 4)]


def test_flat_map_error_keeps_type_and_message():
    def fn(x):
        raise UserError(f"flat_map fn failed on {int(x)}")

    with pytest.raises(UserError, match="flat_map fn failed on 0"):
        list(zd.Dataset.range(2).flat_map(fn))


def _gated_interleave(gate: threading.Event, deterministic: bool) -> zd.Dataset:
    """Input 0 opens a dataset held at ``gate``; input 1 a fast one (10..14)."""

    def held(x):
        gate.wait(10)
        return x

    def make(x):
        if x == 0:
            return zd.Dataset.range(3).map(held)
        return zd.Dataset.range(10, 15)

    return zd.Dataset.range(2).interleave(
        make, cycle_length=2, num_parallel_calls=2, deterministic=deterministic
    )


def test_parallel_nondeterministic_yields_whatever_is_ready_first():
    gate = threading.Event()
    with no_thread_leak(), iter(_gated_interleave(gate, False)) as it:
        # The slow cycle element holds nothing up: the fast one's elements come first.
        assert ints(next(it) for _ in range(5)) == [10, 11, 12, 13, 14]
        gate.set()
        assert ints(it) == [0, 1, 2]


def test_parallel_deterministic_waits_for_the_slow_cycle_element():
    gate = threading.Event()
    opener = threading.Timer(0.1, gate.set)
    opener.start()
    with iter(_gated_interleave(gate, True)) as it:
        assert ints(it) == [0, 10, 1, 11, 2, 12, 13, 14]
    opener.join()
