"""Multi-rank reads: the vocabulary the dispatcher, workers and readers share (pure).

A *dealt* job is a finite ``distributed_epoch`` job read by ``num_consumers``
consumers (R). Each epoch's elements get numbers, *tokens*, in an order fixed
by the dataset and the seed alone:

* the source's splits go out in ``split_order(seed, epoch, count)``: split
  *ordinal* ``q`` is source split ``order[q]``;
* a worker runs the pipeline on one split at a time, from scratch, so split
  ``q`` always yields the same elements (a batch never spans two splits);
* tokens number split 0's elements, then split 1's, and so on: split ``q``'s
  element ``i`` has token ``offset(q) + i``, ``offset`` the sum of the counts
  of the splits before it.

A ``Stream`` says which tokens an iteration deals: those from ``start`` on that
are not in ``skip`` (tokens consumed before a restore). Its ``n``-th token goes
to consumer ``n % R``; the last round, if incomplete, goes to nobody. So every
consumer gets the same number of elements, and which ones is a function of the
dataset, the seed and R.

>>> stream = Stream(start=10, skip=Ranges([12, 14]))
>>> [stream.token_at(n) for n in range(4)], stream.index_of(15)
([10, 11, 14, 15], 3)
>>> [int(q) for q in split_order(None, 0, 4)], sorted(split_order(7, 1, 4).tolist())
([0, 1, 2, 3], [0, 1, 2, 3])
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zmqdata._wire.lineage import Ranges
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

POSITION_FORMAT = "zmqdata.dealt_read/1"
"""Names a multi-rank read's saved position (``DealtPosition.to_state``)."""

_MASK = (1 << 64) - 1


