"""The worker's control core on a fake clock: ``WorkerControl.handle`` and ``tick``.

No socket, no thread, no sleep: each test feeds the core messages and ticks
at chosen times and checks the instructions it returns.
"""

from __future__ import annotations

from typing import Any

import pytest

from zmqdata._runtime.instruction import Instruction
from zmqdata._wire import messages as m
from zmqdata._worker.control_core import (
    DeleteTask,
    Drain,
    Left,
    RunSaves,
    Send,
    StartTasks,
    TraceReplied,
    TraceSent,
    WorkerControl,
    WorkerView,
)

HEARTBEAT_S = 1.0
TASK = {"task_id": 3}


def _view(tasks: list[list[Any]] | None = None, **fields: Any) -> WorkerView:
    return WorkerView(
        tasks=tasks or [], held=lambda: ["f"], stats=lambda: {"elements": 0}, **fields
    )


def _core(*args: Any, **kwargs: Any) -> WorkerControl:
    """A core whose shell shows it an idle worker until a tick says otherwise."""
    return WorkerControl(HEARTBEAT_S, _view, *args, **kwargs)


def _sent(instructions: list[Instruction]) -> list[m.Message]:
    return [i.message for i in instructions if isinstance(i, Send)]


def _seen(core: WorkerControl, now: float, view: WorkerView) -> list[Instruction]:
    """``core.tick`` at ``now``, the shell showing it ``view``."""
    core.view = lambda: view
    return core.tick(now)


def _tick(core: WorkerControl, now: float, view: WorkerView) -> list[Instruction]:
    """``core.tick``, its messages encoded (as sent) as the shell does."""
    out = _seen(core, now, view)
    for message in _sent(out):
        core.encode(message, now)
    return out


def _register(core: WorkerControl, now: float) -> list[Instruction]:
    """``core.register``, its message encoded (as sent) as the shell does."""
    out = core.register(now)
    for message in _sent(out):
        core.encode(message, now)
    return out


def _registered(heartbeat_max_ms: int = 4000) -> WorkerControl:
    """A core registered at t=0 as worker 7 (heartbeats due from t=1)."""
    core = _core(rng=lambda: 1.0)
    _register(core, now=0.0)
    core.handle(
        m.RegisterWorkerReply(
            request_id=1, worker_id=7, heartbeat_max_ms=heartbeat_max_ms
        ),
        now=0.0,
    )
    return core


def _beat(core: WorkerControl, now: float, view: WorkerView) -> m.WorkerHeartbeat:
    """The heartbeat the tick at ``now`` sends (it must send one)."""
    out = _tick(core, now, view)
    [heartbeat] = _sent(out)
    assert isinstance(heartbeat, m.WorkerHeartbeat)
    assert out == [TraceSent(heartbeat.request_id), Send(heartbeat)]
    return heartbeat


def _answer(core: WorkerControl, now: float, **reply: Any) -> list[Instruction]:
    """Answers the last heartbeat at ``now``."""
    return core.handle(
        m.WorkerHeartbeatReply(request_id=core.request_id, **reply), now=now
    )


def test_registers_with_its_registration_and_a_new_request_id() -> None:
    registration = m.RegisterWorker(worker_address="h:1", data_address="tcp://h:1")
    core = _core(registration)
    [register] = _sent(_register(core, now=0.0))
    assert register == m.RegisterWorker(
        request_id=1, worker_address="h:1", data_address="tcp://h:1"
    )
    assert core.silent_s(now=2.0) == 2.0  # unanswered since it went out
    core.handle(m.RegisterWorkerReply(request_id=1, worker_id=1), now=2.5)
    assert core.silent_s(now=3.0) == 0.0


def test_an_unanswered_registration_is_sent_again_with_backoff() -> None:
    core = _core(rng=lambda: 1.0)  # no jitter: the cap
    core.register(now=0.0)
    times, ids = [], []
    for _ in range(6):
        now = core.next_send
        assert _seen(core, now - 0.001, _view()) == []
        [register] = _sent(_seen(core, now, _view()))
        assert isinstance(register, m.RegisterWorker)
        times.append(now)
        ids.append(register.request_id)
    # Waits of 0.05, 0.1, 0.2, 0.4, 0.8, then one heartbeat interval at most.
    assert times == pytest.approx([0.05, 0.15, 0.35, 0.75, 1.55, 2.55])
    assert ids == [2, 3, 4, 5, 6, 7]


def test_the_registration_backoff_is_jittered_and_floored() -> None:
    core = _core(rng=lambda: 0.0)
    core.register(now=0.0)
    assert core.next_send == 0.05  # full jitter drew 0: the floor
    _seen(core, 0.05, _view())
    assert core.next_send == pytest.approx(0.1)


