"""``zmqdata trace``: one Chrome trace from the dispatcher, the workers and sharing trainers."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
import zmq
from click.testing import CliRunner
from zmqdata_cli.main import main

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from tests.service.test_roles import RoleKeys, _roles_cluster
from zmqdata import service
from zmqdata._client import traces as client_traces
from zmqdata._dispatcher import traces
from zmqdata._runtime import chrome_trace, spans
from zmqdata._version import PROTOCOL_VERSION
from zmqdata._wire import messages as m
from zmqdata.errors import InvalidArgumentError, NotFoundError

WINDOW_S = 1.0
ALIGNED_US = 5_000
"""How far a span may start before the window (clock error), unless its peer's
measured clock uncertainty is larger (a loaded host's round trips)."""

# ------------------------------------------------------------------ pure parts


def test_clock_offset_keeps_the_round_trip_with_the_smallest_rtt() -> None:
    clock = spans.ClockOffset()
    clock.add(sent=0, remote=10_000, received=1_000)  # offset 9_500 +- 500
    clock.add(sent=2_000, remote=11_700, received=2_200)  # offset 9_600 +- 100: kept
    clock.add(sent=3_000, remote=0, received=2_000)  # a negative RTT: ignored
    clock.add(sent=4_000, remote=99_999, received=5_000)  # slower: not kept
    assert (clock.offset_ns, clock.rtt_ns) == (9_600, 200)
    assert clock.to_dispatcher(1_000) == 10_600


def test_a_window_opens_with_its_first_round_trip_and_reports_once() -> None:
    tracer = spans.Tracer()
    tracer.replied(1, [3, 10**9, 5])  # no send time known: nothing opens
    assert tracer.log is None
    tracer.sent(2, now_ns=100)
    tracer.replied(2, [3, 10_000, 1_150], now_ns=200)  # offset 1_000
    log = tracer.log
    assert log is not None
    assert log.until_ns == 10_000  # the dispatcher's clock
    log.add("a", "worker", 300, 400)
    log.add("late", "worker", 9_500, 9_600)  # after the window: not reported
    assert not tracer.due(now_ns=8_999)
    assert tracer.due(now_ns=9_000)
    ids = iter(range(10, 20))
    [chunk] = tracer.report(tracer.finish(), ids.__next__, worker_id=4)
    assert (chunk.request_id, chunk.worker_id, chunk.last) == (10, 4, True)
    assert chunk.spans == [["a", "worker", 1, 1_300, 1_400]]
    assert chunk.threads == [[1, threading.current_thread().name]]
    tracer.sent(3, now_ns=300)
    tracer.replied(3, [3, 10_000, 1_300], now_ns=310)
    assert tracer.log is None  # the same window is not opened again


def test_a_report_is_chunked_and_bounded() -> None:
    log = spans.SpanLog(trace_id=1, until_ns=10**9, limit=spans.CHUNK_SPANS + 5)
    for start in range(spans.CHUNK_SPANS + 7):
        log.add("op", "worker", start, start + 1)
    chunks = spans.Tracer().report(log, iter(range(100)).__next__, client_id=2)
    assert [(c.offset, len(c.spans), c.last) for c in chunks] == [
        (0, spans.CHUNK_SPANS, False),
        (spans.CHUNK_SPANS, 5, True),
    ]
    assert chunks[-1].dropped == 2
    assert chunks[0].dropped == 0


def nested_per_thread(events: list[dict[str, Any]]) -> bool:
    """Whether every thread's complete events nest (none overlaps another partly)."""
    by_thread: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(
                (e["ts"], e["ts"] + e["dur"])
            )
    for intervals in by_thread.values():
        open_ends: list[int] = []
        for start, end in sorted(intervals, key=lambda i: (i[0], -i[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                return False
            open_ends.append(end)
    return True


def test_the_writer_names_processes_and_threads_and_nests_spans() -> None:
    peers = [
        {"name": "dispatcher tcp://h:1", "threads": [[1, "loop"]], "clock": [0, 0]},
        {"name": "worker tcp://h:2", "threads": [[1, "data"]], "clock": [7, 4_000]},
    ]
    recorded = [
        [0, "group", "dispatcher", 1, 1_000_400, 1_009_600],
        [0, "get_split", "dispatcher", 1, 1_000_400, 1_009_600],  # same as its parent
        [1, "send", "worker", 1, 1_002_000, 1_004_000, {"elements": 3}],
        [1, "overlap", "worker", 1, 1_003_000, 1_005_000],  # overlaps "send": cut
        [5, "no such peer", "worker", 1, 1_000_000, 1_000_001],
    ]
    trace = chrome_trace.build(
        peers, recorded, {"start_ns": 10**6, "until_ns": 2 * 10**6}
    )
    events = trace["traceEvents"]
    json.dumps(trace)  # plain JSON
    assert trace["displayTimeUnit"] == "ms"
    names = {
        (e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"
    }
    assert names == {(1, "dispatcher tcp://h:1"), (2, "worker tcp://h:2")}
    threads = {
        (e["pid"], e["tid"], e["args"]["name"])
        for e in events
        if e["name"] == "thread_name"
    }
    assert threads == {(1, 1, "loop"), (2, 1, "data")}
    complete = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in complete] == ["group", "get_split", "send", "overlap"]
    assert complete[2]["args"] == {"elements": 3}
    assert (complete[3]["ts"], complete[3]["dur"]) == (1_003, 1)  # cut at send's end
    assert nested_per_thread(events)
    assert trace["metadata"]["peers"][1]["clock_uncertainty_us"] == 2.0
    assert trace["metadata"]["window_us"] == [1_000, 2_000]


# ------------------------------------------------------------------ the dispatcher's checks


@pytest.fixture
def window() -> traces.Traces:
    collected = traces.Traces()
    collected.start(1.0, now_ns=10**9, trace_id=9)
    collected.announce(("worker", 1), "worker tcp://h:1", now_ns=10**9)
    return collected


@pytest.mark.parametrize(
    "fields",
    [
        {"offset": 5},  # a gap: spans it never sent
        {"spans": [["op", "worker", 1, 2 * 10**9, 10**9]]},  # ends before it starts
        {"spans": [["op", "worker", 1, 10**15, 10**15 + 1]]},  # far outside the window
        {"spans": [["op", "worker", 0, 10**9, 10**9]]},  # thread 0
        {"spans": [["x" * 65, "worker", 1, 10**9, 10**9]]},  # a name too long
        {"spans": [["op", "worker", 1, 10**9, 10**9, {"k": [1]}]]},  # args not flat
        {"spans": [["op", "worker", 1, 10**9, 10**9, {str(i): i for i in range(9)}]]},
        {"spans": [["op", "worker", 1, 10**9, 2**70]]},  # past any clock
        {"spans": [["op", "worker", 1, True, 10**9]]},  # a bool for a time
        {"spans": [["op", "worker", 1, 10**9, 10**9]] * (spans.CHUNK_SPANS + 1)},
        {"spans": ["op"]},
        {"threads": [[1, "t"]] * (traces.MAX_THREADS + 1)},
        {"threads": [["1", "t"]]},
        {"clock": [1, -2]},
        {"dropped": -1},
    ],
)
def test_a_lying_chunk_is_refused_and_keeps_nothing(
    window: traces.Traces, fields: dict[str, Any]
) -> None:
    chunk = m.TraceSpans(trace_id=9, worker_id=1, **fields)
    with pytest.raises(InvalidArgumentError):
        window.receive(("worker", 1), chunk)
    assert window.window is not None
    assert window.window.spans == []


def test_spans_come_only_from_peers_asked_for_the_window_kept(
    window: traces.Traces,
) -> None:
    with pytest.raises(NotFoundError, match="was not asked"):
        window.receive(("client", 3), m.TraceSpans(trace_id=9, client_id=3))
    with pytest.raises(NotFoundError, match="no trace 8"):
        window.receive(("worker", 1), m.TraceSpans(trace_id=8, worker_id=1))
    span = ["op", "worker", 1, 10**9, 10**9 + 5]
    window.receive(("worker", 1), m.TraceSpans(trace_id=9, worker_id=1, spans=[span]))
    window.receive(("worker", 1), m.TraceSpans(trace_id=9, worker_id=1, spans=[span]))
    assert window.window is not None
    assert len(window.window.spans) == 1


def test_one_window_at_a_time_and_bounded() -> None:
    collected = traces.Traces()
    collected.start(2.0, now_ns=0, trace_id=1)
    with pytest.raises(Exception, match="being recorded"):
        collected.start(1.0, now_ns=10**9, trace_id=2)
    collected.start(1.0, now_ns=2 * 10**9, trace_id=3)  # the first one is over
    with pytest.raises(InvalidArgumentError, match="got 121"):
        collected.start(121, now_ns=5 * 10**9, trace_id=4)
    with pytest.raises(ValueError, match="got 0"):
        service.trace("localhost:1", seconds=0)


# ------------------------------------------------------------------ a cluster


@pytest.fixture
def cluster(cluster: Callable[..., Cluster]) -> Callable[..., Cluster]:
    """Clusters whose workers may miss heartbeats for seconds: recording a trace while
    a trainer reads flat out in this one process starves their heartbeat threads on a
    loaded two-core host, and a worker timed out mid-window records nothing."""
    return functools.partial(cluster, worker_timeout_ms=5_000)


@pytest.fixture
def shared_traces() -> Iterator[None]:
    client_traces.share_traces(True)
    yield
    client_traces.share_traces(None)


@dataclasses.dataclass(frozen=True)
class Reading:
    target: str


@contextlib.contextmanager
def reading(target: str) -> Iterator[Reading]:
    """A trainer thread reading an endless job from ``target`` until the block ends."""
    stop, started = threading.Event(), threading.Event()
    failures: list[BaseException] = []
    dataset = zd.Dataset.range(10**9).apply(
        service.distribute("distributed_epoch", target)
    )

    def train() -> None:
        iterator = iter(dataset)
        try:
            for _ in iterator:
                started.set()
                if stop.is_set():
                    return
        except BaseException as error:
            failures.append(error)
        finally:
            iterator.close()

    thread = threading.Thread(target=train, name="test-trainer")
    thread.start()
    try:
        poll_for(lambda: started.is_set() or failures)
        yield Reading(target)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert not failures, failures


def processes(trace: dict[str, Any]) -> dict[int, str]:
    return {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e["name"] == "process_name"
    }


def spans_by_process(trace: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    names = processes(trace)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names.values()}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            found[names[e["pid"]]].append(e)
    return found


def test_one_trace_holds_every_process_aligned(
    cluster: Callable[..., Cluster], shared_traces: None, tmp_path: Path
) -> None:
    path = tmp_path / "trace.json"
    two = cluster(2)
    with reading(two.target):
        trace = service.trace(two.target, seconds=WINDOW_S, path=path)
    workers = [w.address for w in two.workers]
    assert json.loads(path.read_text()) == trace
    found = spans_by_process(trace)
    kinds = sorted(name.split(" ")[0] for name in found)
    assert kinds == ["dispatcher", "trainer", "worker", "worker"], found.keys()
    assert sorted(n.split(" ")[1] for n in found if n.startswith("worker")) == sorted(
        workers
    )
    assert all(found.values()), {name: len(s) for name, s in found.items()}
    trainer = next(s for name, s in found.items() if name.startswith("trainer"))
    assert {e["name"] for e in trainer} <= {"wait", "step"}
    dispatcher = next(s for name, s in found.items() if name.startswith("dispatcher"))
    assert "client_heartbeat" in {e["name"] for e in dispatcher}
    assert nested_per_thread(trace["traceEvents"])
    metadata = trace["metadata"]
    assert metadata["complete"] is True
    low, high = metadata["window_us"]
    assert high - low == WINDOW_S * 1e6
    for peer in metadata["peers"]:
        assert peer["reported"], peer
        assert 0 <= peer["clock_uncertainty_us"] < 50_000, peer
        # A peer's window is cut in the dispatcher's clock: its spans start
        # before the end; they may seem to start early by its clock's error.
        starts = [e["ts"] for e in found[peer["name"]]]
        slack = max(ALIGNED_US, peer["clock_uncertainty_us"])
        assert low - slack <= min(starts), peer
        assert max(starts) <= high, peer


def test_a_trainer_that_did_not_opt_in_sends_nothing(
    cluster: Callable[..., Cluster],
) -> None:
    client_traces.share_traces(False)
    try:
        with reading(cluster(1).target) as read:
            trace = service.trace(read.target, seconds=0.3)
    finally:
        client_traces.share_traces(None)
    names = processes(trace).values()
    assert sorted(name.split(" ")[0] for name in names) == ["dispatcher", "worker"]
    assert not [e for e in trace["traceEvents"] if e.get("cat") == "trainer"]
    assert trace["metadata"]["complete"] is True


def test_the_cli_writes_the_trace_and_says_what_it_holds(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    path = tmp_path / "out.json"
    target = cluster(1).target
    result = CliRunner().invoke(
        main, ["trace", "--dispatcher", target, "--seconds", "0.3", "-o", str(path)]
    )
    refused = CliRunner().invoke(
        main, ["trace", "--dispatcher", target, "--seconds", "500"]
    )
    assert result.exit_code == 0, result.output
    trace = json.loads(path.read_text())
    spans_written = sum(e["ph"] == "X" for e in trace["traceEvents"])
    summary = result.output.splitlines()[-1]  # in-process servers log above it
    assert summary.startswith(f"wrote {spans_written} spans from ")
    assert summary.endswith(f"processes to {path}")
    assert refused.exit_code == 2
    assert "500" in refused.output


def test_hostile_trace_requests_are_refused_and_the_dispatcher_serves_on(
    cluster: Callable[..., Cluster], sockets: Any
) -> None:
    one = cluster(1)
    sock = sockets(one.target)
    started = rpc_start(sock)
    bad = [
        m.encode(m.TraceSpans(request_id=2, trace_id=started.trace_id, worker_id=1)),
        m.encode(m.TraceSpans(request_id=3, trace_id=started.trace_id, client_id=77)),
        m.encode(m.GetTrace(request_id=4, trace_id=started.trace_id, offset=-1)),
        m.encode(m.StartTrace(request_id=5, seconds=1e9)),
        m.encode(m.StartTrace(request_id=6, seconds=1.0)),  # one is open
        msgpack.packb(
            {"v": PROTOCOL_VERSION, "t": "trace_spans", "trace_id": 1, "spans": "x"}
        ),
        msgpack.packb(
            {
                "v": PROTOCOL_VERSION,
                "t": "trace_spans",
                "trace_id": 1,
                "spans": [[0] * 1000] * 300,
            }
        ),
    ]
    for payload in bad:
        sock.send(payload)
        assert isinstance(answer(sock), m.Error)
    sock.send(m.encode(m.GetStatus(request_id=8)))
    assert isinstance(answer(sock), m.GetStatusReply)
    assert one.num_registered_workers() == 1


def test_a_secured_cluster_is_traced_with_each_peers_role(
    cluster: Callable[..., Cluster],
    shared_traces: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    keys = RoleKeys(tmp_path)
    keys.use(monkeypatch, "alice")  # a client key: it may also trace
    secured = _roles_cluster(cluster, keys)
    with reading(secured.target) as read:  # a window every peer hears of in time
        trace = service.trace(read.target, seconds=WINDOW_S)
    kinds = sorted(name.split(" ")[0] for name in processes(trace).values())
    assert kinds == ["dispatcher", "trainer", "worker"]
    assert trace["metadata"]["complete"] is True


def rpc_start(sock: zmq.Socket[Any]) -> m.StartTraceReply:
    sock.send(m.encode(m.StartTrace(request_id=1, seconds=5.0)))
    reply = answer(sock)
    assert isinstance(reply, m.StartTraceReply)
    return reply


def answer(sock: zmq.Socket[Any]) -> m.Message:
    assert sock.poll(5_000), "no answer"
    return m.decode(sock.recv())


# ------------------------------------------------------------------ Perfetto


def test_perfettos_trace_processor_loads_the_trace(
    cluster: Callable[..., Cluster], shared_traces: None, tmp_path: Path
) -> None:
    binary = os.environ.get("PERFETTO_TP_PATH")
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    except ImportError:
        pytest.skip("SKIPPED LOUDLY: the `perfetto` package is not installed")
    if not binary:
        pytest.skip(
            "SKIPPED LOUDLY: no trace_processor_shell (set PERFETTO_TP_PATH; "
            "perfetto cannot download one without internet)"
        )
    path = tmp_path / "trace.json"
    with reading(cluster(2).target) as read:
        service.trace(read.target, seconds=WINDOW_S, path=path)
    processor = TraceProcessor(
        trace=str(path), config=TraceProcessorConfig(bin_path=binary)
    )
    try:
        rows = processor.query(
            "select process.name as name, count(*) as n from slice "
            "join thread_track on slice.track_id = thread_track.id "
            "join thread using (utid) join process using (upid) group by process.name"
        )
        counts = {row.name: row.n for row in rows}
    finally:
        processor.close()
    kinds = sorted(name.split(" ")[0] for name in counts)
    assert kinds == ["dispatcher", "trainer", "worker", "worker"], counts
    assert all(counts.values())
