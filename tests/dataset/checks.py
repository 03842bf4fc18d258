"""Shared checks for the Dataset tests: bit-exact equality, checkpoints, threads."""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata._dataset.iterator import DatasetIterator


def ints(ds: Any) -> list[Any]:
    """The elements of ``ds`` (or an iterator) with numpy leaves turned into Python."""
    return [to_python(x) for x in ds]


def to_python(value: Any) -> Any:
    """Numpy scalars and arrays become Python scalars and lists, structures kept."""
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(to_python(v) for v in value)
    if isinstance(value, list):
        return [to_python(v) for v in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value


def _is_object_array(value: Any) -> bool:
    """Whether ``value`` is a 1-D object array (of arrays: compared item by item)."""
    return isinstance(value, np.ndarray) and value.dtype.kind == "O"


def assert_bit_equal(actual: Any, expected: Any, path: str = "value") -> None:
    """Same nesting, same types, same dtypes and shapes, same bytes."""
    assert type(actual) is type(expected), (
        f"{path}: {type(actual).__name__} != {type(expected).__name__}"
    )
    if isinstance(expected, dict):
        assert list(actual) == list(expected), f"{path}: keys {list(actual)}"
        for key in expected:
            assert_bit_equal(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, tuple | list) or _is_object_array(expected):
        assert len(actual) == len(expected), f"{path}: {len(actual)} != {len(expected)}"
        assert _is_object_array(actual) == _is_object_array(expected), path
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_bit_equal(a, e, f"{path}[{index}]")
    elif isinstance(expected, np.ndarray | np.generic):
        assert actual.dtype == expected.dtype, (
            f"{path}: {actual.dtype} != {expected.dtype}"
        )
        assert actual.shape == expected.shape, (
            f"{path}: {actual.shape} != {expected.shape}"
        )
        assert np.asarray(actual).tobytes() == np.asarray(expected).tobytes(), (
            f"{path}: {actual!r} != {expected!r}"
        )
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), f"{path}: {actual!r} is not nan"
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def assert_state_roundtrip(
    source: zd.Dataset | Callable[[], DatasetIterator], max_elements: int = 200
) -> list[Any]:
    """Checkpoints after every element and restores each state into a fresh iterator.

    ``source`` is a dataset (fresh iterators come from ``iter``) or a function
    returning a fresh iterator. For every ``k`` the state saved after ``k``
    elements, restored into a fresh iterator, must give exactly (bit-exact) the
    elements the saved iterator went on to produce, and report the same state.
    Returns the elements of the one pass.
    """
    fresh: Callable[[], DatasetIterator] = (
        (lambda: iter(source)) if isinstance(source, zd.Dataset) else source
    )
    states, elements = [], []
    with fresh() as it:
        while True:
            states.append(it.get_state())
            try:
                elements.append(next(it))
            except StopIteration:
                break
            assert len(elements) <= max_elements, "dataset too long for a roundtrip"
    for k, state in enumerate(states):
        with fresh() as restored:
            restored.set_state(state)
            assert_bit_equal(restored.get_state(), state, f"state after {k}")
            tail = list(restored)
        assert_bit_equal(tail, elements[k:], f"tail after restoring at {k}")
    return elements


def _new_threads(before: set[threading.Thread]) -> list[str]:
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive()]


@contextlib.contextmanager
def no_thread_leak() -> Iterator[None]:
    """Fails unless every thread started inside the block is gone soon after it."""
    before = set(threading.enumerate())
    count = threading.active_count()
    yield

    def settled() -> bool:
        return not _new_threads(before) and threading.active_count() <= count

    try:
        poll_for(settled, timeout=5.0)
    except AssertionError:
        raise AssertionError(f"threads left running: {_new_threads(before)}") from None
