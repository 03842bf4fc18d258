"""Spans: what a peer did when, recorded during a trace window (``zmqdata trace``).

A ``Tracer`` (one per server, one per read) holds ``log``: the open window's
``SpanLog``, else None. Hot paths read that one attribute and record nothing
when it is None::

    log = tracer.log
    if log is not None:
        log.add("send", "worker", start_ns, time.perf_counter_ns())

Times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux, the clock the
dispatcher's ``time.monotonic()`` reads too). A peer learns of a window from
its heartbeat replies (``trace``: ``[trace_id, until_ns, now_ns]`` in the
dispatcher's clock), estimates its offset to the dispatcher's clock from
those round trips (``ClockOffset``), and once the window is over sends its
spans, in the dispatcher's clock, as ``TraceSpans`` chunks (``report``).

>>> tracer = Tracer()
>>> tracer.sent(7, now_ns=1_000)
>>> tracer.replied(7, [42, 60_000, 5_010], now_ns=1_020)  # offset 4_000, rtt 20
>>> tracer.log.add("wait", "trainer", 2_000, 2_500)
>>> tracer.due(now_ns=55_000), tracer.due(now_ns=56_000)
(False, True)
>>> [chunk] = tracer.report(tracer.finish(), iter([9]).__next__, client_id=3)
>>> chunk.trace_id, chunk.spans, chunk.last, chunk.clock
(42, [['wait', 'trainer', 1, 6000, 6500]], True, [4000, 20])
>>> tracer.replied(8, [42, 60_000, 5_100], now_ns=1_200)  # reported: stays closed
>>> tracer.log is None
True
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError

logger = logging.getLogger("zmqdata.trace")

MAX_SPANS = 200_000
"""The most spans one peer keeps per window; more are counted as dropped."""
CHUNK_SPANS = 2_000
"""Spans per ``TraceSpans`` message: a few hundred KB, well under any
dispatcher's ``max_request_bytes`` (1 MiB at the least)."""
MAX_THREAD_NAME = 64
"""Characters of a thread's name a trace keeps."""
MIN_SECONDS = 0.1
MAX_SECONDS = 120.0
"""A trace window's bounds (``StartTrace.seconds``)."""
MAX_PENDING = 64
"""Heartbeats whose send time a ``Tracer`` remembers, waiting for the reply."""

Span = tuple[str, str, int, int, int, dict[str, Any] | None]
"""``(name, cat, thread ident, start_ns, end_ns, args)``."""


class SpanLog:
    """One trace window's spans on one peer, at most ``limit`` (then counted).

    >>> log = SpanLog(trace_id=1, until_ns=10, limit=1)
    >>> log.add("a", "worker", 1, 2); log.add("b", "worker", 3, 4)
    >>> [span[0] for span in log.spans], log.dropped
    (['a'], 1)
    """

    __slots__ = ("dropped", "limit", "spans", "trace_id", "until_ns")

    def __init__(self, trace_id: int, until_ns: int, limit: int = MAX_SPANS) -> None:
        self.trace_id, self.until_ns, self.limit = trace_id, until_ns, limit
        self.spans: list[Span] = []
        self.dropped = 0

    def add(
        self,
        name: str,
        cat: str,
        start_ns: int,
        end_ns: int,
        args: dict[str, Any] | None = None,
        thread: int | None = None,
    ) -> None:
        """Records a span (``perf_counter_ns`` times) of the calling thread.

        ``thread``: another thread's ``threading.get_ident()`` (a sampler's spans).
        """
        if len(self.spans) < self.limit:
            ident = threading.get_ident() if thread is None else thread
            self.spans.append((name, cat, ident, start_ns, end_ns, args))
        else:
            self.dropped += 1

    def within(self, offset_ns: int = 0) -> list[Span]:
        """The spans that started before the window's end (any thread may add more).

        ``offset_ns``: the dispatcher's clock minus this one (``until_ns`` is
        the dispatcher's).
        """
        until = self.until_ns - offset_ns
        return [span for span in list(self.spans) if span[3] < until]


class ClockOffset:
    """The dispatcher's clock minus this one, NTP-style, from round trips.

    A round trip sent at ``sent`` and answered at ``received`` (this clock)
    with the dispatcher's ``remote`` time puts ``remote`` at the round trip's
    middle, give or take half of it: the round trip with the smallest RTT is
    kept.

    >>> clock = ClockOffset()
    >>> clock.add(sent=100, remote=1_050, received=120)
    >>> clock.add(sent=200, remote=1_200, received=300)  # slower: not kept
    >>> clock.offset_ns, clock.rtt_ns, clock.to_dispatcher(1_000)
    (940, 20, 1940)
    """

    __slots__ = ("offset_ns", "rtt_ns")

    def __init__(self) -> None:
        self.offset_ns = 0
        self.rtt_ns: int | None = None
        """The kept round trip's (None: none yet); the offset is good to half of it."""

    def add(self, sent: int, remote: int, received: int) -> None:
        rtt = received - sent
        if rtt >= 0 and (self.rtt_ns is None or rtt < self.rtt_ns):
            self.offset_ns = remote - (sent + received) // 2
            self.rtt_ns = rtt

    def to_dispatcher(self, local_ns: int) -> int:
        return local_ns + self.offset_ns