def _mix(values: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, element-wise on uint64 (wraps around by design)."""
    with np.errstate(over="ignore"):
        z = values.astype(np.uint64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=8)
def split_order(seed: int | None, epoch: int, count: int) -> np.ndarray:
    """The source split of each ordinal: a permutation of ``range(count)``.

    Drawn from ``(seed, epoch)`` by sorting hashed keys, so it is the same on
    every host, Python and numpy version (numpy's generators promise no stable
    stream across versions, and a checkpoint must outlive an upgrade).
    ``seed=None``: source order.
    """
    if seed is None:
        order = np.arange(count, dtype=np.int64)
    else:
        salt = int(_mix(np.array([(seed * 0x9E3779B97F4A7C15 + epoch) & _MASK]))[0])
        keys = _mix(np.arange(count, dtype=np.uint64) ^ np.uint64(salt))
        order = np.argsort(keys, kind="stable").astype(np.int64)
    order.flags.writeable = False
    return order


@dataclass
class Stream:
    """The tokens an iteration deals: from ``start`` on, less ``skip``."""

    start: int = 0
    skip: Ranges = field(default_factory=Ranges)

    def token_at(self, index: int) -> int:
        """The ``index``-th dealt token."""
        token = self.start + index
        if not self.skip:
            return token
        for lo, hi in self.skip.ranges():
            if hi <= self.start:
                continue
            if max(lo, self.start) > token:
                break
            token += hi - max(lo, self.start)
        return token

    def tokens_at(self, indices: np.ndarray) -> np.ndarray:
        """``token_at`` of each of ``indices`` (int64), in one pass.

        >>> Stream(10, Ranges([12, 14])).tokens_at(np.arange(4)).tolist()
        [10, 11, 14, 15]
        """
        tokens = self.start + indices
        if not self.skip:
            return tokens
        ranges = np.array(self.skip, dtype=np.int64).reshape(-1, 2)
        ranges = np.maximum(ranges[ranges[:, 1] > self.start], self.start)
        lengths = np.cumsum(ranges[:, 1] - ranges[:, 0])
        # Range j is skipped by the indices from ``lo_j - start - (lengths before)``.
        begins = ranges[:, 0] - self.start - (lengths - (ranges[:, 1] - ranges[:, 0]))
        skipped = np.concatenate(([0], lengths))
        return tokens + skipped[np.searchsorted(begins, indices, side="right")]

    def index_of(self, token: int) -> int:
        """How many dealt tokens come before ``token``."""
        if not self.skip:
            return token - self.start
        skipped = 0
        for lo, hi in self.skip.ranges():
            lo, hi = max(lo, self.start), min(hi, token)
            if lo < hi:
                skipped += hi - lo
        return token - self.start - skipped

    def to_wire(self) -> list[int]:
        return [self.start, *self.skip]


@dataclass
class DealtPosition:
    """What one consumer of a dealt job consumed: its part of the job's position.

    ``consumed``: how many elements it took (its dealt indices ``r, r+R, …``
    below ``r + consumed*R``). ``anchor``: ``(ordinal, offset)`` of a split
    that starts at or before the first token it has not consumed. ``job``:
    the job's name (positions of two jobs alike do not merge).
    """

    dataset_id: str
    epoch: int
    seed: int | None
    num_consumers: int
    consumer_index: int
    stream: Stream
    consumed: int
    anchor: tuple[int, int]
    job: str = ""
    ranks: int = 0
    """How many consumers read the job (a merged position's ``num_consumers``
    is 1); 0: ``num_consumers``."""
    elements: int = -1
    """Elements per epoch, where the dataset's cardinality says (-1: unknown)."""

    def next_index(self) -> int:
        """The dealt index this consumer takes next."""
        return self.consumer_index + self.consumed * self.num_consumers

    def to_state(self) -> dict[str, Any]:
        """As a plain structure (an iterator's ``get_state``)."""
        return {
            "format": POSITION_FORMAT,
            "dataset_id": self.dataset_id,
            "epoch": self.epoch,
            "seed": self.seed,
            "num_consumers": self.num_consumers,
            "consumer_index": self.consumer_index,
            "stream": self.stream.to_wire(),
            "consumed": self.consumed,
            "anchor": list(self.anchor),
            "job": self.job,
            "ranks": self.ranks,
            "elements": self.elements,
        }

    @classmethod
    def from_state(cls, state: Any) -> DealtPosition:
        """Parses ``to_state``'s structure; ``InvalidArgumentError`` for anything else."""
        if not is_position(state):
            raise InvalidArgumentError(
                f"not a saved multi-rank read (format {POSITION_FORMAT!r})"
            )
        try:
            stream = [int(v) for v in state["stream"]]
            anchor = [int(v) for v in state["anchor"]]
            position = cls(
                dataset_id=str(state["dataset_id"]),
                epoch=int(state["epoch"]),
                seed=None if state["seed"] is None else int(state["seed"]),
                num_consumers=int(state["num_consumers"]),
                consumer_index=int(state["consumer_index"]),
                stream=Stream(stream[0], Ranges(stream[1:])),
                consumed=int(state["consumed"]),
                anchor=(anchor[0], anchor[1]),
                job=str(state.get("job", "")),
                ranks=int(state.get("ranks", 0)),
                elements=int(state.get("elements", -1)),
            )
        except (KeyError, IndexError, TypeError, ValueError) as error:
            raise InvalidArgumentError(
                f"malformed saved multi-rank read: {error!r}"
            ) from None
        if not 0 <= position.consumer_index < position.num_consumers:
            raise InvalidArgumentError(
                f"saved consumer_index {position.consumer_index} is outside "
                f"[0, {position.num_consumers})"
            )
        if position.consumed < 0 or len(stream) % 2 == 0:
            raise InvalidArgumentError("malformed saved multi-rank read")
        return position


def is_position(state: Any) -> bool:
    """Whether ``state`` is a dealt position's structure (of one rank or merged)."""
    return isinstance(state, dict) and state.get("format") == POSITION_FORMAT


@dataclass(frozen=True)
class Resume:
    """Where a restored dealt iteration starts: the merged position of a job."""

    epoch: int
    start_ordinal: int
    stream: Stream

    def to_wire(self) -> list[int]:
        """``GetOrCreateIteration.resume_deal``: ``[epoch, ordinal, start, *skip]``."""
        return [self.epoch, self.start_ordinal, *self.stream.to_wire()]

    @classmethod
    def from_wire(cls, values: list[int]) -> Resume:
        if len(values) < 3 or len(values) % 2 == 0:
            raise InvalidArgumentError(f"malformed resume_deal {values[:8]!r}")
        skip = values[3:]
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values) or any(
            a >= b for a, b in itertools.pairwise(skip)
        ):
            raise InvalidArgumentError("resume_deal: expected ints, sorted skip ranges")
        epoch, ordinal, start = values[:3]
        if min(epoch, ordinal, start) < 0:
            raise InvalidArgumentError(f"resume_deal: negative value in {values[:3]}")
        return cls(epoch, ordinal, Stream(start, Ranges(skip)))