def test_a_reply_registers_and_starts_its_tasks_then_heartbeats_are_due() -> None:
    core = _core(rng=lambda: 1.0)
    core.register(now=0.0)
    out = core.handle(
        m.RegisterWorkerReply(request_id=1, worker_id=7, tasks=[TASK]), now=0.5
    )
    assert out == [StartTasks([TASK])]
    assert core.worker_id == 7
    assert core.silent_s(now=9.0) == 0.0
    assert _seen(core, 1.49, _view()) == []
    heartbeat = _beat(core, 1.5, _view([[3, False]]))
    assert (heartbeat.worker_id, heartbeat.tasks, heartbeat.base) == (
        7,
        [[3, False]],
        0,
    )
    assert heartbeat.stats == {"elements": 0}
    assert heartbeat.pipelines == ["f"]


def test_not_found_registers_again_and_a_reply_resets_the_backoff() -> None:
    core = _registered()
    out = core.handle(m.Error(code="NOT_FOUND", message="no worker 7"), now=5.0)
    [register] = _sent(out)
    assert isinstance(register, m.RegisterWorker)
    assert core.worker_id is None
    assert core.next_send == pytest.approx(5.05)
    assert _sent(_seen(core, core.next_send, _view()))  # unanswered: again, later
    assert core.next_send == pytest.approx(5.15)
    core.handle(m.RegisterWorkerReply(request_id=core.request_id, worker_id=8), 5.1)
    assert core.worker_id == 8
    core.handle(m.Error(code="NOT_FOUND", message="again"), now=6.0)
    assert core.next_send == pytest.approx(6.05)  # from the first delay again


def test_other_errors_change_nothing() -> None:
    core = _registered()
    assert core.handle(m.Error(code="INTERNAL", message="oops"), now=1.0) == []
    assert core.worker_id == 7


def test_quiet_heartbeats_stretch_to_the_ceiling_and_change_resets_them() -> None:
    core = _registered(heartbeat_max_ms=4000)
    view = _view([[3, False]])
    sent_at = []
    now = 1.0
    for _ in range(5):
        _beat(core, now, view)
        sent_at.append(now)
        assert _seen(core, now, view) == []
        _answer(core, now + 0.01)
        now = core.next_send
        assert _seen(core, now - 0.01, view) == []  # not due yet
    # The first reports the task (a change); then quiet: 1, 2, 4, 4 s apart.
    assert sent_at == [1.0, 2.0, 4.0, 8.0, 12.0]
    assert now == 16.0
    _beat(core, now, _view([[3, True]]))  # a change: back to the base
    _answer(core, now + 0.01)
    assert core.next_send == now + HEARTBEAT_S


def test_news_in_an_answer_brings_the_base_interval_back() -> None:
    core = _registered(heartbeat_max_ms=4000)
    view = _view()
    for now in (1.0, 2.0):
        _beat(core, now, view)
        _answer(core, now)
    assert core.next_send == 4.0  # quiet: doubled
    _beat(core, 4.0, view)
    _answer(core, 4.0, tasks_to_delete=[9])
    assert core.next_send == 5.0


def test_a_dispatcher_naming_no_ceiling_keeps_the_base_interval() -> None:
    core = _registered(heartbeat_max_ms=0)
    for now in (1.0, 2.0, 3.0):
        _beat(core, now, _view())
        _answer(core, now)
        assert core.next_send == now + HEARTBEAT_S


def _at_ceiling() -> WorkerControl:
    """A registered core whose quiet heartbeats are at their 2 s ceiling (due at 4)."""
    core = _registered(heartbeat_max_ms=2000)
    for now in (1.0, 2.0):  # a change, then a quiet one: 1 s, then 2 s
        _beat(core, now, _view())
        _answer(core, now)
    assert (core.next_send, core.pace.interval) == (4.0, 2.0)
    return core


def test_quiet_heartbeats_wait_while_split_requests_show_life() -> None:
    core = _at_ceiling()
    assert core.peer.version >= m.ADDED_IN["get_split_reply.period_ms"]
    _beat(core, 4.0, _view())  # quiet, and now the last one sent
    assert _seen(core, 6.0, _view(asked_at=5.5)) == []
    assert core.next_send == 7.5  # one interval past the split request
    assert _seen(core, 7.5, _view(asked_at=7.0)) == []
    assert core.next_send == 9.0
    assert _seen(core, 9.0, _view(asked_at=8.9)) == []
    assert core.next_send == pytest.approx(10.9)
    # STRETCH (4) intervals past the last heartbeat at most: t=12.
    assert _seen(core, 10.9, _view(asked_at=10.8)) == []
    assert core.next_send == 12.0
    _beat(core, 12.0, _view(asked_at=11.9))


def test_a_change_is_sent_even_while_split_requests_show_life() -> None:
    core = _at_ceiling()
    _beat(core, 4.0, _view())
    _beat(core, 6.0, _view([[3, False]], asked_at=5.9))


def test_without_split_requests_quiet_heartbeats_go_as_paced() -> None:
    core = _at_ceiling()
    _beat(core, 4.0, _view())
    _beat(core, 6.0, _view())


