"""``zmqdata up --autoscale``: the worker count follows a consumer's demand, losing nothing.

Real processes: ``zmqdata up`` runs the dispatcher and its worker processes; the
consumer reads a ``distributed_epoch`` job in this process. Its demand steps up
(it reads as fast as it can; each element costs a worker ~2 ms of CPU), then
down (a paced reader, far below what one worker makes), then up again to read
the rest. The trace (time, demand, recommended and live workers) is printed and
saved (``ZMQDATA_AUTOSCALE_TRACE``, else the test's tmp dir) for the docs.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from zmqdata import service
from zmqdata._runtime import clock

pytestmark = pytest.mark.timeout(150)

N = 8000
ELEMENT_INTS = 65536  # 256 KiB: a worker buffers 256 of them (its 64 MiB)
BURN_S = 0.002
FAST_S = 9.0
SLOW_S = 13.0
SLOW_RATE = 25.0  # elements/s, paced against a monotonic deadline
UP_BOUND_S = 9.0
"""A second worker runs within this long of the demand stepping up."""
DOWN_BOUND_S = 13.0
"""A worker is drained within this long of the demand stepping down."""
STATUS_EVERY_S = 0.25


def _element(x: Any) -> Any:
    deadline = time.perf_counter() + BURN_S  # ~2 ms of CPU per element
    while time.perf_counter() < deadline:
        pass
    return np.full(ELEMENT_INTS, x, dtype=np.int32)


class _Trace:
    """The autoscaler's view over time, read from ``get_status``."""

    def __init__(self, target: str) -> None:
        self.target, self.start = target, time.monotonic()
        self.rows: list[tuple[float, str, float, int, int, str]] = []
        self._due = 0.0

    def poll(self, phase: str) -> None:
        now = time.monotonic()
        if now < self._due:
            return
        self._due = now + STATUS_EVERY_S
        scale = service.get_status(self.target)["autoscale"]
        self.rows.append(
            (
                now - self.start,
                phase,
                scale["starved"],
                scale["recommended_workers"],
                scale["workers"],
                scale["reason"],
            )
        )

    def workers(self, phase: str) -> list[tuple[float, int]]:
        return [(t, w) for t, p, _, _, w, _ in self.rows if p == phase]

    def text(self) -> str:
        lines = ["time_s  demand  starved  recommended  workers  reason"]
        for t, phase, starved, recommended, workers, reason in self.rows:
            lines.append(
                f"{t:6.2f}  {phase:6}  {starved:7.2f}  {recommended:11d}  "
                f"{workers:7d}  {reason}"
            )
        return "\n".join(lines)


def test_workers_follow_demand_up_and_down_and_every_element_arrives_once(
    tmp_path: Path,
) -> None:
    config = tmp_path / "up.yaml"
    config.write_text(
        "dispatcher: {port: 0, worker_timeout_ms: 60000}\n"
        "worker: {heartbeat_interval_ms: 100}\n"
        "workers: 1\n"
    )
    args = ["--autoscale", "1:3", "--autoscale-interval", "0.5"]
    args += ["--autoscale-window", "1.5", "--autoscale-cooldown", "2"]
    with zmqdata("up", str(config), *args) as up:
        match = up.wait_for_line(r"deployment ready: dispatcher (\S+), (\d+) workers")
        target = match.group(1)
        assert int(match.group(2)) == 1
        dataset = zd.Dataset.range(N).map(_element)
        reader = dataset.apply(
            service.distribute(
                "distributed_epoch",
                target,
                compression=None,
                max_outstanding_requests=32,
            )
        )
        trace = _Trace(target)
        seen: list[int] = []
        it = iter(reader)
        phases = (
            ("up", FAST_S, None),
            ("down", SLOW_S, SLOW_RATE),
            ("tail", None, None),
        )
        for phase, duration, rate in phases:
            ends = None if duration is None else time.monotonic() + duration
            next_at = time.monotonic()
            for element in it:
                seen.append(int(element[0]))
                trace.poll(phase)
                if rate is not None:  # paced: demand well below one worker
                    next_at += 1 / rate
                    clock.sleep(max(0.0, next_at - time.monotonic()))
                if ends is not None and time.monotonic() >= ends:
                    break
        assert up.stop(signal.SIGINT) == 0

    text = trace.text()
    print(f"\nautoscaling trace (every {STATUS_EVERY_S} s):\n{text}")
    out = Path(os.environ.get("ZMQDATA_AUTOSCALE_TRACE", tmp_path / "trace.txt"))
    out.write_text(text + "\n")
    decisions = r"autoscale: |draining|left|leaving anyway|lost keys|timed out"
    print("\n".join(line for line in up.lines if re.search(decisions, line)))

    # No element lost or duplicated, through every worker added and drained.
    assert len(seen) == N
    assert sorted(seen) == list(range(N))
    # Demand up: a second worker within UP_BOUND_S; demand down: one drained
    # within DOWN_BOUND_S of the step down.
    grown = [t for t, w in trace.workers("up") if w >= 2]
    assert grown, text
    assert grown[0] - trace.workers("up")[0][0] <= UP_BOUND_S, text
    peak = max(w for _, w in trace.workers("up"))
    down = trace.workers("down")
    shrunk = [t for t, w in down if w < peak]
    assert shrunk, text
    assert shrunk[0] - down[0][0] <= DOWN_BOUND_S, text
    assert up.count(r"autoscale: \d+ -> \d+ workers, adding worker") >= 1
    assert up.count(r"autoscale: \d+ -> \d+ workers, draining worker") >= 1
    assert "Traceback" not in up.stderr


@pytest.mark.parametrize("value", ["3:1", "0:2", "two", "1:x", "4"])
def test_a_bad_autoscale_range_fails_naming_the_value(tmp_path: Path, value: str):
    config = tmp_path / "up.yaml"
    config.write_text("workers: 1\n")
    result = run("up", str(config), "--autoscale", value)
    assert result.returncode == 2
    assert f"expected MIN:MAX with 1 <= MIN <= MAX (e.g. 1:4), got {value!r}" in (
        result.stderr
    )
