"""Trace windows on the dispatcher: which peers were asked, the spans they sent.

Pure (times in, no clock): ``DispatcherState`` opens a window (``start``),
tells workers and sharing consumers of it in their heartbeat replies
(``announce``), takes their ``TraceSpans`` (``receive``, every field checked:
a peer's spans can make the dispatcher keep at most what it sent, and at most
``MAX_TRACE_SPANS`` in all) and answers ``GetTrace`` (``answer``). One window
at a time; the last one is kept until ``KEEP_NS`` after its end, or a new one.

>>> from zmqdata._wire import messages as m
>>> traces = Traces()
>>> window = traces.start(1.0, now_ns=0, trace_id=5)
>>> traces.announce(("worker", 1), "worker h:1", now_ns=10)
[5, 1000000000, 10]
>>> traces.receive(("worker", 1), m.TraceSpans(
...     trace_id=5, worker_id=1, spans=[["send", "worker", 1, 20, 30]], last=True))
>>> traces.own(SpanLog(trace_id=5, until_ns=10**9))  # the dispatcher's: none
>>> reply = traces.answer(m.GetTrace(trace_id=5), now_ns=2 * 10**9, live=lambda k: True)
>>> reply.done, reply.spans, [peer["name"] for peer in reply.peers]
(True, [[1, 'send', 'worker', 1, 20, 30]], ['dispatcher', 'worker h:1'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from zmqdata._runtime.spans import (
    CHUNK_SPANS,
    MAX_SPANS,
    SpanLog,
    check_seconds,
    thread_names,
)
from zmqdata._wire import messages as m
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)

MAX_TRACE_SPANS = 1_000_000
"""The most spans a window keeps from all peers; more are counted as dropped."""
REPLY_SPANS = 10_000
"""Spans per ``GetTraceReply``: the caller pages through the rest."""
SLACK_NS = 10 * 10**9
"""How far outside the window a span may lie (clock error, late closes)."""
KEEP_NS = 600 * 10**9
"""How long a window's spans are kept after its end, for a late ``GetTrace``."""
MAX_NAME_CHARS = 64
MAX_CAT_CHARS = 32
MAX_ARGS = 8
MAX_ARG_CHARS = 128
MAX_THREADS = 4_096
MAX_INT = 2**62

PeerKey = tuple[str, int]
"""``("worker", worker_id)`` or ``("client", client_id)``; the dispatcher is ``("dispatcher", 0)``."""
DISPATCHER: PeerKey = ("dispatcher", 0)


@dataclass
class Peer:
    """One process of a window: asked (announced to), and what it sent."""

    name: str
    kind: str
    received: int = 0
    reported: bool = False
    dropped: int = 0
    threads: list[list[Any]] = field(default_factory=list)
    clock: list[int] = field(default_factory=list)

    def as_dict(self, gone: bool) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "spans": self.received,
            "reported": self.reported,
            "gone": gone,
            "dropped": self.dropped,
            "threads": self.threads,
            "clock": self.clock,
        }


@dataclass
class Window:
    """One trace window, in the dispatcher's clock."""

    trace_id: int
    start_ns: int
    until_ns: int
    peers: dict[PeerKey, Peer]
    spans: list[list[Any]] = field(default_factory=list)
    dropped: int = 0
    names: dict[str, str] = field(default_factory=dict)
    """Span names and categories, one string each (spans hold many of them)."""

    def index(self, key: PeerKey) -> int:
        return list(self.peers).index(key)


