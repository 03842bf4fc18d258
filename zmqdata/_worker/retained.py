"""What a buffered element keeps alive, and keeping that close to its size.

A numpy view pins its whole base: a 64 KiB slice of a 256 KiB array keeps all
256 KiB alive. :func:`compact` copies the views that pin a base more than
``COPY_RATIO`` times their size, and counts what the element then retains: each
base once, and Python leaves by ``sys.getsizeof``.

>>> import numpy as np
>>> big = np.zeros(1024, np.uint8)
>>> element, size = compact((big[:16], 7))
>>> element[0].base is None, size == 16 + sys.getsizeof(7)
(True, True)
>>> compact(big[:600])[1]  # a view of most of its base is kept: its base counts
1024
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any, Final

import numpy as np

from zmqdata._dataset import structure

COPY_RATIO: Final = 2
"""A view is copied when its base holds more than this many times its bytes."""


def compact(element: Any) -> tuple[Any, int]:
    """``element`` with small views of large bases copied, and the bytes it retains."""
    leaves = structure.flatten(element)
    total = 0
    bases: set[int] = set()
    copied = False
    for index, leaf in enumerate(leaves):
        if not isinstance(leaf, np.ndarray):
            total += sys.getsizeof(leaf)
            continue
        owner, held = _owner(leaf)
        if held > COPY_RATIO * leaf.nbytes:
            leaves[index] = leaf.copy()
            copied = True
            total += leaf.nbytes
        elif id(owner) not in bases:
            bases.add(id(owner))
            total += held
    return (structure.pack_as(element, leaves) if copied else element), total


def _owner(array: np.ndarray[Any, Any]) -> tuple[object, int]:
    """The object holding ``array``'s memory, and its size in bytes."""
    owner = array
    base: Any = array.base
    while isinstance(base, np.ndarray):
        owner, base = base, base.base
    if base is None:
        return owner, owner.nbytes
    try:
        return base, memoryview(base).nbytes
    except TypeError:  # a base without the buffer protocol: count the array
        return owner, owner.nbytes


def compact_columns(columns: Sequence[Any]) -> tuple[list[Any], int]:
    """A block's columns compacted as :func:`compact` does, and about what they retain.

    An array column is one leaf; a column of Python values is counted by its
    first value, not value by value.

    >>> big = np.zeros(1024, np.uint8)
    >>> columns, size = compact_columns([big[:16], ["ab", "cd"]])
    >>> columns[0].base is None, size == 16 + 2 * sys.getsizeof("ab")
    (True, True)
    """
    compacted, total = compact([c for c in columns if isinstance(c, np.ndarray)])
    arrays = iter(compacted)
    out: list[Any] = []
    for column in columns:
        if isinstance(column, np.ndarray):
            out.append(next(arrays))
        else:
            out.append(column)
            total += len(column) * sys.getsizeof(column[0]) if len(column) else 0
    return out, total