def test_an_older_dispatcher_does_not_count_split_requests() -> None:
    core = _at_ceiling()
    core.peer.version = m.ADDED_IN["get_split_reply.period_ms"] - 1
    _beat(core, 4.0, _view())
    _beat(core, 6.0, _view(asked_at=5.9))


def test_a_wake_reply_answers_nothing_and_heartbeats_now() -> None:
    core = _at_ceiling()
    _beat(core, 4.0, _view())
    quiet = core.quiet
    assert core.handle(m.WorkerHeartbeatReply(trace=[5, 10**12, 0]), now=4.5) == []
    assert (core.next_send, core.pace.interval) == (4.5, HEARTBEAT_S)
    assert core.quiet == quiet  # the heartbeat it did not answer is still open
    heartbeat = _beat(core, 4.5, _view())
    out = _answer(core, 4.6, trace=[5, 10**12, 0])
    assert out[0] == TraceReplied(heartbeat.request_id, [5, 10**12, 0])


def test_replies_start_and_delete_tasks_and_list_saves() -> None:
    core = _registered()
    _beat(core, 1.0, _view())
    save = {"save_id": "s1"}
    out = _answer(core, 1.1, new_tasks=[TASK], tasks_to_delete=[2, 4], saves=[save])
    assert out == [
        TraceReplied(core.request_id, []),
        StartTasks([TASK]),
        DeleteTask(2),
        DeleteTask(4),
        RunSaves([save], worker_id=7, start=True),
    ]
    assert core.handle(m.ProcessTask(tasks=[TASK]), now=1.2) == [StartTasks([TASK])]


def test_every_answer_lists_the_saves_to_run_even_none() -> None:
    core = _registered()
    _beat(core, 1.0, _view())
    assert _answer(core, 1.1)[-1] == RunSaves([], worker_id=7, start=True)


def test_heartbeats_go_as_deltas_once_one_was_answered() -> None:
    core = _registered()
    first = _beat(core, 1.0, _view())
    _answer(core, 1.0)
    second = _beat(core, 2.0, _view())
    assert (second.base, second.stats, second.pipelines) == (first.request_id, {}, [])


def test_drains_then_leaves_once_its_tasks_are_settled() -> None:
    core = _registered()
    _beat(core, 1.0, _view([[3, False]]))
    _answer(core, 1.0)
    unsettled = _view([[3, False]], drain_requested=True, settled=False)
    out = _tick(core, 1.2, unsettled)
    assert out[0] == Drain()  # at once, not at the next heartbeat
    [draining] = _sent(out)
    assert isinstance(draining, m.WorkerHeartbeat)
    assert draining.draining
    assert not draining.leaving
    out = _answer(core, 1.3, new_tasks=[TASK], saves=[{"save_id": "s1"}])
    assert not [i for i in out if isinstance(i, StartTasks)]  # starts nothing
    assert out[-1] == RunSaves([{"save_id": "s1"}], worker_id=7, start=False)
    assert Drain() not in _seen(core, 1.4, unsettled)  # once
    settled = _view([[3, True]], drain_requested=True, settled=True)
    leaving = _beat(core, 1.5, settled)
    assert leaving.draining
    assert leaving.leaving
    assert not [i for i in _seen(core, 1.6, settled) if isinstance(i, Send)]
    assert _answer(core, 1.7) == [TraceReplied(leaving.request_id, []), Left()]


def test_told_to_leave_now_it_leaves_unsettled() -> None:
    core = _registered()
    view = _view([[3, False]], drain_requested=True, settled=False, leave_now=True)
    out = _tick(core, 0.5, view)  # due at once, before the next heartbeat
    assert out[0] == Drain()
    [leaving] = _sent(out)
    assert isinstance(leaving, m.WorkerHeartbeat)
    assert leaving.leaving


def test_a_worker_not_registered_leaves_at_once_when_drained() -> None:
    core = _core(rng=lambda: 1.0)
    core.register(now=0.0)
    core.handle(m.Error(code="INTERNAL", message="busy"), now=0.01)  # answered
    out = _seen(core, 0.05, _view(drain_requested=True))
    assert out == [Drain(), Left()]


def test_a_silent_dispatcher_is_not_waited_for_to_leave() -> None:
    core = _registered(heartbeat_max_ms=0)  # silent for 3 heartbeats: gone
    _beat(core, 1.0, _view())  # unanswered from here
    assert _tick(core, 1.5, _view(drain_requested=True))[0] == Drain()
    assert Left() not in _tick(core, 3.9, _view(drain_requested=True))
    assert _tick(core, 4.01, _view(drain_requested=True))[0] == Left()


def test_answers_to_trace_reports_change_nothing() -> None:
    core = _registered()
    core.trace_requests = {41}
    refusal = m.Error(request_id=41, code="NOT_FOUND", message="no window")
    assert core.handle(refusal, now=1.0) == []
    assert core.worker_id == 7
