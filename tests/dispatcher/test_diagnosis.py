"""The bottleneck verdict from hand-made reports (pure)."""

from __future__ import annotations

from zmqdata._dispatcher.autoscale import Policy
from zmqdata._dispatcher.diagnosis import ConsumerReport, TaskReport, diagnose


def task(worker_id: int, elements: int, **stats: object) -> TaskReport:
    ops = [{"op": "range", "index": 0, "own_s": 9.0, "elements": elements}]
    return TaskReport(
        worker_id,
        f"w{worker_id}:1",
        elements / 10,
        {"elapsed_s": 10.0, "ops": ops, **stats},
    )


def consumer(client_id: int, rate: float, waited: float, rank: int | None = None):
    return ConsumerReport(client_id, rank, waited, int(rate * 10), rate)


def test_full_buffers_and_waiting_trainers_are_network_bound():
    report = diagnose(
        [task(1, 1000, buffer_fill=0.95, phases={"blocked": 8.0})],
        [consumer(7, 50.0, 0.6)],
        Policy(),
    )
    verdict = report["bottleneck"]
    assert verdict["kind"] == "network-bound"
    assert "faster than they arrive" in verdict["line"]


def test_a_slow_worker_and_a_slow_rank_are_named():
    tasks = [task(1, 1000), task(2, 1000), task(3, 100)]
    readers = [consumer(7, 100.0, 0.5, 0), consumer(8, 100.0, 0.5, 1)]
    readers.append(consumer(9, 20.0, 0.0, 2))
    report = diagnose(tasks, readers, Policy())
    assert [w["straggler"] for w in report["workers"]] == [False, False, True]
    assert [c["straggler"] for c in report["consumers"]] == [False, False, True]
    assert [c["lag"] for c in report["consumers"]] == [0, 0, 800]
    line = report["bottleneck"]["line"]
    assert line.endswith("stragglers: worker w3:1, rank 2")


def test_no_consumer_report_is_unknown_and_a_quiet_trainer_is_trainer_bound():
    assert diagnose([task(1, 10)], [], Policy())["bottleneck"]["kind"] == "unknown"
    quiet = diagnose([task(1, 10, buffer_fill=1.0)], [consumer(7, 5.0, 0.0)], Policy())
    assert quiet["bottleneck"]["kind"] == "trainer-bound"
    assert quiet["bottleneck"]["line"].endswith("the workers' buffers are 100% full")


def test_hostile_reports_are_read_as_nothing():
    odd = TaskReport(
        1, "w1:1", 0.0, {"elapsed_s": "x", "ops": [7, {"op": 3}], "phases": []}
    )
    report = diagnose([odd], [consumer(7, 1.0, 0.5)], Policy())
    assert report["ops"] == []
    assert report["bottleneck"]["kind"] == "input-bound"
