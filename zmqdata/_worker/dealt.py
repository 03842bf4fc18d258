"""Multi-rank reads on a worker: a task's output by split and index.

A dealt task (``_wire/deal.py``) runs its pipeline on one split at a time;
element ``i`` of split ``ordinal`` is kept under ``(ordinal, i)`` until a
consumer asks for exactly it (``GetElements.split`` and ``indices``): the
consumer knows which tokens are its own, the worker only what it made.
``answer`` decides a request from the buffer alone (pure, like
``serving.from_buffer``); a request for elements not made yet is parked. Splits
the dispatcher released (every consumer is past them) are dropped.

A source that reads in bulk puts a block (``_dataset/block.py``) at its first
index: its rows are kept together and each request takes the ones it asks for
as one block (a consumer's indices step by R: strided columns), sent
columnar. A block counts the rows it has left, and their share of its bytes;
once half of them are taken the rest are copied out, so that it never holds
more than twice the bytes counted.

>>> from zmqdata._worker.buffer import Raw
>>> buffer = DealtBuffer(max_items=16, max_bytes=1 << 20)
>>> buffer.open(3, skip=0)  # True would mean: a parked request waits for it
False
>>> request = m.GetElements(task_id=1, client_id=1, max_elements=2, split=3, indices=[1])
>>> answer(request, buffer) is None  # element 1 is not made yet: park
True
>>> buffer.put(3, 0, Raw("a"), 8), buffer.put(3, 1, Raw("b"), 8)  # 1 is awaited
(False, True)
>>> buffer.end(3, 2)
>>> reply = answer(request, buffer)
>>> [item.element for item in reply.items], reply.indices, reply.produced, reply.ended
(['b'], [1], 2, True)
>>> import numpy as np
>>> buffer.open(4, skip=0)
False
>>> buffer.put(4, 0, Block(np.int64(0), [np.arange(10)], 10), 80)
False
>>> reply = answer(m.GetElements(task_id=1, client_id=1, max_elements=4,
...                              split=4, indices=[1, 3, 5, 7]), buffer)
>>> [block.columns[0].tolist() for block in reply.items], buffer.buffered()
([[1, 3, 5, 7]], (7, 56))
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from zmqdata._dataset.block import Block
from zmqdata._wire import messages as m
from zmqdata._worker.buffer import Item, count, elements_in, wait_for_room
from zmqdata._worker.serving import Refuse

COUNTS_TOLD = 64
"""How many of the task's latest split counts every reply carries."""


class _Rows:
    """A block a split keeps: the rows not taken yet, and their split indices."""

    __slots__ = ("block", "end", "indices", "kept", "left", "nbytes")

    def __init__(self, block: Block, index: int, nbytes: int, kept: np.ndarray) -> None:
        self.block = block
        self.indices = np.arange(index, index + block.n)
        """The split index of each row, ascending."""
        self.end = index + block.n
        """Past the last index it ever held: where the next block may start."""
        self.kept = kept
        self.left = int(np.count_nonzero(kept))
        self.nbytes = nbytes
        """What all of ``block``'s rows hold."""

    @property
    def counted(self) -> int:
        """The bytes counted for it: its rows' share of ``nbytes`` left."""
        return self.nbytes * self.left // self.block.n

    def take(self, run: list[int]) -> Block | None:
        """The longest prefix of ``run`` (ascending indices) kept here, taken out."""
        wanted = np.asarray(run, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.indices, wanted), self.block.n - 1)
        held = (self.indices[at] == wanted) & self.kept[at]
        if not held.all():
            at = at[: int(np.argmin(held))]
        if not len(at):
            return None
        self.kept[at] = False
        self.left -= len(at)
        return _pick(self.block, at)

    def drop(self, index: int) -> bool:
        """Drops the row of split index ``index`` if kept; whether it was."""
        at = int(np.searchsorted(self.indices, index))
        if at == self.block.n or self.indices[at] != index or not self.kept[at]:
            return False
        self.kept[at] = False
        self.left -= 1
        return True

    def compact(self) -> None:
        """Copies out the rows left once they are half or less of the block."""
        if not self.left or 2 * self.left > self.block.n:
            return
        at = np.flatnonzero(self.kept)
        self.nbytes = self.nbytes * self.left // self.block.n
        self.block = _pick(self.block, at, copy=True)
        self.indices = self.indices[at]
        self.kept = np.ones(self.left, dtype=bool)


