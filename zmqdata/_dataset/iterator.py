"""The stateful side of a pipeline: iterators, their context, split providers.

A ``Dataset`` only describes a pipeline; iterating it builds one
``DatasetIterator`` per op, each pulling from its inputs' iterators. Iterators
can report their position with ``get_state()`` and jump back to it with
``set_state()`` (grain's checkpoint shape).

>>> import zmqdata as zd
>>> it = iter(zd.Dataset.range(5))
>>> next(it), next(it)
(np.int64(0), np.int64(1))
>>> state = it.get_state()
>>> list(it)
[np.int64(2), np.int64(3), np.int64(4)]
>>> it.set_state(state)
>>> list(it)
[np.int64(2), np.int64(3), np.int64(4)]
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

from zmqdata._dataset import saved
from zmqdata._wire.lineage import EMPTY, Lineage, join
from zmqdata.errors import FailedPreconditionError

if TYPE_CHECKING:
    from zmqdata._dataset.block import Block
    from zmqdata._dataset.marks import Marks
    from zmqdata._dataset.node import Node
    from zmqdata._dataset.profile import Profile

Split = Any
"""One unit of work of a splittable source: indices ``[lo, hi]`` or ``[lo, hi, base]``.

The key (lineage) of source element ``i`` read in such a split is ``base + i``
(``base`` 0 when absent).
"""


class SplitProvider(abc.ABC):
    """Hands a source its splits one at a time (DYNAMIC / FILE sharding)."""

    shared: bool = False
    """True when other readers take splits from the same provider (DYNAMIC): then
    an empty pass here says nothing about whether the data is empty."""

    @abc.abstractmethod
    def next_split(self) -> Split | None:
        """The next split, or None when there are no more in this repetition."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Starts the next repetition (an outer ``repeat`` re-reads the source)."""

    def made_nothing(self) -> bool:
        """Hears that an endless ``repeat``'s pass made nothing: whether the repeat ends.

        It does at once here, as in tf.data; a shared provider tells the
        dispatcher and ends once every worker's pass came up empty.
        """
        return True

    def get_state(self) -> Any:
        """The provider's position, where it can be restored (local providers)."""
        return None

    def set_state(self, state: Any) -> None:  # noqa: B027 - remote providers can't
        """Restores a position from ``get_state``."""


class ListSplitProvider(SplitProvider):
    """Serves a fixed list of splits, the same list again after each reset.

    >>> provider = ListSplitProvider([[0, 2], [4, 6]])
    >>> provider.next_split(), provider.next_split(), provider.next_split()
    ([0, 2], [4, 6], None)
    """

    def __init__(self, splits: Sequence[Split]) -> None:
        self._splits = list(splits)
        self._position = 0

    def next_split(self) -> Split | None:
        if self._position >= len(self._splits):
            return None
        self._position += 1
        return self._splits[self._position - 1]

    def reset(self) -> None:
        self._position = 0

    def get_state(self) -> Any:
        return self._position

    def set_state(self, state: Any) -> None:
        self._position = state


