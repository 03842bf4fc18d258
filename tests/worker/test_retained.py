"""``retained.compact``: what a buffered element keeps alive, views included."""

from __future__ import annotations

import sys

import numpy as np

from zmqdata._worker.retained import compact

KiB = 1024


def test_a_small_view_of_a_large_base_is_copied() -> None:
    base = np.arange(256 * KiB, dtype=np.uint8)
    element, size = compact(base[: 64 * KiB])
    assert element.base is None
    assert size == 64 * KiB
    np.testing.assert_array_equal(element, base[: 64 * KiB])


def test_a_large_view_counts_its_whole_base() -> None:
    base = np.zeros(100 * KiB, np.uint8)
    view = base[: 60 * KiB]
    element, size = compact(view)
    assert element is view
    assert size == 100 * KiB


def test_views_of_one_base_count_it_once() -> None:
    base = np.zeros(100 * KiB, np.uint8)
    element = (base[: 50 * KiB], base[50 * KiB :])
    assert compact(element) == (element, 100 * KiB)


def test_strided_views_count_their_base() -> None:
    base = np.zeros((256, 256), np.uint8)
    element, size = compact({"even": base[:, ::2], "odd": base[:, 1::2]})
    assert element["even"].base is not None
    assert size == base.nbytes


def test_structures_keep_their_shape_when_leaves_are_copied() -> None:
    base = np.ones(10 * KiB, np.float32)
    element, size = compact({"x": (base[:4], 7, "label"), "y": [base[4:8]]})
    assert list(element) == ["x", "y"]
    assert element["x"][1:] == (7, "label")
    assert element["x"][0].base is None
    assert element["y"][0].base is None
    assert size == 32 + sys.getsizeof(7) + sys.getsizeof("label")


def test_arrays_over_foreign_memory_count_that_memory() -> None:
    data = bytes(64 * KiB)
    small = np.frombuffer(data, np.uint8)[:100]
    element, size = compact(small)
    assert element.base is None
    assert size == 100
    whole = np.frombuffer(data, np.uint8)
    assert compact(whole)[1] == 64 * KiB
