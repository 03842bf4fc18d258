"""Trace requests: ``StartTrace``, ``GetTrace``, ``TraceSpans``.

The window and the spans peers send for it are kept by ``traces.Traces``
(``DispatcherState.traces``), the dispatcher's own spans by its ``Tracer``;
these handlers open the window, take spans and answer with them. Peers hear
of an open window with their next heartbeat (``workers.py``,
``consumers.py``). None of it is state: no event.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

from zmqdata._dispatcher import traces
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._wire import messages as m
from zmqdata.errors import NotFoundError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState


def ns(now: float) -> int:
    """``now`` (``time.monotonic()``) in nanoseconds: the clock of spans.

    ``time.perf_counter_ns`` reads the same clock (CLOCK_MONOTONIC on Linux).

    >>> ns(1.5)
    1500000000
    """
    return round(now * 1e9)


def start_trace(
    state: DispatcherState, peer: bytes, msg: m.StartTrace, now: float
) -> list[Outgoing]:
    """Opens a trace window: peers hear of it with their next heartbeat.

    Workers are woken now (a reply to no request, saying so): a quiet one
    would otherwise hear of it up to a quarter of ``worker_timeout_ms``
    late; they heartbeat at once and learn it with its clock.
    """
    close_trace(state, now)
    window = state.traces.start(msg.seconds, ns(now), random.getrandbits(48) + 1)
    state.tracer.open(window.trace_id, window.until_ns)
    reply = m.StartTraceReply(
        request_id=msg.request_id,
        trace_id=window.trace_id,
        start_ns=window.start_ns,
        until_ns=window.until_ns,
    )
    wake = m.WorkerHeartbeatReply(trace=[window.trace_id, window.until_ns, 0])
    workers = state.records.workers.values()
    return [Outgoing(peer, reply), *(Outgoing(worker.peer, wake) for worker in workers)]


def get_trace(
    state: DispatcherState, peer: bytes, msg: m.GetTrace, now: float
) -> list[Outgoing]:
    """The spans of the window, the dispatcher's own and its live peers'."""
    close_trace(state, now)
    records = state.records

    def live(key: traces.PeerKey) -> bool:
        kind, peer_id = key
        return peer_id in (records.workers if kind == "worker" else records.clients)

    return [Outgoing(peer, state.traces.answer(msg, ns(now), live))]


def trace_spans(
    state: DispatcherState, peer: bytes, msg: m.TraceSpans, now: float
) -> list[Outgoing]:
    """A peer's spans, from its own socket (a worker) or key (``access.py``)."""
    if msg.worker_id:
        worker = state.records.workers.get(msg.worker_id)
        if worker is None or worker.peer != peer or msg.client_id:
            raise NotFoundError(f"worker {msg.worker_id!r:.30} is not this peer")
        key: traces.PeerKey = ("worker", msg.worker_id)
    else:
        key = ("client", msg.client_id)
    state.traces.receive(key, msg)
    return [Outgoing(peer, m.Ok(request_id=msg.request_id))]


def close_trace(state: DispatcherState, now: float) -> None:
    """Keeps the dispatcher's spans once its window is over; forgets old ones."""
    now_ns = ns(now)
    if state.tracer.due(now_ns):
        log = state.tracer.finish()
        if log is not None:
            state.traces.own(log)
    state.traces.expire(now_ns)
