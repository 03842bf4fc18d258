"""Gathering: small elements a pipeline makes one at a time, buffered as blocks.

A first-come task's producer (``task.py``) offers ``Gather`` each element its
pipeline makes one at a time (ops with no ``next_block``: a Python ``map``, a
``shuffle``, ...). Consecutive small elements of one structure gather into one
``Block`` that is buffered, sent and acknowledged as one item and encoded once,
columnar: an element then costs its signature and an append, not a buffer
entry, a reply slot and a signature of its own at send time.

A block goes (``add`` returns it) when it holds ``BLOCK_ELEMENTS`` elements or
``BLOCK_BYTES``, once its first element waited ``MAX_WAIT_S``, and at once when
elements come more than ``SLOW_S`` apart: a slow pipeline's elements are never
held back (the producer calls ``resumed`` after putting, so that a wait for
room in its output does not count). Tracked, a block stands for its elements'
keys, in order (``Block.widths`` where an element stands for other than one:
a ``filter``'s, a ``batch``'s). An element over ``SMALL_BYTES`` or one that
cannot be encoded goes alone (``Ready.alone``), after what was gathered before
it.

>>> import numpy as np
>>> gather = Gather(tracked=True, clock=lambda: 0.0)
>>> gather.add({"x": np.int64(1)}, (0, 1)), gather.add({"x": np.int64(2)}, (1, 4))
([], [])
>>> [block] = gather.flush()
>>> block.item.n, [int(x) for x in block.item.columns[0]], block.lineage, block.nbytes
(2, [1, 2], (0, 4), 16)
>>> block.item.widths.tolist()  # the second element stands for keys 1 to 3
[1, 3]
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from zmqdata._dataset.block import Block
from zmqdata._wire import encoder
from zmqdata._wire.decoder import object_array
from zmqdata._wire.lineage import Lineage
from zmqdata._wire.schema import CONTAINERS, FIXED_SCALARS, VALUE_TYPES
from zmqdata.errors import InvalidArgumentError

BLOCK_ELEMENTS = 1024
"""Elements in a block at most (what a source's ``next_block`` is asked for too)."""
BLOCK_BYTES = 1 << 20
"""A block goes once its elements hold this many bytes."""
SMALL_BYTES = 4096
"""Elements holding more bytes go alone (a block would copy them)."""
MAX_WAIT_S = 0.002
"""A block goes once its first element waited this long for more."""
SLOW_S = 100e-6
"""Elements that come further apart go at once: gathering would only delay them."""


@dataclass(frozen=True, slots=True)
class Ready:
    """What to put into the task's output now: a block, or an element alone."""

    item: Any
    """A ``Block``, or an element (``alone``)."""
    lineage: Lineage
    nbytes: int
    """The bytes a block holds (0 for an element alone: the producer counts it)."""
    alone: bool = False


class Gather:
    """Consecutive small elements of one structure, gathered into a block."""

    def __init__(
        self, tracked: bool = False, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._tracked = tracked
        self._clock = clock
        self._first: Any = None
        self._sig: encoder.Sig | None = None
        self._loose: encoder.Sig | None = None  # ``_sig`` without 1-D lengths
        self._rows: list[list[Any]] = []
        # The template of a block of flat dicts of scalars: checked by types alone
        self._names: tuple[str, ...] = ()
        self._types: list[type] | None = None
        self._sized: list[int] = []  # its str and bytes leaves
        self._unit = 0  # the bytes of its other leaves
        self._keys: list[int] = []  # tracked: the block's lineage, flat
        self._widths: list[int] = []  # tracked: the keys each element stands for
        self._several = False  # whether an element stands for other than one key
        self._nbytes = 0
        self._started = self._last = 0.0

    def add(self, element: Any, lineage: Lineage) -> list[Ready]:
        """Gathers ``element`` (standing for ``lineage``); returns what is ready, in order."""
        now = self._clock()
        slow = now - self._last > SLOW_S
        self._last = now
        leaves = self._like_first(element)
        if leaves is not None:  # the usual row: no signature to make
            assert self._sig is not None  # a block is open
            sig, fits = self._sig, True
            nbytes = self._unit + sum([len(leaves[i]) for i in self._sized])
        else:
            try:
                sig, leaves = encoder.signature(element)
            except InvalidArgumentError:  # the producer's put names the error
                return [*self.flush(), Ready(element, lineage, 0, alone=True)]
            fits = self._fits(sig)
            blockable = fits or _blockable(sig)
            nbytes = _nbytes(leaves) if blockable else SMALL_BYTES + 1
        if nbytes > SMALL_BYTES:
            return [*self.flush(), Ready(element, lineage, 0, alone=True)]
        ready = [] if fits else self.flush()
        if not self._rows:
            self._start(element, sig, leaves, now)
        self._rows.append(leaves)
        self._nbytes += nbytes
        if self._tracked:
            self._note(lineage)
        if (
            slow
            or len(self._rows) >= BLOCK_ELEMENTS
            or self._nbytes >= BLOCK_BYTES
            or now - self._started > MAX_WAIT_S
        ):
            ready += self.flush()
        return ready

    def _start(
        self, first: Any, sig: encoder.Sig, leaves: list[Any], now: float
    ) -> None:
        """A new block, of ``first``'s structure; a flat ``dict`` of scalars is its template."""
        self._first, self._sig, self._loose, self._started = first, sig, None, now
        types = [type(leaf) for leaf in leaves]
        if type(first) is not dict or not all(map(_fixed_type, types)):
            return
        self._names, self._types = tuple(first), types
        self._sized = [
            i for i, kind in enumerate(types) if kind is str or kind is bytes
        ]
        self._unit = sum(
            sys.getsizeof(leaf) if kind in VALUE_TYPES else leaf.nbytes
            for leaf, kind in zip(leaves, types, strict=True)
            if kind is not str and kind is not bytes
        )

    def _like_first(self, element: Any) -> list[Any] | None:
        """``element``'s leaves where it is shaped as the template, else None."""
        if (
            self._types is None
            or type(element) is not dict
            or tuple(element) != self._names
        ):
            return None
        leaves = list(element.values())
        return leaves if list(map(type, leaves)) == self._types else None

    def resumed(self) -> None:
        """The producer is back from putting what was ready: that wait was not the pipeline's."""
        self._last = self._clock()

    def flush(self) -> list[Ready]:
        """What is gathered, as one block (none if nothing is)."""
        if not self._rows:
            return []
        columns = [_column(list(values)) for values in zip(*self._rows, strict=True)]
        widths = np.array(self._widths, np.int64) if self._several else None
        block = Block(self._first, columns, len(self._rows), widths)
        ready = Ready(block, tuple(self._keys), self._nbytes)
        self._first = self._sig = self._loose = self._types = None
        self._rows, self._keys, self._widths, self._nbytes = [], [], [], 0
        self._several = False
        return [ready]

    def _fits(self, sig: encoder.Sig) -> bool:
        """Whether an element of ``sig`` joins the block gathered (or none is)."""
        if sig == self._sig:
            return True
        if not self._rows:
            return False
        if self._loose is None:
            self._loose = encoder.without_lengths(self._sig)  # type: ignore[arg-type]
        return encoder.without_lengths(sig) == self._loose

    def _note(self, lineage: Lineage) -> None:
        """Adds ``lineage``, what the element gathered stands for, to the block's keys."""
        keys, width = self._keys, 0
        for index in range(0, len(lineage), 2):
            lo, hi = lineage[index], lineage[index + 1]
            width += hi - lo
            if keys and keys[-1] == lo:
                keys[-1] = hi
            else:
                keys += (lo, hi)
        self._widths.append(width)
        if width != 1:
            self._several = True


def _fixed_type(kind: type) -> bool:
    """Whether a leaf's type alone fixes its signature (a Python or a numpy scalar)."""
    return kind in VALUE_TYPES or kind in FIXED_SCALARS


def _nbytes(leaves: list[Any]) -> int:
    """About the bytes ``leaves`` hold."""
    total = 0
    for leaf in leaves:
        nbytes = getattr(leaf, "nbytes", None)  # numpy arrays and scalars
        total += sys.getsizeof(leaf) if nbytes is None else nbytes
    return total


def _blockable(sig: encoder.Sig) -> bool:
    """Whether elements of ``sig`` fit a block's columns (no object-array leaf)."""
    if not isinstance(sig, tuple):
        return True
    if sig[0] in CONTAINERS:
        return all(_blockable(child) for child in sig[-1])
    return bool(sig[0] != "o")


def _column(values: list[Any]) -> Any:
    """One leaf of the gathered elements as a block's column.

    Arrays of one shape are stacked and 1-D arrays of several lengths held as
    an object array (``"g"`` on the wire), both copies, so that a block pins no
    larger array its elements were views of; other values stay a list.
    """
    head = values[0]
    if not isinstance(head, np.ndarray):
        return values
    if head.ndim == 1 and any(len(value) != len(head) for value in values):
        return object_array([value.copy() for value in values])
    return np.stack(values)