def check_seconds(seconds: object) -> float:
    """A window's length, checked.

    >>> check_seconds(2)
    2.0
    >>> check_seconds(121.0)
    Traceback (most recent call last):
    ...
    ValueError: seconds must be a number in [0.1, 120], got 121.0
    """
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not MIN_SECONDS <= seconds <= MAX_SECONDS
    ):
        raise ValueError(
            f"seconds must be a number in [{MIN_SECONDS:g}, {MAX_SECONDS:g}], "
            f"got {seconds!r}"
        )
    return float(seconds)


def thread_names(idents: Iterable[int]) -> dict[int, str]:
    """The name of each thread (``threading.get_ident()``), or ``thread <ident>``.

    Names are cut at ``MAX_THREAD_NAME`` characters.
    """
    known = {thread.ident: thread.name for thread in threading.enumerate()}
    return {
        ident: known.get(ident, f"thread {ident}")[:MAX_THREAD_NAME] for ident in idents
    }


def is_announcement(trace: Any) -> bool:
    """Whether a reply's ``trace`` field is ``[trace_id, until_ns, now_ns]``.

    >>> is_announcement([1, 2, 3]), is_announcement([]), is_announcement([1, 2, True])
    (True, False, False)
    """
    return (
        isinstance(trace, list)
        and len(trace) == 3
        and all(type(value) is int for value in trace)
    )


class Tracer:
    """One peer's trace windows: opened by heartbeat replies, reported when over.

    ``log`` is read by any thread; the rest is called by the one thread that
    talks to the dispatcher (``sent``, ``replied``, ``due``, ``finish``).
    """

    def __init__(self) -> None:
        self.log: SpanLog | None = None
        self.clock = ClockOffset()
        self._sent: dict[int, int] = {}
        self._last_trace = 0
        """The last window opened: never opened again once reported."""

    def open(self, trace_id: int, until_ns: int) -> SpanLog:
        """Opens window ``trace_id`` until ``until_ns`` (the dispatcher's clock).

        The window's end is kept in the dispatcher's clock: later round trips
        refine the offset, and both the end and the spans move with it.
        """
        self._last_trace = trace_id
        self.log = SpanLog(trace_id, until_ns)
        return self.log

    def sent(self, request_id: int, now_ns: int | None = None) -> None:
        """Notes when a heartbeat left (its reply may open a window)."""
        if len(self._sent) >= MAX_PENDING:
            del self._sent[next(iter(self._sent))]
        self._sent[request_id] = time.perf_counter_ns() if now_ns is None else now_ns

    def replied(self, request_id: int, trace: Any, now_ns: int | None = None) -> None:
        """Takes a heartbeat reply's ``trace`` field: a window open now, or none."""
        sent = self._sent.pop(request_id, None)
        if sent is None or not is_announcement(trace):
            return
        trace_id, until_ns, remote = trace
        received = time.perf_counter_ns() if now_ns is None else now_ns
        if trace_id != self._last_trace:
            self.clock = ClockOffset()  # a new window: clocks drift between them
            self.clock.add(sent, remote, received)
            self.open(trace_id, until_ns)
        elif self.log is not None:
            self.clock.add(sent, remote, received)

    def due(self, now_ns: int | None = None) -> bool:
        """Whether the open window is over (its spans are to be reported)."""
        log = self.log
        now = time.perf_counter_ns() if now_ns is None else now_ns
        return log is not None and now + self.clock.offset_ns >= log.until_ns

    def finish(self) -> SpanLog | None:
        """Closes the open window (if any) and returns its log."""
        log, self.log = self.log, None
        return log

    def report(
        self, log: SpanLog, next_request_id: Callable[[], int], **sender: int
    ) -> list[m.TraceSpans]:
        """``log``'s spans in the dispatcher's clock, as ``TraceSpans`` chunks.

        ``sender``: ``worker_id=`` or ``client_id=``. Threads are numbered
        from 1 in the order they first recorded a span.
        """
        offset = self.clock.offset_ns
        spans = log.within(offset)
        tids: dict[int, int] = {}
        wire: list[list[Any]] = []
        for name, cat, ident, start, end, args in spans:
            tid = tids.setdefault(ident, len(tids) + 1)
            span = [name, cat, tid, start + offset, end + offset]
            wire.append(span if args is None else [*span, args])
        names = thread_names(tids)
        threads = [[tid, names[ident]] for ident, tid in tids.items()]
        starts = range(0, len(wire), CHUNK_SPANS) if wire else [0]
        last = starts[-1]
        return [
            m.TraceSpans(
                request_id=next_request_id(),
                trace_id=log.trace_id,
                offset=start,
                spans=wire[start : start + CHUNK_SPANS],
                last=start == last,
                threads=threads if start == last else [],
                dropped=log.dropped if start == last else 0,
                clock=[offset, self.clock.rtt_ns or 0],
                **sender,
            )
            for start in starts
        ]

    def send_report(
        self,
        log: SpanLog,
        next_request_id: Callable[[], int],
        send: Callable[[m.TraceSpans], Any],
        **sender: int,
    ) -> set[int]:
        """Sends ``log``'s ``report`` with ``send``; returns the request ids sent.

        A dispatcher of an older protocol takes no spans: logged, nothing sent.
        """
        report = self.report(log, next_request_id, **sender)
        try:
            for chunk in report:
                send(chunk)
        except FailedPreconditionError as error:
            logger.info("trace spans not sent: %s", error.message)
        return {chunk.request_id for chunk in report}


IDLE = Tracer()
"""A tracer no window ever opens: the default of what is given one later."""