class IgnoredErrors:
    """How many errors ``ignore_errors`` let pass, and the last one's message.

    One producer thread counts; others read (a stale read is fine).
    """

    __slots__ = ("count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last = ""

    def add(self, error: BaseException) -> None:
        self.count += 1
        self.last = f"{type(error).__name__}: {error}"[:500]  # heartbeats stay small


@dataclass(frozen=True, slots=True)
class SplitChunk:
    """A service job's word on the one split a pass runs under a ``snapshot``.

    ``chunk`` (``[name, elements, bytes, crc32]``): the snapshot holds this
    split's elements, read them and run none of the ops before it. ``None``:
    run them, and write the split's chunk if the run makes the whole split;
    ``written`` reports a committed chunk as ``[ordinal, name, elements,
    bytes, crc32]``, ``failed`` why one could not be written
    (``_dataset/ops/cache_chunks.py``).
    """

    ordinal: int
    chunk: list[Any] | None
    written: Callable[[list[Any]], None]
    failed: Callable[[str], None]


@dataclass
class IterContext:
    """What every iterator of one pass shares.

    ``split_source`` is the node whose data comes from ``split_provider`` rather
    than from its whole source (set for DYNAMIC and FILE sharding). With
    ``lineage``, iterators report which split-source elements each element
    stands for (``DatasetIterator.lineage``). ``ignored`` tallies the errors
    ``ignore_errors`` let pass (a worker reports them in the job's status).
    """

    split_source: Node | None = None
    split_provider: SplitProvider | None = None
    shard_hint: tuple[int, int] | None = None
    passes: dict[int, tuple[int, int]] = field(default_factory=dict)
    lineage: bool = False
    ignored: IgnoredErrors = field(default_factory=IgnoredErrors)
    marks: Marks | None = None
    """With ``lineage``, the marks of expanding ops' outputs (``_dataset/marks.py``)."""
    profile: Profile | None = None
    """Per-op statistics of this pass (``_dataset/profile.py``), if kept."""
    chunk: SplitChunk | None = None
    """A service job's one split under a ``snapshot``: read or write its chunk."""

    def provider_for(self, node: Node) -> SplitProvider | None:
        """The split provider if ``node`` is the split source of this pass."""
        return self.split_provider if node is self.split_source else None

    def next_epoch(self, node: Node) -> tuple[int, int]:
        """``(pass, epoch)`` of a new iterator over ``node`` within this pass.

        ``pass`` counts the passes over ``node``'s dataset, ``epoch`` the
        iterators an outer ``repeat`` built over ``node`` in this one. Seeded
        reshuffles draw their order from both, so a restored iterator (see
        ``restore_epoch``) reshuffles its later epochs like the saved one would.
        """
        key = id(node)
        if key in self.passes:
            pass_index, epoch = self.passes[key]
            self.passes[key] = (pass_index, epoch + 1)
        else:
            self.passes[key] = (node.next_pass(), 0)
        return self.passes[key]

    def restore_epoch(self, node: Node, value: Sequence[int]) -> None:
        """Makes ``value`` (from ``next_epoch``) the current epoch of ``node``."""
        pass_index, epoch = value
        self.passes[id(node)] = (int(pass_index), int(epoch))


class DatasetIterator(Iterator[Any], abc.ABC):
    """An iterator over one pass of a pipeline, with a saveable position.

    In a context with ``lineage``, ``lineage`` is what the element (or column)
    ``next`` last returned stands for: the keys of the split source's elements
    that contributed only to elements returned so far, or that the pipeline
    dropped, and that no earlier element claimed. It may claim less (never
    more); iterators that do not track it leave it ``EMPTY``. When ``next``
    raises, an iterator may set ``lineage`` to what the failed element stood
    for (``ignore_errors`` claims it with the next element).
    """

    lineage: Lineage = EMPTY

    @abc.abstractmethod
    def __next__(self) -> Any: ...

    def get_state(self) -> dict[str, Any]:
        """The iterator's position, a structure of plain values and arrays."""
        raise FailedPreconditionError(
            f"{type(self).__name__} does not support saving its position"
        )

    def set_state(self, state: dict[str, Any]) -> None:
        """Moves the iterator to a position returned by ``get_state``."""
        raise FailedPreconditionError(
            f"{type(self).__name__} does not support restoring its position"
        )

    def save(self) -> bytes:
        """The iterator's position as bytes, for ``restore`` (here or in a new process).

        Raises ``FailedPreconditionError`` where the position cannot be saved
        (ops that run ahead on threads; a service read other than one
        consumer's ``distributed_epoch``: docs/modes.md).

        >>> import zmqdata as zd
        >>> it = iter(zd.Dataset.range(5).batch(2))
        >>> first, state = next(it), it.save()
        >>> again = iter(zd.Dataset.range(5).batch(2)); again.restore(state)
        >>> [b.tolist() for b in again]
        [[2, 3], [4]]
        """
        return saved.encode(self.get_state())

    def restore(self, state: bytes) -> None:
        """Moves the iterator to a position ``save`` returned."""
        self.set_state(saved.decode(state))

    def next_many(self, limit: int) -> list[Any] | None:
        """Up to ``limit`` next elements at once ([] at the end), or None: "call ``next``".

        With lineage, they stand for ``lineage`` together (a worker's
        ``split_runs``: consecutive keys), so an op that groups them
        (``batch``) tracks one range, not one per element.
        """
        return None

    def next_block(self, limit: int) -> Block | None:
        """Up to ``limit`` next elements as one ``Block``, or None.

        Sources that read in bulk (``range``, ``from_tensor_slices``,
        Parquet rows), and the ops that pass blocks on (``map`` with
        ``vectorized``, ``filter``, ``batch``, ``unbatch``), return them this
        way; a worker sends a block as one item (``_dataset/block.py``). An
        empty block (``n`` 0) means the end. The default, None, means "call
        ``next``"; an iterator that returned a block returns blocks to the
        end. With lineage, a block stands for ``lineage``, element by element
        in order (``Block.widths``).
        """
        return None

    def close(self) -> None:
        """Releases threads and other resources; the iterator ends."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UnaryIterator(DatasetIterator):
    """An iterator over one input whose own state is only the input's."""

    def __init__(self, source: DatasetIterator) -> None:
        self._input = source

    def get_state(self) -> dict[str, Any]:
        return {"input": self._input.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state["input"])

    def close(self) -> None:
        self._input.close()


class GroupingIterator(UnaryIterator):
    """An op that holds input elements in groups and returns each group as one.

    ``in_read_order`` (not None) tracks lineage: a group claims what its
    elements stood for (``Reorder``, ``expands_below``). Subclasses read with
    ``_read`` and return a group after ``_claim`` of its elements' numbers.
    """

    def __init__(self, source: DatasetIterator, in_read_order: bool | None) -> None:
        super().__init__(source)
        self._input_done = False
        self._in_read_order = in_read_order
        self._order = None if in_read_order is None else Reorder(in_read_order)

    def _read(
        self, measure: Callable[[Any], Any]
    ) -> tuple[Any, Any, int | None] | None:
        """The next input element, ``measure(element)`` and its number; None at the end.

        The number is None without lineage. If ``measure`` raises, what the element stood for goes with the error
        (so ``ignore_errors`` after the op claims it).
        """
        try:
            element = next(self._input)
        except StopIteration:
            self._input_done = True
            return None
        order = self._order
        number = None if order is None else order.enter(self._input.lineage)
        try:
            return element, measure(element), number
        except Exception:
            if order is not None and number is not None:
                self.lineage = order.leave(number)
            raise

    def _claim(self, numbers: Iterable[int]) -> None:
        """The group of elements ``numbers`` goes out now: it claims them."""
        if self._order is not None:
            self.lineage = self._order.leave_all(numbers)

    def _restart_order(self) -> None:
        """After ``set_state``: a fresh ``Reorder`` for the groups restored."""
        if self._in_read_order is not None:
            self._order = Reorder(self._in_read_order)

    def _restored_number(self) -> int | None:
        """A number for an element held in a restored group (claims nothing)."""
        return None if self._order is None else self._order.enter(EMPTY)


class Tap(UnaryIterator):
    """Reads through to its input; ``taken`` joins the lineages of what it read.

    The consumer resets ``taken`` to ``EMPTY`` to start counting afresh.
    """

    def __init__(self, source: DatasetIterator) -> None:
        super().__init__(source)
        self.taken: Lineage = EMPTY

    def __next__(self) -> Any:
        element = next(self._input)
        taken = self.taken
        self.taken = join(taken, self._input.lineage) if taken else self._input.lineage
        return element

    def next_block(self, limit: int) -> Block | None:
        block = self._input.next_block(limit)
        if block is not None and block.n:
            self.taken = join(self.taken, self._input.lineage)
        return block

    def get_state(self) -> dict[str, Any]:
        return self._input.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._input.set_state(state)


class _Consumed(DatasetIterator):
    """An iterator whose elements stand for the input elements read to make them."""

    def __init__(self, op: DatasetIterator, tap: Tap) -> None:
        self._op, self._tap = op, tap

    def __next__(self) -> Any:
        self._tap.taken = EMPTY
        element = next(self._op)
        self.lineage = self._tap.taken
        return element

    def next_block(self, limit: int) -> Block | None:
        self._tap.taken = EMPTY
        block = self._op.next_block(limit)
        self.lineage = self._tap.taken
        return block

    def get_state(self) -> dict[str, Any]:
        return self._op.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._op.set_state(state)

    def close(self) -> None:
        self._op.close()


class Reorder:
    """The lineages of elements an op returns in another order than it read them.

    An element's lineage may claim keys that elements read before it still
    hold (the last element of an unbatched batch claims the batch): below an
    op that ``expands``, an element's lineage is released only once every
    element read before it has been returned. Elsewhere each element claims
    its own keys when it is returned (``in_read_order=False``). ``enter``
    numbers an element read, ``leave`` returns what may be claimed once it is
    returned.

    >>> order = Reorder()
    >>> a, b = order.enter((0, 1)), order.enter((1, 2))
    >>> order.leave(b), order.leave(a)
    ((), (0, 2))
    >>> order = Reorder(in_read_order=False)
    >>> a, b = order.enter((0, 1)), order.enter((1, 2))
    >>> order.leave(b), order.leave(a)
    ((1, 2), (0, 1))
    """

    __slots__ = ("_held", "_in_read_order", "_left", "_low", "_read")

    def __init__(self, in_read_order: bool = True) -> None:
        self._in_read_order = in_read_order
        self._read = self._low = 0
        self._held: dict[int, Lineage] = {}  # read, not returned
        self._left: dict[int, Lineage] = {}  # returned, an earlier one not yet

    def enter(self, lineage: Lineage) -> int:
        """Numbers an element just read, of ``lineage``."""
        self._read += 1
        self._held[self._read - 1] = lineage
        return self._read - 1

    def leave(self, number: int) -> Lineage:
        """What element ``number``, returned now, may claim."""
        if not self._in_read_order:
            return self._held.pop(number)
        self._left[number] = self._held.pop(number)
        released = EMPTY
        while self._low in self._left:
            released = join(released, self._left.pop(self._low))
            self._low += 1
        return released

    def leave_all(self, numbers: Iterable[int]) -> Lineage:
        """What elements ``numbers``, returned now as one element, may claim.

        For ops that hold elements in groups (a bucket's batch, a packed row).

        >>> order = Reorder()
        >>> a, b, c = order.enter((0, 1)), order.enter((1, 2)), order.enter((2, 3))
        >>> order.leave_all([b, c]), order.leave_all([a])
        ((), (0, 3))
        """
        released = EMPTY
        for number in numbers:
            released = join(released, self.leave(number))
        return released


def expands_below(node: Node) -> bool:
    """Whether an op at or below ``node`` ``expands`` (see ``Reorder``).

    Not below a ``split_runs`` op: its outputs each claim their own key.
    """
    definition = node.definition
    if definition.runs_splits:
        return False
    return definition.expands or any(expands_below(n) for n in node.inputs)


def consuming(
    ctx: IterContext,
    source: DatasetIterator,
    build: Callable[[DatasetIterator], DatasetIterator],
) -> DatasetIterator:
    """``build(source)``, tracking lineage by what each ``next`` reads (if ``ctx`` does).

    For ops that hold no input element across calls (filter, batch, skip,
    ...): an element then stands for every input element read to make it,
    those it dropped included. Without lineage, it is ``build(source)`` itself.
    """
    if not ctx.lineage:
        return build(source)
    tap = Tap(source)
    return _Consumed(build(tap), tap)