def _pick(block: Block, at: np.ndarray, copy: bool = False) -> Block:
    """The rows of ``block`` at positions ``at`` (ascending) as a block.

    Evenly spaced rows are strided views (a dealt consumer's every R-th),
    unless ``copy``.
    """
    n = len(at)
    if n == block.n:
        return block
    first = block.element(int(at[0]))
    step = int(at[1] - at[0]) if n > 1 else 1
    if not copy and (n < 3 or bool((np.diff(at) == step).all())):
        rows = slice(int(at[0]), int(at[-1]) + 1, step)
        return Block(first, [column[rows] for column in block.columns], n)
    listed = at.tolist()
    columns = [
        column[at] if isinstance(column, np.ndarray) else [column[i] for i in listed]
        for column in block.columns
    ]
    return Block(first, columns, n)


@dataclass
class _Split:
    skip: int
    items: dict[int, tuple[Item, int]] = field(default_factory=dict)
    """Elements put one by one, by index: ``(item, nbytes)``."""
    blocks: dict[int, _Rows] = field(default_factory=dict)
    """Blocks put, by their first index."""
    starts: list[int] = field(default_factory=list)
    """The first index of every block put, ascending (of some dropped since)."""
    produced: int = 0
    ended: bool = False
    had: set[int] = field(default_factory=set)
    """Indices consumers said they have (a split made again): not kept."""
    count: int = 0
    """The elements it keeps."""
    nbytes: int = 0
    """The bytes counted for them."""

    def keep(self, index: int, item: Item, nbytes: int) -> None:
        """Keeps ``item`` (a block: its rows) at ``index``, less what is not wanted."""
        if type(item) is not Block:
            if index >= self.skip and index not in self.had:
                self.items[index] = (item, nbytes)
                self.count += 1
                self.nbytes += nbytes
            return
        indices = np.arange(index, index + item.n)
        kept = indices >= self.skip
        if self.had:
            kept &= ~np.isin(indices, list(self.had))
        rows = _Rows(item, index, nbytes, kept)
        if rows.left:
            rows.compact()
            self.blocks[index] = rows
            self.starts.append(index)
            self.count += rows.left
            self.nbytes += rows.counted

    def take(self, indices: list[int]) -> list[Item]:
        """The items of the longest run of ``indices`` kept, removed."""
        items: list[Item] = []
        i = 0
        while i < len(indices):
            entry = self.items.pop(indices[i], None)
            if entry is not None:
                items.append(entry[0])
                self.count -= 1
                self.nbytes -= entry[1]
                i += 1
                continue
            found = self._rows_at(indices[i])
            if found is None:
                break
            key, rows = found
            end = bisect.bisect_left(indices, rows.end, i)
            counted = rows.counted
            block = rows.take(indices[i:end])
            if block is None:
                break
            items.append(block)
            self._taken_from(key, rows, block.n, counted)
            i += block.n
            if i < end:
                break
        return items

    def drop(self, index: int) -> bool:
        """Drops element ``index`` if kept; whether it was."""
        entry = self.items.pop(index, None)
        if entry is not None:
            self.count -= 1
            self.nbytes -= entry[1]
            return True
        found = self._rows_at(index)
        if found is None:
            return False
        key, rows = found
        counted = rows.counted
        if not rows.drop(index):
            return False
        self._taken_from(key, rows, 1, counted)
        return True

    def _rows_at(self, index: int) -> tuple[int, _Rows] | None:
        """The block kept that ``index`` falls in (its first index, its rows), if any."""
        at = bisect.bisect_right(self.starts, index) - 1
        if at < 0:
            return None
        key = self.starts[at]
        rows = self.blocks.get(key)
        if rows is None or index >= rows.end:
            return None
        return key, rows

    def _taken_from(self, key: int, rows: _Rows, n: int, counted: int) -> None:
        """``n`` rows left block ``key``, which counted ``counted`` bytes before."""
        self.count -= n
        rows.compact()
        self.nbytes -= counted - rows.counted
        if not rows.left:
            del self.blocks[key]
            if len(self.starts) > 2 * len(self.blocks) + 8:
                self.starts = [q for q in self.starts if q in self.blocks]

    def held(self) -> list[Item]:
        """What it keeps (a block whole), dropping it."""
        dropped = [item for item, _ in self.items.values()]
        dropped += [rows.block for rows in self.blocks.values()]
        self.items.clear()
        self.blocks.clear()
        self.starts.clear()
        self.count = self.nbytes = 0
        return dropped


