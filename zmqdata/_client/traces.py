"""Traces from the client side: a trainer's opt-in, and recording a trace.

A trainer's timing is its owner's: a read tells the dispatcher of trace
windows only once this process opted in (``share_traces(True)`` or
``ZMQDATA_TRACE=1``), and then records the time ``next()`` waited with
nothing buffered ("wait") and the time between two ``next()`` (its own work,
"step"). ``trace`` opens a window on the dispatcher, waits for it and for the
peers' spans, and returns them as a Chrome trace (docs/tracing.md).

>>> share_traces(True); sharing()
True
>>> share_traces(None)  # back to ZMQDATA_TRACE
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from zmqdata._client import rpc, settings
from zmqdata._runtime import chrome_trace, clock
from zmqdata._runtime.clock import Deadline
from zmqdata._runtime.spans import check_seconds
from zmqdata._wire import messages as m
from zmqdata._wire.address import dispatcher_target

GRACE_S = 5.0
"""How long after its window a trace waits for peers' spans at most."""
POLL_S = 0.1

_shared: bool | None = None


def share_traces(enabled: bool | None = True) -> None:
    """Whether this process's reads share their spans with ``zmqdata trace``.

    Process-wide, off by default; ``None`` goes back to the environment
    (``ZMQDATA_TRACE=1`` shares). Read at each heartbeat: it applies to reads
    already running too.
    """
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool or None, got {enabled!r}")
    global _shared
    _shared = enabled


def sharing() -> bool:
    """Whether reads share their spans now (``share_traces``, else ``ZMQDATA_TRACE``)."""
    if _shared is not None:
        return _shared
    return os.environ.get("ZMQDATA_TRACE", "") == "1"


def trace(
    service: Any = None,
    seconds: float = 10.0,
    path: str | os.PathLike[str] | None = None,
    *,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Records ``seconds`` of the cluster into one Chrome/Perfetto trace.

    The dispatcher, every worker and every read that shares traces
    (``share_traces``) record spans for ``seconds``; their clocks are aligned
    on the dispatcher's. Waits ``seconds``, then up to ``GRACE_S`` for the
    peers' spans: a trace whose peers did not all report says so
    (``metadata.complete``). Written to ``path`` if given. See docs/tracing.md.

    Args:
        service: The dispatcher's address [default: ``ZMQDATA_DISPATCHER``].
        seconds: The window, 0.1 to 120.
        path: Where to write the trace's JSON.
        timeout_s: How long each request keeps retrying an unreachable
            dispatcher; by default ``ZMQDATA_DISPATCHER_TIMEOUT_S``.

    Returns:
        The trace: ``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``.
    """
    seconds = check_seconds(seconds)
    target = dispatcher_target(service)
    if timeout_s is None:
        timeout_s = settings.current().dispatcher_timeout_s
    started = rpc.call(
        target, m.StartTrace(seconds=seconds), m.StartTraceReply, timeout_s
    )
    clock.sleep(seconds)
    grace = Deadline(GRACE_S)
    spans: list[list[Any]] = []
    while True:  # the spans so far, page by page, until every peer reported
        reply = _get(target, started.trace_id, len(spans), timeout_s)
        spans += reply.spans
        if len(spans) < reply.total:
            continue
        if reply.done or grace.expired():
            break
        clock.sleep(POLL_S)
    document = chrome_trace.build(
        reply.peers,
        spans,
        {
            "trace_id": reply.trace_id,
            "start_ns": reply.start_ns,
            "until_ns": reply.until_ns,
            "complete": reply.done,
            "dropped": reply.dropped,
            "dispatcher": target,
        },
    )
    if path is not None:
        Path(path).write_text(json.dumps(document))
    return document


def _get(target: str, trace_id: int, offset: int, timeout_s: float) -> m.GetTraceReply:
    request = m.GetTrace(trace_id=trace_id, offset=offset)
    return rpc.call(target, request, m.GetTraceReply, timeout_s)
