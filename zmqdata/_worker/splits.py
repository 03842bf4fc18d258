"""``RemoteSplitProvider``: a DYNAMIC task's splits, asked of the dispatcher.

Over a DEALER socket the task's producer thread owns (``requests.py``): as many
splits a request as ``splitbatch.py`` says, the next asked for before these run
out, a split request counted as the worker's sign of life (``asked_at``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from zmqdata._dataset import profile as profiling
from zmqdata._dataset.iterator import (
    Split,
    SplitChunk,
    SplitProvider,
)
from zmqdata._dataset.marks import Marks
from zmqdata._runtime import auth
from zmqdata._runtime.clock import Backoff
from zmqdata._runtime.spans import IDLE, Tracer
from zmqdata._wire import messages as m
from zmqdata._wire.lineage import key
from zmqdata._wire.progress import keep_latest_packed
from zmqdata._worker.buffer import Cancelled
from zmqdata._worker.requests import DispatcherRequests
from zmqdata._worker.splitbatch import SplitBatch
from zmqdata.errors import UnavailableError, ZmqDataError, from_code

EMPTY_BACKOFF_MAX_S = 0.5
AT_MOST_ONCE_BATCH = 8
"""The most splits an at-most-once task asks for at once: what a worker that
dies loses is what it holds (docs/reliability.md), so it holds the split in
progress and at most 12 more (4 left when it asks ahead for 8), not batches
sized for round trips; 8 keep a worker of one-file splits (images) busy
through a split request's round trip (2 starved it)."""
MAX_FAILED_CHARS = 1_000
"""The most of a chunk's write failure a split request carries."""
ASK_AGAIN_MAX_S = 0.05
"""A split reply with nothing and no end (keys of a lost task wait for their
fence; a resumed read's splits already done were passed over) is asked again
after at most this long."""