class Traces:
    """The dispatcher's trace window (one at a time) and what peers sent for it."""

    def __init__(self) -> None:
        self.window: Window | None = None
        self.name = "dispatcher"
        """The dispatcher's process name in traces (the server adds its address)."""

    def start(self, seconds: float, now_ns: int, trace_id: int) -> Window:
        """Opens a window of ``seconds`` now; one still open refuses."""
        try:
            seconds = check_seconds(seconds)
        except ValueError as error:
            raise InvalidArgumentError(f"start_trace: {error}") from None
        if self.window is not None and now_ns < self.window.until_ns:
            raise FailedPreconditionError(
                f"trace {self.window.trace_id} is being recorded for another "
                f"{(self.window.until_ns - now_ns) / 1e9:.1f} s; try again then"
            )
        peers = {DISPATCHER: Peer(self.name, "dispatcher")}
        until = now_ns + round(seconds * 1e9)
        self.window = Window(trace_id, now_ns, until, peers)
        return self.window

    def announce(self, key: PeerKey, name: str, now_ns: int) -> list[int]:
        """A heartbeat reply's ``trace`` for peer ``key``: the open window, or []."""
        window = self.window
        if window is None or now_ns >= window.until_ns:
            return []
        if key not in window.peers:
            window.peers[key] = Peer(name, key[0])
        return [window.trace_id, window.until_ns, now_ns]

    def expire(self, now_ns: int) -> None:
        """Forgets a window ended ``KEEP_NS`` ago."""
        if self.window is not None and now_ns > self.window.until_ns + KEEP_NS:
            self.window = None

    def own(self, log: SpanLog) -> None:
        """The dispatcher's own spans (its clock is the trace's)."""
        window = self._window(log.trace_id)
        tids: dict[int, int] = {}
        spans = []
        for name, cat, ident, start, end, args in log.within():
            span = [name, cat, tids.setdefault(ident, len(tids) + 1), start, end]
            spans.append(span if args is None else [*span, args])
        names = thread_names(tids)
        self._keep(window, DISPATCHER, spans)
        peer = window.peers[DISPATCHER]
        peer.received, peer.reported, peer.clock = len(spans), True, [0, 0]
        peer.dropped = log.dropped
        peer.threads = [[tid, names[ident]] for ident, tid in tids.items()]

    def receive(self, key: PeerKey, msg: m.TraceSpans) -> None:
        """Takes one chunk of a peer's spans; a duplicate chunk changes nothing.

        Raises:
            NotFoundError: Not the window kept, or a peer it did not ask.
            InvalidArgumentError: Anything malformed or out of bounds.
        """
        window = self._window(msg.trace_id)
        peer = window.peers.get(key)
        if peer is None or key == DISPATCHER:
            raise NotFoundError(
                f"{key[0]} {key[1]} was not asked for trace {msg.trace_id}"
            )
        if peer.reported or msg.offset < peer.received:
            return  # sent again
        _check_chunk(peer, msg)
        spans = [self._checked(window, span) for span in msg.spans]
        threads = _checked_threads(msg.threads)
        clock = _checked_clock(msg.clock)
        _check_dropped(msg.dropped)
        self._keep(window, key, spans)
        peer.received += len(spans)
        peer.clock = clock
        if msg.last:
            peer.reported, peer.dropped, peer.threads = True, msg.dropped, threads

    def answer(
        self, msg: m.GetTrace, now_ns: int, live: Callable[[PeerKey], bool]
    ) -> m.GetTraceReply:
        """Window ``msg.trace_id`` from ``msg.offset`` on; ``live``: a peer still here."""
        window = self._window(msg.trace_id)
        if not _is_int(msg.offset) or not 0 <= msg.offset <= len(window.spans):
            raise InvalidArgumentError(f"get_trace.offset: got {msg.offset!r:.50}")
        gone = {key: key != DISPATCHER and not live(key) for key in window.peers}
        done = now_ns >= window.until_ns and all(
            peer.reported or gone[key] for key, peer in window.peers.items()
        )
        return m.GetTraceReply(
            request_id=msg.request_id,
            trace_id=window.trace_id,
            start_ns=window.start_ns,
            until_ns=window.until_ns,
            done=done,
            peers=[peer.as_dict(gone[key]) for key, peer in window.peers.items()],
            offset=msg.offset,
            spans=window.spans[msg.offset : msg.offset + REPLY_SPANS],
            total=len(window.spans),
            dropped=window.dropped,
        )

    def _window(self, trace_id: int) -> Window:
        window = self.window
        if window is None or window.trace_id != trace_id:
            raise NotFoundError(f"no trace {trace_id!r:.50} (kept: only the last one)")
        return window

    def _keep(self, window: Window, key: PeerKey, spans: list[list[Any]]) -> None:
        room = max(0, MAX_TRACE_SPANS - len(window.spans))
        index = window.index(key)
        window.spans += [[index, *span] for span in spans[:room]]
        window.dropped += max(0, len(spans) - room)

    def _checked(self, window: Window, span: Any) -> list[Any]:
        """``span`` if it is ``[name, cat, tid, start_ns, end_ns(, args)]`` in bounds."""
        if not isinstance(span, list) or len(span) not in (5, 6):
            raise InvalidArgumentError(f"trace_spans: bad span {span!r:.100}")
        name, cat, tid, start, end, *args = span
        if not (
            _is_text(name, MAX_NAME_CHARS)
            and _is_text(cat, MAX_CAT_CHARS)
            and _is_int(tid)
            and 0 < tid <= MAX_THREADS
            and _is_within(window, start, end)
            and (not args or _is_args(args[0]))
        ):
            raise InvalidArgumentError(
                f"trace_spans: span {span!r:.100} is malformed or outside the window"
            )
        names = window.names
        checked = [names.setdefault(name, name), names.setdefault(cat, cat), tid]
        return [*checked, start, end, *args]


