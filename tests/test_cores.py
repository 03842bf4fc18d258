"""The three roles' pure cores share one contract (docs/architecture.md).

``tick(now)`` takes the time alone and returns a list of ``Instruction``s, as
each core's ``handle`` does: the dispatcher's ``DispatcherState``, the
worker's ``WorkerControl`` and the client's ``ReadCore``.
"""

from __future__ import annotations

import inspect
from typing import get_args, get_origin

import pytest

from tests.client.fakes import TIMEOUTS, LinkTable, options
from zmqdata._client import instructions as i
from zmqdata._client.core import Counters, ReadCore
from zmqdata._client.credit import CreditPlan
from zmqdata._config import DispatcherConfig
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._dispatcher.state import DispatcherState
from zmqdata._runtime.instruction import Instruction
from zmqdata._wire import messages as m
from zmqdata._worker.control_core import WorkerControl, WorkerView


@pytest.mark.parametrize("core", [DispatcherState, WorkerControl, ReadCore])
def test_tick_takes_the_time_alone_and_returns_a_list(core: type) -> None:
    tick = inspect.signature(core.tick, eval_str=True)
    assert list(tick.parameters) == ["self", "now"]
    assert tick.parameters["now"].annotation is float
    assert get_origin(tick.return_annotation) is list
    [item] = get_args(tick.return_annotation)
    assert issubclass(item, Instruction)


def test_the_dispatcher_returns_outgoing_instructions() -> None:
    state = DispatcherState(DispatcherConfig(worker_timeout_ms=1_000))
    register = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    [reply] = state.handle(b"w", register, now=0.0)
    assert isinstance(reply, Outgoing)
    assert isinstance(reply, Instruction)
    peer, message = reply
    assert (peer, type(message)) == (b"w", m.RegisterWorkerReply)
    assert state.tick(now=2.0) == []  # the worker timed out: nothing to send


def test_the_worker_reads_its_view_at_each_tick() -> None:
    views = iter([WorkerView(tasks=[], held=list, stats=dict, drain_requested=True)])
    core = WorkerControl(1.0, lambda: next(views))
    out = core.tick(0.0)  # never registered: draining, it leaves at once
    assert [type(x).__name__ for x in out] == ["Drain", "Left"]
    assert all(isinstance(x, Instruction) for x in out)
    with pytest.raises(StopIteration):  # one view read per tick
        core.tick(0.1)


def test_the_reader_returns_its_instructions() -> None:
    counters = Counters()
    read = options()
    core = ReadCore(
        read, TIMEOUTS, 7, counters, CreditPlan(read, counters), LinkTable(), 0.0
    )
    [beat] = core.tick(0.0)  # the first heartbeat goes at once
    assert isinstance(beat, i.ToDispatcher)
    assert isinstance(beat, Instruction)