class RemoteSplitProvider(DispatcherRequests, SplitProvider):
    """Asks the dispatcher for the splits of one iteration, one repetition at a time.

    Cheap splits are asked for several at a time (``SplitBatch`` sizes the
    requests from their round trip and how fast the splits are used up), and
    the next ones are asked for when half of a batch is left (``_prefetch``):
    the answer comes in while the producer works through the other half, so
    the round trip does not stall it.
    Requests are numbered; one that gets no answer in time is sent again with
    the same number, and the dispatcher answers it with the splits it handed
    out the first time (so a stalled or restarted dispatcher loses none).

    Under an endless ``repeat`` a worker whose repetitions come up empty because
    other workers took their few splits catches up at once; one that is at the
    dispatcher's current repetition and still finds nothing waits with backoff
    before asking again, up to ``EMPTY_BACKOFF_MAX_S``. Its next request says
    that its pass made nothing (``made_nothing``), and once every worker that
    took splits of that pass said so the dispatcher ends the read
    (``exhausted``: ``_dispatcher/empty_passes.py``).

    A split ``[repetition, lo, hi]`` reaches the source as ``[lo, hi, base]``,
    its elements' keys ``base + index`` (``_wire/lineage.py``); an exactly-once
    task's buffer notes them (``handed``). A reply with no split and no end (keys of a
    lost worker are about to be handed out again) is asked again with backoff.

    A dealt task (``dealt``: multi-rank reads) takes its splits whole, as the
    dispatcher sends them (``[repetition, lo, hi, ordinal, skip]``, through
    ``next_dealt``), reports each split's count with its next request
    (``counted``) and follows the dispatcher's ``released`` ordinal. A task
    keyed by outputs (``outputs``: ``_wire/outputs.py``) takes them whole too
    (``[repetition, lo, hi, first, end]``), its buffer noting the output keys
    ``[first, end)`` as handed.
    """

    shared = True
    asked_for = "split"
    profile: profiling.Profile | None = None
    """Its task's per-op statistics (set by the task)."""
    tracer: Tracer = IDLE
    """The worker's tracer (its task sets it): each split request is a span."""

    def __init__(
        self,
        dispatcher: str,
        iteration_id: int,
        task_id: int,
        stop: threading.Event,
        timeout_s: float,
        keys: auth.ClientKeys | None = None,
        handed: Callable[[int, int], None] | None = None,
        draining: threading.Event | None = None,
        dealt: bool = False,
        marks: Marks | None = None,
        outputs: bool = False,
    ) -> None:
        super().__init__(dispatcher, stop, timeout_s, keys)
        self._iteration_id = iteration_id
        self._marks = marks
        self._dealt = dealt
        self._outputs = outputs
        self._counts: list[int] = []
        self._written: list[list[Any]] = []
        """Under a snapshot: chunks committed, told with the next request."""
        self._failed = ""
        """Under a snapshot: why a chunk could not be written (told once)."""
        self.released = 0
        """Dealt: every consumer is past the splits below this ordinal."""
        self._draining = threading.Event() if draining is None else draining
        self._handed = handed
        self._task_id = task_id
        self._repetition = 0
        self._request_id = 0
        self._splits: deque[Split] = deque()
        self._batch = SplitBatch()
        self._fetched = 0
        """Splits the last answer brought (a prefetch goes out at half of them)."""
        self._pending: m.GetSplit | None = None
        """A request sent ahead (``_prefetch``) whose answer is not taken yet."""
        self._ended: bool | None = None
        """A request sent ahead was answered with the end: whether the
        dispatcher is at a later repetition (told once the splits run out)."""
        self._got_split = False  # in the current repetition
        self._behind = False  # the dispatcher is at a later repetition
        # An endless repeat's pass made nothing: the last one (to tell with the
        # next repetition's requests), the one before this repetition (told).
        self._made_nothing = self._empty_pass = False
        self.exhausted = False
        """Every worker's pass of the endless repeat made nothing: the read ends."""
        self._empty = Backoff(0.001, EMPTY_BACKOFF_MAX_S, jitter=0.0)
        self.asked_at = float("-inf")
        """When the last split request went out (monotonic): the dispatcher
        counts it as the worker's sign of life."""

    def next_split(self) -> Split | None:
        """The next split; a draining worker asks for none (``Cancelled``).

        Asked while its task's profile times an element, the round trip is
        the ``splits`` phase, not the source op's time.
        """
        if self._splits:
            self._prefetch()
            return self._splits.popleft()
        if self._draining.is_set() and self._pending is None:
            raise Cancelled  # (splits asked for ahead are made first)
        if self._ended is not None:
            self._behind, self._ended = self._ended, None
            if not (self._written or self._failed):
                return None  # (what the snapshot's writes did: one more request)
        profile = self.profile
        if profile is None or not profile.timing:
            self._fetch()
        else:
            start = time.perf_counter_ns()
            self._fetch()
            took = time.perf_counter_ns() - start
            profile.phase("splits", took)
            profile.inner(took)
        if not self._splits:
            return None
        return self._splits.popleft()

    def next_dealt(self) -> list[int] | None:
        """Dealt: the next split ``[repetition, lo, hi, ordinal, skip]`` (None: no more)."""
        split = self.next_split()
        return None if split is None else list(split)

    def counted(self, ordinal: int, count: int) -> None:
        """Dealt: split ``ordinal`` made ``count`` elements (told with the next request)."""
        self._counts += [ordinal, count]

    def _fetch(self) -> None:
        """Asks for the next splits (or waits for those asked for ahead)."""
        wait = Backoff(0.001, ASK_AGAIN_MAX_S, jitter=0.0)
        while True:
            reply = self._ask()
            if reply.end_of_splits:
                self._behind = reply.repetition > self._repetition
                self.exhausted = reply.exhausted
                return
            if reply.splits:
                self._take(reply)
                return
            if self._stop.wait(wait.next_delay()) or self._draining.is_set():
                raise Cancelled  # (else nothing now: ask again)

    def _prefetch(self) -> None:
        """Asks for the next splits ahead; takes their answer once it is in.

        Asks with half of the last answer's splits left, and never waits for
        the answer here. Not for dealt tasks (their requests report what the
        splits before made). An at-most-once task (``handed`` None) asks for
        ``AT_MOST_ONCE_BATCH`` at most, so it holds at most 12 splits
        beyond the one in progress, which its worker's death loses
        (docs/reliability.md).
        """
        if self._pending is not None:
            self._take_ahead(self._pending)
        elif self._may_ask_ahead():
            self._pending = self._request(left=len(self._splits))
            self._send(self._pending)

    def _may_ask_ahead(self) -> bool:
        """Whether to ask ahead now: a task that may, with half its splits left."""
        return not (
            self._dealt
            or self._ended is not None
            or self._draining.is_set()
            or len(self._splits) > self._fetched // 2
        )

    def _take_ahead(self, pending: m.GetSplit) -> None:
        """Takes the answer to ``pending`` (splits asked for ahead) if it is in."""
        sock = self._socket()
        if not sock.poll(0):
            return
        reply = self._answer(pending, sock.recv())
        if reply is None:
            return
        self._pending = None
        reply = self._checked(reply)
        if reply.end_of_splits:
            self._ended = reply.repetition > self._repetition
            self.exhausted = reply.exhausted
        elif reply.splits:
            self._take(reply)
        # (else nothing now: asked again, waiting, once these run out)

    def _take(self, reply: m.GetSplitReply) -> None:
        """Queues the splits of ``reply`` (their keys noted as handed)."""
        self._got_split = True
        self._fetched = len(reply.splits)
        self._batch.fetched(len(reply.splits), time.monotonic(), reply.period_ms / 1000)
        if self._dealt or self._outputs:
            words: list[list[Any] | None] = [*reply.chunks] or [None] * len(
                reply.splits
            )
            for split, word in zip(reply.splits, words, strict=True):
                if self._outputs and self._handed is not None:
                    self._handed(split[3], split[4])
                self._splits.append(
                    split if word is None else [*split, self._chunk(word)]
                )
            return
        if self._marks is not None:  # a lost task's outputs not to make again
            keep_latest_packed(self._marks.resume, reply.progress)
        for repetition, lo, hi in reply.splits:
            base = key(repetition, 0)
            if self._handed is not None:
                self._handed(base + lo, base + hi)
            self._splits.append([lo, hi, base])

    def _chunk(self, word: list[Any]) -> SplitChunk:
        """The snapshot's word on a split: its chunk to read, or one to write."""
        return SplitChunk(
            word[0], word[1:] or None, self._note_written, self._note_failed
        )

    def _note_written(self, chunk: list[Any]) -> None:
        """A chunk committed: told with the next request."""
        self._written.append(chunk)

    def _note_failed(self, why: str) -> None:
        """A chunk could not be written: told with the next request."""
        self._failed = why[:MAX_FAILED_CHARS]

    def _request(self, left: int = 0) -> m.GetSplit:
        """The next split request (``left``: splits still queued as it is sent)."""
        self._request_id += 1
        self.asked_at = time.monotonic()
        chunks, failed = self._take_reports()
        return m.GetSplit(
            request_id=self._request_id,
            iteration_id=self._iteration_id,
            repetition=self._repetition,
            task_id=self._task_id,
            max_splits=self._max_splits(left),
            counts=self._counts,
            empty_pass=self._empty_pass,
            chunks=chunks,
            chunk_failed=failed,
        )

    def _take_reports(self) -> tuple[list[list[Any]], str]:
        """The chunks committed since the last request, and why one failed if one did.

        The request carries them (a retry too).
        """
        reports = self._written, self._failed
        self._written, self._failed = [], ""
        return reports

    def _max_splits(self, left: int) -> int:
        """How many splits to ask for (``SplitBatch``; at most once: a couple)."""
        size = self._batch.size(time.monotonic(), left)
        at_most_once = self._handed is None and not self._dealt
        return min(size, AT_MOST_ONCE_BATCH) if at_most_once else size

    def _ask(self) -> m.GetSplitReply:
        """The answer to one split request, the one sent ahead if any.

        Retried as the same request until answered.
        """
        request, sent = self._pending, self._pending is not None
        self._pending = None
        if request is None:
            request = self._request()
        log = self.tracer.log
        start = time.perf_counter_ns()
        reply = self._call(request, sent)
        if log is not None:
            asked = {"task_id": self._task_id, "max_splits": request.max_splits}
            log.add("split request", "worker", start, time.perf_counter_ns(), asked)
        return self._checked(reply)

    def _checked(self, reply: m.Message) -> m.GetSplitReply:
        """``reply`` if it is a well-formed answer (errors raised as sent)."""
        if isinstance(reply, m.Error):
            raise from_code(reply.code, reply.message)
        width = 5 if self._dealt or self._outputs else 3
        if (
            not isinstance(reply, m.GetSplitReply)
            or any(len(split) != width for split in reply.splits)
            or not _chunk_words(reply, width == 5)
        ):
            raise UnavailableError(f"malformed split reply from {self._dispatcher}")
        self._counts = []
        self.released = max(self.released, reply.released)
        return reply

    def reset(self) -> None:
        if self._draining.is_set():
            raise Cancelled
        if self._got_split or self._behind:
            self._empty.reset()
        elif self._stop.wait(self._empty.next_delay()):
            raise Cancelled
        self._got_split = self._behind = False
        self._empty_pass, self._made_nothing = self._made_nothing, False
        self._repetition += 1

    def made_nothing(self) -> bool:
        """Noted for the next repetition's requests; True once the dispatcher ended the read."""
        self._made_nothing = True
        return self.exhausted

    def close(self) -> None:
        """Closes the socket, once the answer to a request sent ahead is in.

        A task that ends with one out (a ``take`` below it, an error) notes
        its splits as handed: its end tells them dropped, as the unread ones
        before them.
        """
        request, self._pending = self._pending, None
        if request is not None and not (self._stop.is_set() or self._draining.is_set()):
            with contextlib.suppress(ZmqDataError, Cancelled):
                reply = self._checked(self._call(request, sent=True))
                if reply.splits:
                    self._take(reply)
        self._drop_socket()


def _chunk_words(reply: m.GetSplitReply, whole_splits: bool) -> bool:
    """Whether ``reply.chunks`` is none, or one ``[ordinal, ...]`` of 1 or 5 per split.

    Only splits run whole (dealt, or keyed by outputs) are under a snapshot.
    """
    words = reply.chunks
    if not words:
        return True
    return (
        whole_splits
        and len(words) == len(reply.splits)
        and all(
            isinstance(w, list) and len(w) in (1, 5) and type(w[0]) is int
            for w in words
        )
    )