def _is_int(value: Any) -> bool:
    return type(value) is int and -MAX_INT < value < MAX_INT


def _is_within(window: Window, start: Any, end: Any) -> bool:
    """``start`` to ``end`` is a span of the window, give or take ``SLACK_NS``."""
    low, high = window.start_ns - SLACK_NS, window.until_ns + SLACK_NS
    return _is_int(start) and _is_int(end) and low <= start <= end <= high


def _is_text(value: Any, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit


def _is_args(args: Any) -> bool:
    return (
        isinstance(args, dict)
        and len(args) <= MAX_ARGS
        and all(
            _is_text(key, MAX_NAME_CHARS)
            and (
                _is_int(value)
                or isinstance(value, float | bool)
                or (isinstance(value, str) and len(value) <= MAX_ARG_CHARS)
            )
            for key, value in args.items()
        )
    )


def _checked_threads(threads: Any) -> list[list[Any]]:
    if len(threads) > MAX_THREADS or not all(
        isinstance(entry, list)
        and len(entry) == 2
        and _is_int(entry[0])
        and _is_text(entry[1], MAX_NAME_CHARS)
        for entry in threads
    ):
        raise InvalidArgumentError(f"trace_spans.threads: got {threads!r:.100}")
    return list(threads)


def _checked_clock(clock: Any) -> list[int]:
    if clock and not (
        len(clock) == 2 and all(_is_int(value) for value in clock) and clock[1] >= 0
    ):
        raise InvalidArgumentError(f"trace_spans.clock: got {clock!r:.100}")
    return list(clock)


def _check_chunk(peer: Peer, msg: m.TraceSpans) -> None:
    """A new chunk must follow on what ``peer`` sent and keep within the bounds."""
    if msg.offset != peer.received:
        raise InvalidArgumentError(
            f"trace_spans.offset: expected {peer.received}, got {msg.offset!r}"
        )
    if len(msg.spans) > CHUNK_SPANS or peer.received + len(msg.spans) > MAX_SPANS:
        raise InvalidArgumentError(
            f"trace_spans: {len(msg.spans)} spans after {peer.received}: over "
            f"{CHUNK_SPANS} a chunk or {MAX_SPANS} a peer"
        )


def _check_dropped(dropped: Any) -> None:
    """How many spans a peer dropped: a count within bounds."""
    if not _is_int(dropped) or not 0 <= dropped < MAX_INT:
        raise InvalidArgumentError(f"trace_spans.dropped: got {dropped!r:.50}")