@dataclass(frozen=True, slots=True)
class DealtSend:
    """Send these items of ``split`` (possibly none, to tell its count)."""

    items: list[Item]
    split: int
    indices: list[int]
    produced: int
    ended: bool
    counts: list[int]
    end_of_sequence: ClassVar[bool] = False
    """A dealt task's readers end by counts, never by an end of sequence."""

    def told(self) -> dict[str, Any]:
        """What the reply's header says besides its items (``Elements``)."""
        return {
            "split": self.split,
            "indices": self.indices,
            "produced": self.produced,
            "ended": self.ended,
            "counts": self.counts,
        }


class DealtBuffer:
    """Thread-safe: the producer puts, the data loop takes; bounded like TaskBuffer."""

    def __init__(self, max_items: int, max_bytes: int) -> None:
        self._splits: dict[int, _Split] = {}
        self._counts: deque[tuple[int, int]] = deque(maxlen=COUNTS_TOLD)
        self._items = self._bytes = 0
        self._max_items, self._max_bytes = max_items, max_bytes
        self._released = 0
        self._had_early: dict[int, set[int]] = {}
        """``discard`` of a split not opened yet (kept until it is)."""
        self._awaited: set[tuple[int, int]] = set()
        """``(ordinal, index)`` a parked request waits for: its arrival wakes the loop."""
        self._cond = threading.Condition()
        self._done = False
        self.error: tuple[str, str] | None = None

    # ------------------------------------------------------------ producer

    def open(self, ordinal: int, skip: int) -> bool:
        """Split ``ordinal`` is this task's; its first ``skip`` elements are not kept.

        Returns whether a parked request waits for it (wake the data loop).
        """
        with self._cond:
            had = self._had_early.pop(ordinal, set())
            if ordinal >= self._released:
                self._splits[ordinal] = _Split(skip, had=had)
            if (ordinal, -1) in self._awaited:
                self._awaited.discard((ordinal, -1))
                return True
            return False

    def put(
        self,
        ordinal: int,
        index: int,
        item: Item,
        nbytes: int,
        stop: threading.Event | None = None,
    ) -> bool:
        """Keeps element ``index`` of a split, waiting for room (``Cancelled`` on stop).

        A block is its elements from ``index`` on. It goes past the bound by
        one split at most (``_may_exceed``), and by the splits of a lost
        worker made again here, so the bound holds for every job, one whose
        ranks never come too: what the other splits hold then is the slower
        ranks' share, and the readers ahead wait for them. Returns whether a
        parked request waits for one of its elements (wake the data loop).
        """
        n = elements_in(item)
        with self._cond:
            while (
                self._items
                and (
                    self._items + n > self._max_items
                    or self._bytes + nbytes > self._max_bytes
                )
                and not self._may_exceed(ordinal)
            ):
                wait_for_room(self._cond, stop)
            split = self._splits.get(ordinal)
            if split is None:  # released meanwhile
                return False
            split.produced = index + n
            before = split.count, split.nbytes
            split.keep(index, item, nbytes)
            self._recount(split, before)
            made = {a for a in self._awaited if a[0] == ordinal and a[1] < index + n}
            self._awaited -= made
            return bool(made)

    def _recount(self, split: _Split, before: tuple[int, int]) -> None:
        """Counts what ``split`` keeps now; ``before``: its ``(count, nbytes)`` (under the lock)."""
        self._items += split.count - before[0]
        self._bytes += split.nbytes - before[1]

    def _may_exceed(self, ordinal: int) -> bool:
        """Whether a put of split ``ordinal`` may go past the bound (under the lock).

        No deadlock: the producer waits only while what the buffer holds
        can leave without it. Every reader has a request out for the
        earliest element it lacks (``DealPlan._ask``), so the other splits
        drain while their ranks read, and it goes on while a parked request
        waits on it and: a split below ``ordinal`` is awaited (a lost
        worker's, handed here, opened after this one); or the other splits
        hold less than the bound (this split's elements wanted by nobody,
        such as tokens a restored read skips, or those ranks had of a split
        made again, hold it full: one split more, so a rank that never comes
        holds no more); or a later split holds elements (this one is made
        again: nobody locates those before its count).
        """
        if ordinal not in self._splits:  # released meanwhile: nothing is kept
            return True
        if not self._awaited:
            return False
        if any(q < ordinal for q, _ in self._awaited):
            return True
        making = self._splits[ordinal]
        others = self._items - making.count, self._bytes - making.nbytes
        if others[0] < self._max_items and others[1] <= self._max_bytes:
            return True
        return any(q > ordinal and split.count for q, split in self._splits.items())

    def discard(self, ordinal: int, indices: list[int]) -> None:
        """Consumers have these elements of a split made again: drop them."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is None:  # not opened yet (a hostile peer fills no memory)
                if ordinal >= self._released and len(self._had_early) < 64:
                    early = self._had_early.setdefault(ordinal, set())
                    early.update(indices[: max(0, self._max_items * 4 - len(early))])
                return
            before = split.count, split.nbytes
            for index in indices[: max(0, self._max_items * 4 - len(split.had))]:
                if not split.drop(index) and index >= split.produced:
                    split.had.add(index)
            self._recount(split, before)
            self._cond.notify_all()

    def awaits(self, ordinal: int, index: int) -> bool:
        """A request is parked until element ``index`` of split ``ordinal`` exists.

        ``index`` -1: until the split is opened. Returns False, or True if it
        arrived meanwhile (ask again: nothing will wake the request).
        """
        with self._cond:
            split = self._splits.get(ordinal)
            if split is not None and (index == -1 or index < split.produced):
                return True
            self._awaited.add((ordinal, index))
            self._cond.notify_all()  # a producer waiting for room may go on
            return False

    def end(self, ordinal: int, count: int) -> None:
        """Split ``ordinal`` made ``count`` elements."""
        with self._cond:
            split = self._splits.get(ordinal)
            if split is not None:
                split.produced, split.ended = count, True
            self._counts.append((ordinal, count))
            # Requests parked past the end are answered with the count now.
            self._awaited = {
                (q, i) for q, i in self._awaited if q != ordinal or 0 <= i < count
            }

    def release(self, below: int) -> None:
        """Drops the splits below ``below``: every consumer is past them."""
        with self._cond:
            self._released = max(self._released, below)
            for ordinal in [q for q in self._splits if q < below]:
                self._drop(self._splits.pop(ordinal))
            self._awaited = {a for a in self._awaited if a[0] >= below}
            for ordinal in [q for q in self._had_early if q < below]:
                del self._had_early[ordinal]
            self._cond.notify_all()

    def finish(self, error: tuple[str, str] | None) -> None:
        """The producer is done (``error``: ``(code, message)``)."""
        with self._cond:
            self._done, self.error = True, error

    # ------------------------------------------------------------ data loop

    def take(
        self, ordinal: int, indices: list[int]
    ) -> tuple[list[Item], _Split | None]:
        """The longest run of ``indices`` made and kept, removed from the buffer.

        Its items hold ``buffer.count(items)`` elements: that many of
        ``indices``, the first ones.
        """
        with self._cond:
            split = self._splits.get(ordinal)
            if split is None:
                return [], None
            before = split.count, split.nbytes
            items = split.take(indices)
            if items:
                self._recount(split, before)
                self._cond.notify_all()
            return items, split

    def counts(self) -> list[int]:
        """``[ordinal, count, ...]`` of the splits ended lately."""
        with self._cond:
            return [v for pair in self._counts for v in pair]

    @property
    def released(self) -> int:
        return self._released

    def clear(self) -> list[Item]:
        """Drops everything (the task stopped); returns the items dropped."""
        with self._cond:
            dropped = [item for s in self._splits.values() for item in self._drop(s)]
            self._splits.clear()
            self._awaited.clear()
            self._had_early.clear()
            return dropped

    def _drop(self, split: _Split) -> list[Item]:
        """Drops what ``split`` keeps (under the lock); returns its items."""
        self._items -= split.count
        self._bytes -= split.nbytes
        return split.held()

    @property
    def ended(self) -> bool:
        """True once the producer is done (elements may remain)."""
        with self._cond:
            return self._done

    finished = ended
    """A dealt task is finished for the dispatcher once its producer is: what
    it holds is served until its iteration ends."""

    def buffered(self) -> tuple[int, int]:
        """``(items, bytes)`` held (for stats)."""
        with self._cond:
            return self._items, self._bytes


def answer(request: m.GetElements, buffer: DealtBuffer) -> DealtSend | Refuse | None:
    """What to answer a dealt ``request`` now; None to park it until there is news.

    Items come as the longest run of the indices asked for that is made. A
    request past a split's end is answered with no item and the count; one
    for a split released (or never this task's, once the producer is done)
    is refused.
    """
    invalid = _invalid(request)
    if invalid is not None:
        return invalid
    if request.have:
        buffer.discard(request.split, request.have)
    if not request.indices:
        return DealtSend([], request.split, [], 0, False, buffer.counts())
    items, split = buffer.take(request.split, request.indices)
    if split is None:
        return _not_open(request, buffer)
    if items:
        taken = request.indices[: count(items)]
        return DealtSend(
            items, request.split, taken, split.produced, split.ended, buffer.counts()
        )
    return _none_taken(request, buffer, split)


def _invalid(request: m.GetElements) -> Refuse | None:
    """A refusal if ``request`` names no split, or neither indices nor what it has."""
    indices = request.indices
    wanted = bool(indices) and sorted(set(indices)) == indices
    if request.split >= 0 and (wanted or (request.have and not indices)):
        return None
    return Refuse(
        "INVALID_ARGUMENT",
        "a dealt read asks for a split (>= 0) and ascending distinct indices, "
        "or says what it has of one",
    )


def _not_open(request: m.GetElements, buffer: DealtBuffer) -> DealtSend | Refuse | None:
    """A request for a split the buffer does not hold: refused, or parked until opened."""
    if request.split < buffer.released or buffer.ended:
        if buffer.error is not None:
            return Refuse(*buffer.error)
        return Refuse(
            m.ABSENT, f"split {request.split} is not held by task {request.task_id}"
        )
    if buffer.awaits(request.split, -1):
        return answer(request, buffer)  # opened meanwhile
    return None  # handed to this task, not opened by its producer yet


def _none_taken(
    request: m.GetElements, buffer: DealtBuffer, split: _Split
) -> DealtSend | Refuse | None:
    """A request whose first index is not held: sent already, past the end, or to come."""
    first = request.indices[0]
    if first < split.produced:
        return Refuse(
            "FAILED_PRECONDITION",
            f"element {first} of split {request.split} was sent already (or "
            "skipped): was a consumer restarted under the same job name?",
        )
    if split.ended:
        return DealtSend([], request.split, [], split.produced, True, buffer.counts())
    if buffer.ended and buffer.error is not None:
        return Refuse(*buffer.error)
    if buffer.awaits(request.split, first):  # made meanwhile
        return answer(request, buffer)
    return None
