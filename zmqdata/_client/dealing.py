"""``DealPlan``: a multi-rank read, one consumer's turn of every round (pure).

The job's tokens (``_wire/deal.py``) are dealt in turn: this consumer, index
``r`` of ``R``, takes the dealt indices ``r, r+R, r+2R, …`` of the
iteration's ``Stream``. To ask for one it needs the token's split and index
there, which needs the split's offset: the sum of the counts of the splits
before it. The dispatcher says which task holds each split ordinal
(``IterationState.deal``); the workers say how many elements each split made
(``Elements.produced``, ``ended``, ``counts``). So the plan walks the splits
in order, asking each holder for exactly its own elements, a window ahead of
the trainer. An index asked for past its split's end comes back unanswered and
is asked again once the next split's offset is known.

An element goes to the trainer once its whole round is known to exist: the
last round of an epoch, if incomplete, goes to nobody, so every consumer
gets ``E // R`` elements of an epoch of ``E``. When a worker is lost its
splits move to other tasks and are made again, the same elements in the same
order: the plan asks the new holder for what it still lacks. Its methods
return what to send and deliver (``instructions``).

Nothing here runs per element in Python: the elements asked for are located
a split's worth at a time (``Stream.tokens_at``, ``Epoch.runs``), a reply's
run of them is slotted in at once (``Arrivals``) and delivered as a run.

>>> from zmqdata._client.options import ReadOptions
>>> plan = DealPlan(ReadOptions("s", "1", 1, "j", None, None, "AUTO", 1, 2))
>>> plan.deal_position()  # nothing known before the first IterationState
[]
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zmqdata._client.core import ReadCore, Task
from zmqdata._client.instructions import (
    FromWorker,
    Instruction,
    ToWorker,
)
from zmqdata._client.options import ReadOptions
from zmqdata._client.refusals import refused
from zmqdata._wire import deal
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import Ranges
from zmqdata.errors import InvalidArgumentError

DEFAULT_WINDOW = 4096
"""Elements asked for ahead of the trainer when max_outstanding_requests is unset
(several splits' worth, so every worker holding one is asked at once; with
1,024, small elements came in more, smaller replies: 1.4x the trainer's CPU)."""
MAX_BATCH_BYTES = 256 * 2**20
"""The window shrinks so that at most this many decoded bytes are asked ahead."""
REQUESTS_PER_TASK = 4
"""Requests in flight per task, and one more for the earliest element not
received (a worker parks at most 8 per peer and task)."""
RETRY_S = 0.01
"""Elements waiting on a busy task, or on a split whose holder is not known
yet, are asked for again after this (the latter with a heartbeat)."""
_NONE = np.zeros(0, dtype=np.int64)
"""No k (a request that only says what this consumer has)."""


@dataclass
class _Request:
    task_id: int
    ordinal: int
    ks: np.ndarray
    """This consumer's k of each index asked for (dealt index ``r + k*R``)."""
    indices: list[int]
    """The split's indices asked for, ascending: a reply holds the first ones."""


class Arrivals:
    """This consumer's elements received and not delivered yet, by k (pure).

    A slot for each k from ``base`` (the next to deliver) to the last asked
    for; a reply fills a run of them at once.

    >>> arrived = Arrivals()
    >>> arrived.reserve(4)
    >>> arrived.put(np.array([1, 3]), ["b", "d"], (5, 40))
    >>> arrived.first_missing(), 3 in arrived, 2 in arrived
    (0, True, False)
    >>> arrived.put(np.array([0]), ["a"], (5, 40))
    >>> arrived.first_missing(), arrived.take(2), arrived.base
    (2, (['a', 'b'], [5, 40, 5, 40]), 2)
    """

    def __init__(self) -> None:
        self.base = 0
        self._elements: list[Any] = []
        self._have = np.zeros(0, dtype=bool)
        self._splits = np.zeros((0, 2), dtype=np.int64)
        """``(ordinal, offset)`` of each slot's split."""

    def reserve(self, end: int) -> None:
        """Slots up to k ``end`` (excluded)."""
        more = end - self.base - len(self._elements)
        if more > 0:
            self._elements += [None] * more
            self._have = np.concatenate((self._have, np.zeros(more, dtype=bool)))
            self._splits = np.concatenate((self._splits, np.zeros((more, 2), np.int64)))

    def put(self, ks: np.ndarray, elements: list[Any], split: tuple[int, int]) -> None:
        """``elements`` arrived for ``ks`` (ascending, reserved), of ``split``.

        ``split``: ``(ordinal, offset)``. A run of consecutive k's is one slice.
        """
        at = ks - self.base
        cuts = (np.flatnonzero(np.diff(at) != 1) + 1).tolist()
        for lo, hi in itertools.pairwise([0, *cuts, len(at)]):
            first = int(at[lo])
            slots = slice(first, first + hi - lo)
            self._elements[slots] = elements[lo:hi]
            self._have[slots] = True
            self._splits[slots] = split

    def __contains__(self, k: int) -> bool:
        """Whether k arrived (delivered: it did)."""
        at = k - self.base
        return at < 0 or (at < len(self._have) and bool(self._have[at]))

    def arrived(self, ks: np.ndarray) -> np.ndarray:
        """``k in self`` for each of ``ks``."""
        at = ks - self.base
        inside = (at >= 0) & (at < len(self._have))
        found = at < 0
        found[inside] = self._have[at[inside]]
        return found

    def first_missing(self) -> int:
        """The first k not arrived."""
        have = self._have
        at = int(np.argmin(have)) if len(have) else 0
        if len(have) and have[at]:  # every slot arrived
            at = len(have)
        return self.base + at

    def take(self, n: int) -> tuple[list[Any], list[int]]:
        """Removes the first ``n`` slots (arrived): their elements and anchors.

        The anchors are ``[ordinal, offset]`` of each element's split, flat.
        """
        elements = self._elements[:n]
        splits = self._splits[:n]
        cuts = (np.flatnonzero(np.diff(splits[:, 0])) + 1).tolist()
        anchors: list[int] = []
        for lo, hi in itertools.pairwise([0, *cuts, n]):
            anchors += splits[lo].tolist() * (hi - lo)
        del self._elements[:n]
        self._have, self._splits = self._have[n:], self._splits[n:]
        self.base += n
        return elements, anchors


@dataclass
class Epoch:
    """What this consumer knows of the epoch's splits.

    >>> epoch = Epoch(total=3, offsets=[10])
    >>> epoch.counted(1, 4); epoch.locate(12), epoch.offsets
    ((0, 2), [10])
    >>> epoch.counted(0, 3); epoch.locate(14), epoch.offsets, epoch.dealt_total()
    ((1, 1), [10, 13, 17], None)
    >>> epoch.runs(np.array([11, 12, 14, 16, 20]))  # split 2's end is not known
    [(0, 10, 0, 2), (1, 13, 2, 4), (2, 17, 4, 5)]
    """

    total: int = 0
    """How many split ordinals the epoch has."""
    start: int = 0
    stream: deal.Stream = field(default_factory=deal.Stream)
    owners: dict[int, int] = field(default_factory=dict)
    offsets: list[int] = field(default_factory=lambda: [0])
    """The offsets of splits ``start, start+1, …`` as far as they are known."""
    counts: dict[int, int] = field(default_factory=dict)
    produced: dict[int, int] = field(default_factory=dict)

    def counted(self, ordinal: int, count: int) -> None:
        """Split ``ordinal`` made ``count`` elements; later offsets follow."""
        self.counts[ordinal] = count
        self.produced[ordinal] = count
        last = self.start + len(self.offsets) - 1
        while last in self.counts and last < self.total:
            self.offsets.append(self.offsets[-1] + self.counts[last])
            last += 1

    def locate(self, token: int) -> tuple[int, int] | None:
        """``(ordinal, index)`` of ``token``; None while the split is not known."""
        i = bisect.bisect_right(self.offsets, token) - 1
        q = self.start + i
        if i < 0 or q >= self.total:
            return None  # before the stream, or past the epoch's end
        return q, token - self.offsets[i]

    def runs(self, tokens: np.ndarray) -> list[tuple[int, int, int, int]]:
        """Ascending ``tokens`` (from the stream's start) by split.

        ``(ordinal, its first token, lo, hi)`` for each run ``tokens[lo:hi]``
        in one split; ordinal ``total`` for those past the epoch's end.
        """
        offsets = self.offsets
        first = bisect.bisect_right(offsets, int(tokens[0])) - 1
        last = bisect.bisect_right(offsets, int(tokens[-1]))
        at = np.searchsorted(offsets[first:last], tokens, side="right") + (first - 1)
        cuts = (np.flatnonzero(np.diff(at)) + 1).tolist()
        return [
            (self.start + int(at[lo]), offsets[int(at[lo])], lo, hi)
            for lo, hi in itertools.pairwise([0, *cuts, len(tokens)])
        ]

    def span(self, ordinal: int) -> tuple[int, int, int]:
        """``(ordinal, first token, end)`` of a split whose offset is known.

        The end is unknown, so infinite, while the split's count is.
        """
        i = ordinal - self.start
        end = self.offsets[i + 1] if i + 1 < len(self.offsets) else 2**63
        return ordinal, self.offsets[i], end

    def known_tokens(self) -> int:
        """Tokens known to exist: the furthest split's offset plus what it made."""
        last = self.start + len(self.offsets) - 1
        return self.offsets[-1] + self.produced.get(last, 0)

    def dealt_total(self) -> int | None:
        """How many tokens the epoch deals, once every split's count is known."""
        if self.start + len(self.offsets) - 1 < self.total:
            return None
        return self.stream.index_of(self.offsets[-1])


class DealPlan:
    """Reads one dealt job as consumer ``consumer_index`` of ``num_consumers``."""

    def __init__(self, options: ReadOptions) -> None:
        assert options.consumer_index is not None
        assert options.num_consumers is not None
        self._index = options.consumer_index
        self._consumers = options.num_consumers
        self._window = options.max_outstanding_requests or DEFAULT_WINDOW
        self.epoch = Epoch()
        self._started = False
        self._next_ask = 0  # this consumer's k-th element: dealt r + k*R
        self._retry: list[np.ndarray] = []  # k's asked for, to ask again
        self._requests: dict[int, _Request] = {}
        self._ids = itertools.count(1)
        self._arrived = Arrivals()
        """The elements received; its ``base`` is the next k to deliver."""
        self._sizes: list[int] = []
        self._news = False
        """Something was learnt (counts, holders): waiting elements may be asked."""
        self._retry_at = float("inf")
        self._state_due = 0.0
        self._holders: dict[int, int] = {}
        """Split ordinal -> the task seen holding it (unreleased splits)."""
        self._moved: dict[int, int] = {}
        """Splits made again by a new task, to tell what this consumer has."""

    # ------------------------------------------------------------ dispatcher

    def current_round(self) -> int | None:
        return None

    def deal_position(self) -> list[int]:
        """``[consumer_index, ordinal, index]`` of the first element not received.

        Empty before the epoch is known (nothing to report yet).
        """
        if not self._started:
            return []
        k = self._arrived.first_missing()
        if self._total_mine() is not None and k >= (self._total_mine() or 0):
            return [self._index, max(self.epoch.total, 1), 0]
        token = self.epoch.stream.token_at(self._dealt(k))
        at = self.epoch.locate(token)
        if at is None:
            q = self.epoch.start + len(self.epoch.offsets) - 1  # not known yet
            return [self._index, min(q, self.epoch.total), 0]
        return [self._index, *at]

    def on_state(self, core: ReadCore, state: m.IterationState) -> list[Instruction]:
        """Follows the epoch's split holders (the first state sets the epoch)."""
        info = state.deal
        try:
            owners = [int(v) for v in info.get("owners", [])]
            if not self._started:
                stream = [int(v) for v in info["stream"]]
                self.epoch.total = int(info["splits"])
                self.epoch.start = int(info["start"])
                self.epoch.stream = deal.Stream(stream[0], Ranges(stream[1:]))
                self.epoch.offsets = [stream[0]]
                self._started = True
        except (KeyError, TypeError, ValueError, IndexError):
            return core.fail(
                InvalidArgumentError(f"malformed deal state {info!r:.200}")
            )
        self.epoch.owners = dict(zip(owners[::2], owners[1::2], strict=False))
        self._note_holders()
        for request_id, request in list(self._requests.items()):
            if request.task_id not in core.tasks:  # lost: its splits move
                self._take_back(request_id)
        self._news = True
        return self._deliver(core)

    def _note_holders(self) -> None:
        """Splits that moved to another task (made again) get a ``have`` notice."""
        for ordinal, task_id in self.epoch.owners.items():
            seen = self._holders.get(ordinal)
            if seen is not None and seen != task_id:
                self._moved[ordinal] = task_id
            self._holders[ordinal] = task_id
        lowest = min(self.epoch.owners, default=None)
        if lowest is not None:  # the splits below are released: forget them
            for ordinal in [q for q in self._holders if q < lowest]:
                del self._holders[ordinal]

    def _tell_moved(self, core: ReadCore) -> list[Instruction]:
        """Tells each new holder of a split made again what this consumer has of it.

        So that it does not keep those elements, which nobody will ask for.
        """
        out: list[Instruction] = []
        for ordinal, task_id in list(self._moved.items()):
            task = core.tasks.get(task_id)
            if task is None:
                continue
            del self._moved[ordinal]
            have = self._received_in(ordinal)
            if not have:
                continue
            request = m.GetElements(
                request_id=next(self._ids),
                task_id=task_id,
                client_id=core.client_id,
                max_elements=1,
                ticket=task.ticket,
                split=ordinal,
                have=have,
            )
            self._requests[request.request_id] = _Request(task_id, ordinal, _NONE, [])
            out.append(ToWorker(task.endpoint, request))
        return out

    def _received_in(self, ordinal: int) -> list[int]:
        """The indices of split ``ordinal`` this consumer has received."""
        if ordinal - self.epoch.start >= len(self.epoch.offsets):
            return []  # not reached: nothing of it was asked for
        _, lo, hi = self.epoch.span(ordinal)
        stream = self.epoch.stream
        first = self._mine(stream.index_of(lo) + self._consumers - 1)
        have = []
        for k in itertools.count(max(0, first)):
            if k >= self._next_ask:
                break
            token = stream.token_at(self._dealt(k))
            if token >= hi:
                break
            if lo <= token and k in self._arrived:
                have.append(token - lo)
        return have

    def forget(self, task: Task) -> None:
        """The task's requests will not be answered: ask for them again."""
        for request_id, request in list(self._requests.items()):
            if request.task_id == task.task_id:
                self._take_back(request_id)

    def _ask_again(self, ks: np.ndarray) -> None:
        """These k's are to be asked for again, at the next chance."""
        self._retry.append(ks)
        self._news = True

    def _take_back(self, request_id: int) -> None:
        self._ask_again(self._requests.pop(request_id).ks)

    # ------------------------------------------------------------ workers

    def request_more(self, core: ReadCore, now: float) -> list[Instruction]:
        """Asks each split's holder for this consumer's elements of it, a window ahead.

        The window counts what the trainer has not consumed yet, so a slow
        trainer holds the read back (``counters.starved`` then asks it to wake
        the fetcher). Elements that could not be asked for wait for news (a
        reply, a new state) or a retry time.
        """
        if not self._started or core.done:
            return []
        out = self._tell_moved(core) if self._moved else []
        counters = core.counters
        buffered = counters.received - counters.consumed
        base = self._arrived.base
        limit = base + self._window_now() - buffered
        if base in self._arrived and not self._requests:
            # Held back until its round is known complete: keep one request
            # out past it, whose answer says how far the split has got.
            limit = max(limit, base + 2)
        counters.starved = self._next_ask >= limit
        wanted = np.arange(self._next_ask, max(self._next_ask, limit), dtype=np.int64)
        self._next_ask = max(self._next_ask, limit)
        self._arrived.reserve(self._next_ask)
        if self._news or now >= self._retry_at:
            wanted = np.sort(np.concatenate([*self._retry, wanted]))
            self._retry, self._news = [], False
            self._retry_at = float("inf")
        if len(wanted):
            out += self._ask(core, wanted, now)
        return out

    def _ask(self, core: ReadCore, wanted: np.ndarray, now: float) -> list[Instruction]:
        """Sends what can be asked for of ``wanted`` (k's, ascending); the rest waits.

        The earliest element not received is asked for even when later ones
        hold every slot to its task: a worker whose buffer is full may wait
        for it to be taken (``DealtBuffer.put``). Once every task has its
        requests out, the rest waits without a look at its splits.
        """
        wanted = wanted[~self._arrived.arrived(wanted)]
        if not len(wanted):
            return []
        epoch = self.epoch
        tokens = epoch.stream.tokens_at(self._index + wanted * self._consumers)
        first = self._arrived.first_missing()
        in_flight: dict[int, int] = {}
        for request in self._requests.values():
            in_flight[request.task_id] = in_flight.get(request.task_id, 0) + 1
        free = sum(max(0, REQUESTS_PER_TASK - in_flight.get(t, 0)) for t in core.tasks)
        out: list[Instruction] = []
        unowned = False
        for ordinal, offset, lo, hi in epoch.runs(tokens):
            ks = wanted[lo:hi]
            spare = int(ks[0]) == first  # those before it arrived: it comes first
            if ordinal >= epoch.total:  # past the end, as far as is known
                self._retry.append(ks)
                continue
            if not free and not spare:
                self._retry.append(wanted[lo:])
                self._retry_at = min(self._retry_at, now + RETRY_S)
                break
            task = core.tasks.get(epoch.owners.get(ordinal, -1))
            if task is None or not self._may_ask(core, task, in_flight, now, spare):
                unowned = unowned or task is None
                self._retry.append(ks)
                self._retry_at = min(self._retry_at, now + RETRY_S)
                continue
            out.append(self._send(core, task, ordinal, tokens[lo:hi] - offset, ks))
            in_flight[task.task_id] = in_flight.get(task.task_id, 0) + 1
            free = max(0, free - 1)
        if unowned and now >= self._state_due:  # a split handed out lately
            self._state_due = now + RETRY_S
            out += core.heartbeat(now)
        return out

    @staticmethod
    def _may_ask(
        core: ReadCore, task: Task, in_flight: dict[int, int], now: float, spare: bool
    ) -> bool:
        """Whether ``task`` may take another request now (``spare``: one more slot)."""
        if in_flight.get(task.task_id, 0) >= REQUESTS_PER_TASK + spare:
            return False
        if task.retry_at > now:
            return False
        return not core.links.lost(task.endpoint)

    def _window_now(self) -> int:
        """The window in elements, smaller for large ones (by the last sizes seen)."""
        if not self._sizes:
            return min(self._window, 8)
        average = max(1, sum(self._sizes) // len(self._sizes))
        return max(1, min(self._window, MAX_BATCH_BYTES // average))

    def _send(
        self,
        core: ReadCore,
        task: Task,
        ordinal: int,
        at: np.ndarray,
        ks: np.ndarray,
    ) -> ToWorker:
        request_id = next(self._ids)
        indices = at.tolist()
        request = m.GetElements(
            request_id=request_id,
            task_id=task.task_id,
            client_id=core.client_id,
            max_elements=len(indices),
            ticket=task.ticket,
            split=ordinal,
            indices=indices,
        )
        self._requests[request_id] = _Request(task.task_id, ordinal, ks, indices)
        return ToWorker(task.endpoint, request)

    def on_unsent(self, request: m.GetElements, now: float) -> None:
        """A request that could not be queued: its elements are asked for again."""
        taken = self._requests.pop(request.request_id, None)
        if taken is not None and taken.indices:  # a ``have`` notice is not resent
            self._ask_again(taken.ks)

    def on_elements(
        self, core: ReadCore, header: m.Elements, reply: FromWorker, now: float
    ) -> list[Instruction]:
        """Takes what a split's holder sent, and what it says of its splits."""
        request = self._requests.pop(header.request_id, None)
        if request is None:
            return []  # a request taken back (its task was lost)
        task = core.tasks.get(request.task_id)
        if task is not None:
            task.backoff.reset()
        elements, nbytes = reply.decoded()
        if elements:
            self._sizes = [*self._sizes[-63:], max(1, nbytes // len(elements))]
        epoch = self.epoch
        counts = header.counts
        for ordinal, count in zip(counts[::2], counts[1::2], strict=False):
            if ordinal not in epoch.counts:  # most were told before
                epoch.counted(ordinal, count)
        if header.ended:
            epoch.counted(request.ordinal, header.produced)
        else:
            epoch.produced[request.ordinal] = max(
                epoch.produced.get(request.ordinal, 0), header.produced
            )
        got = len(elements)
        if header.indices != request.indices[:got]:
            return core.fail(
                InvalidArgumentError(
                    f"task {request.task_id} answered indices {header.indices[:8]} "
                    f"of split {request.ordinal}, not the first of those asked"
                )
            )
        if got:
            offset = epoch.offsets[request.ordinal - epoch.start]
            self._arrived.put(request.ks[:got], elements, (request.ordinal, offset))
        self._ask_again(request.ks[got:])
        return self._deliver(core)

    def on_error(self, core: ReadCore, error: m.Error, now: float) -> list[Instruction]:
        """``ABSENT``: the holder has not started the task (or the split moved)."""
        request = self._requests.pop(error.request_id, None)
        if request is None:
            return []
        failure = refused(error)
        if failure is not None:
            return core.fail(failure)
        self._ask_again(request.ks)
        task = core.tasks.get(request.task_id)
        if task is not None:
            task.retry_later(now)
        return []

    # ------------------------------------------------------------ the trainer

    def _deliver(self, core: ReadCore) -> list[Instruction]:
        """Hands out, in order, the elements whose round is complete; ends at the end.

        Element k's round is complete once the dealt indices below ``(k+1)*R``
        are known to exist.
        """
        total = self._total_mine()
        if total is None:
            known = self.epoch.stream.index_of(self.epoch.known_tokens())
            end = known // self._consumers
        else:
            end = total
        arrived = self._arrived
        run = min(arrived.first_missing(), end) - arrived.base
        out = core.deliver_dealt(*arrived.take(run)) if run > 0 else []
        if total is not None and arrived.base >= total:
            out += core.end()
        return out

    def _total_mine(self) -> int | None:
        """How many elements this consumer gets this epoch, once known."""
        total = self.epoch.dealt_total()
        return None if total is None else total // self._consumers

    def _dealt(self, k: int) -> int:
        return self._index + k * self._consumers

    def _mine(self, dealt: int) -> int:
        return (dealt - self._index) // self._consumers