def merge(states: list[Any]) -> dict[str, Any]:
    """The job's position from every consumer's ``DealtPosition`` structure.

    The result is itself a position (``consumer_index`` 0 of 1 consumer, none
    consumed) whose stream deals exactly the tokens no consumer had consumed.

    >>> a = DealtPosition("7", 0, 3, 2, 0, Stream(), 2, (0, 0)).to_state()
    >>> b = DealtPosition("7", 0, 3, 2, 1, Stream(), 3, (1, 4)).to_state()
    >>> merged = DealtPosition.from_state(merge([b, a]))
    >>> merged.stream.start, list(merged.stream.skip), merged.anchor
    (4, [5, 6], (1, 4))
    """
    positions = [DealtPosition.from_state(s) for s in states]
    if not positions:
        raise InvalidArgumentError("merge_positions needs the states of every consumer")
    first = positions[0]
    for p in positions[1:]:
        _check_same_read(first, p)
    _check_every_consumer(positions, first.num_consumers)
    stream = first.stream
    low = min(p.next_index() for p in positions)
    first_free = stream.token_at(low)
    consumed = _consumed(positions, stream, low, first_free)
    anchors = [p.anchor for p in positions if p.anchor[1] <= first_free]
    ordinal, offset = max(anchors, key=lambda a: a[1])
    consumed.discard(0, offset)
    merged = DealtPosition(
        first.dataset_id, first.epoch, first.seed, 1, 0,
        Stream(offset, consumed), 0, (ordinal, offset), first.job,
        first.num_consumers, first.elements,
    )  # fmt: skip
    return merged.to_state()


def _check_same_read(first: DealtPosition, other: DealtPosition) -> None:
    """Raises unless ``other`` is a position of the same read as ``first``."""
    for name in ("dataset_id", "job", "epoch", "seed", "num_consumers"):
        if getattr(other, name) != getattr(first, name):
            raise InvalidArgumentError(
                f"the states are of different reads: {name} "
                f"{getattr(first, name)!r} and {getattr(other, name)!r}"
            )
    if other.stream != first.stream:
        raise InvalidArgumentError("the states are of different (restored) reads")


def _check_every_consumer(positions: list[DealtPosition], num_consumers: int) -> None:
    """Raises unless ``positions`` hold one state of each consumer."""
    indices = sorted(p.consumer_index for p in positions)
    if indices != list(range(num_consumers)):
        missing = sorted(set(range(num_consumers)) - set(indices))
        raise InvalidArgumentError(
            f"merge_positions needs one state of each of the {num_consumers} "
            f"consumers; consumer indices given {indices[:16]}, missing {missing[:16]}"
        )


def _consumed(
    positions: list[DealtPosition], stream: Stream, low: int, first_free: int
) -> Ranges:
    """The tokens of ``stream`` some consumer consumed (or skipped), as ranges.

    ``low``: the lowest next index of any consumer, whose token is ``first_free``:
    every token before it is consumed.
    """
    R = len(positions)  # one position per consumer (checked by the caller)
    consumed = Ranges(stream.skip)
    consumed.add(stream.start, first_free)
    for p in positions:
        for index in range(low + (p.consumer_index - low) % R, p.next_index(), R):
            token = stream.token_at(index)
            consumed.add(token, token + 1)
    return consumed


