"""Spans as a Chrome trace-event file (Perfetto and chrome://tracing load it).

Pure: ``build(peers, spans, window)`` turns what ``GetTraceReply`` carries
into ``{"traceEvents": [...], "displayTimeUnit": "ms", "metadata": {...}}``:
one ``pid`` per peer (named by a ``process_name`` event), one ``tid`` per
thread (``thread_name``), and a complete event (``"ph": "X"``) per span, with
``ts`` and ``dur`` in whole microseconds of the dispatcher's clock. Both ends
of a span are rounded down, so spans nested in nanoseconds stay nested; a
span that overlaps its enclosing one on the same thread (it cannot nest) is
cut at that one's end, so every thread's spans nest.

>>> peers = [
...     {"name": "dispatcher tcp://h:1", "kind": "dispatcher", "threads": [[1, "main"]],
...      "clock": [0, 0]},
...     {"name": "worker tcp://h:2", "kind": "worker", "threads": [], "clock": [5_000, 2_000]},
... ]
>>> spans = [[0, "group", "dispatcher", 1, 1_000, 9_999], [0, "get_split", "dispatcher", 1, 2_500, 9_999],
...          [1, "send", "worker", 1, 3_000, 4_000, {"elements": 2}]]
>>> trace = build(peers, spans, {"trace_id": 7, "start_ns": 0, "until_ns": 10_000})
>>> [(e["name"], e["pid"], e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X"]
[('group', 1, 1, 8), ('get_split', 1, 2, 7), ('send', 2, 3, 1)]
>>> [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
['main', 'thread 1']
>>> trace["metadata"]["peers"][1]["clock_uncertainty_us"]
1.0
"""

from __future__ import annotations

from typing import Any

CLOCK = "the dispatcher's CLOCK_MONOTONIC, microseconds"


def build(
    peers: list[dict[str, Any]], spans: list[list[Any]], window: dict[str, Any]
) -> dict[str, Any]:
    """The Chrome trace of ``spans`` (``[peer, name, cat, tid, start_ns, end_ns(, args)]``).

    ``peers[i]`` names span ``peer`` ``i`` (``name``, ``kind``, ``threads``
    ``[[tid, name], ...]``, ``clock`` ``[offset_ns, rtt_ns]``, and what else
    it holds goes to the metadata); ``window``: ``start_ns``, ``until_ns`` and
    what else the metadata should hold.
    """
    events: list[dict[str, Any]] = []
    threads: dict[int, dict[int, str]] = {}
    for pid, peer in enumerate(peers, start=1):
        events.append(_meta("process_name", pid, 0, {"name": str(peer.get("name"))}))
        events.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
        threads[pid] = {tid: str(name) for tid, name in peer.get("threads") or []}
    complete = []
    for span in spans:
        peer, name, cat, tid, start, end, *args = span
        pid = peer + 1
        if pid not in threads:
            continue  # no such peer: nothing to show it under
        threads[pid].setdefault(tid, f"thread {tid}")
        ts = start // 1000
        event = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid}
        event.update(ts=ts, dur=max(0, end // 1000 - ts))
        if args:
            event["args"] = args[0]
        complete.append(event)
    for pid, names in threads.items():
        for tid, name in sorted(names.items()):
            events.append(_meta("thread_name", pid, tid, {"name": name}))
    events += nested(complete)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "metadata": _metadata(peers, window),
    }


def nested(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Complete events sorted by thread and start, each cut to fit its parent.

    >>> [(e["ts"], e["dur"]) for e in nested([
    ...     {"pid": 1, "tid": 1, "ts": 0, "dur": 10},
    ...     {"pid": 1, "tid": 1, "ts": 5, "dur": 10},   # overlaps: cut at 10
    ...     {"pid": 1, "tid": 1, "ts": 12, "dur": 1}])]
    [(0, 10), (5, 5), (12, 1)]
    """
    ordered = sorted(events, key=lambda e: (e["pid"], e["tid"], e["ts"], -e["dur"]))
    thread: tuple[int, int] | None = None
    ends: list[int] = []  # the open spans' ends, innermost last
    for event in ordered:
        if (event["pid"], event["tid"]) != thread:
            thread, ends = (event["pid"], event["tid"]), []
        while ends and ends[-1] <= event["ts"]:
            ends.pop()
        end = event["ts"] + event["dur"]
        if ends and end > ends[-1]:
            end = ends[-1]
            event["dur"] = end - event["ts"]
        ends.append(end)
    return ordered


def _meta(name: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _metadata(peers: list[dict[str, Any]], window: dict[str, Any]) -> dict[str, Any]:
    """The window and each process: spans, drops, clock offset and uncertainty."""
    shown = []
    for pid, peer in enumerate(peers, start=1):
        offset, rtt = (peer.get("clock") or [0, 0])[:2]
        about = {k: v for k, v in peer.items() if k not in ("threads", "clock")}
        about.update(
            pid=pid,
            clock_offset_us=offset / 1000,
            clock_rtt_us=rtt / 1000,
            clock_uncertainty_us=rtt / 2000,
        )
        shown.append(about)
    start, until = window.get("start_ns", 0), window.get("until_ns", 0)
    rest = {k: v for k, v in window.items() if k not in ("start_ns", "until_ns")}
    return {
        **rest,
        "clock": CLOCK,
        "window_us": [start // 1000, until // 1000],
        "peers": shown,
    }