EpochSize = Callable[[DealtPosition, int], "int | None"]
"""``(position, limit)`` -> the elements of ``position``'s epoch, or None if
more than ``limit`` (``advance`` asks where the dataset's size is unknown)."""


def advance(
    state: Any, elements: int, epoch_size: EpochSize | None = None
) -> dict[str, Any]:
    """A merged position (``merge``) ``elements`` further on, those elements skipped.

    ``elements`` count in the job's global order (dealt tokens): restoring
    the result deals what the uninterrupted run would have dealt after them,
    on any number of consumers. Past the epoch's end the rest is skipped in
    the next epoch: the uninterrupted run of ``ranks`` consumers deals an
    epoch's elements in whole rounds, so the at most ``ranks - 1`` of a last
    incomplete round count for nothing. The epoch's size comes from the
    position (``elements``), else from ``epoch_size`` (None: unknown, refused
    with ``FailedPreconditionError`` where the advance may reach the end).

    >>> merged = merge([DealtPosition("7", 0, 3, 2, r, Stream(), 5, (0, 0), "",
    ...     elements=24).to_state() for r in range(2)])
    >>> after = DealtPosition.from_state(advance(merged, 6))
    >>> after.epoch, after.stream.token_at(0)  # 10 consumed, 6 skipped
    (0, 16)
    >>> after = DealtPosition.from_state(advance(merged, 15))  # 14 dealt, then 1
    >>> after.epoch, after.stream.token_at(0)
    (1, 1)
    """
    position = _merged(state, "advance_position takes")
    if type(elements) is not int or elements < 0:
        raise InvalidArgumentError(
            f"advance_position elements must be an int >= 0, got {elements!r}"
        )
    ranks = position.ranks or 1
    while True:
        stream = position.stream
        size = _epoch_size(position, stream.token_at(elements + ranks), epoch_size)
        if size is not None:
            left = stream.index_of(size)  # the epoch's tokens not dealt yet
            dealt = left - left % ranks  # in whole rounds
            if elements >= dealt:
                elements -= dealt
                position = dataclasses.replace(
                    position, epoch=position.epoch + 1, stream=Stream(), anchor=(0, 0)
                )
                continue
        skip = Ranges(stream.skip)
        skip.add(stream.start, stream.token_at(elements))
        return dataclasses.replace(
            position, stream=Stream(stream.start, skip)
        ).to_state()


def _epoch_size(
    position: DealtPosition, limit: int, epoch_size: EpochSize | None
) -> int | None:
    """The elements of ``position``'s epoch; None where more than ``limit``."""
    if position.elements >= 0:
        return position.elements
    if epoch_size is None:
        raise FailedPreconditionError(
            "advance_position: the dataset's size is unknown (its cardinality "
            "is: a filter, a pack, an interleave…), so where the epoch ends is "
            "too; pass the dataset (advance_position(position, elements, "
            "dataset)), whose splits it then counts as far as it needs"
        )
    return epoch_size(position, limit)


def _merged(state: Any, what: str) -> DealtPosition:
    """The merged position ``state``; ``InvalidArgumentError`` for one consumer's."""
    position = DealtPosition.from_state(state)
    if position.num_consumers != 1 or position.consumed:
        raise InvalidArgumentError(
            f"{what} service.merge_positions(states) of every consumer's save(), "
            f"not one consumer's (consumer {position.consumer_index} of "
            f"{position.num_consumers})"
        )
    return position


def resume_of(state: Any) -> Resume:
    """Where a merged position (``merge``) resumes."""
    position = _merged(state, "restore a multi-rank read from")
    return Resume(position.epoch, position.anchor[0], position.stream)


def first_skip(stream: Stream, offset: int) -> int:
    """How many leading elements of the split at token ``offset`` are skipped.

    >>> first_skip(Stream(8, Ranges([8, 11, 13, 14])), 8)
    3
    """
    i = bisect.bisect_right(stream.skip, offset)
    if i % 2 == 1:
        return stream.skip[i] - offset
    return 0
