"""Trainers stop fast: Ctrl-C, a script ending mid-iteration, ``close`` under ``prefetch``.

The trainer runs in a child process reading from a cluster in this one, as in
the field: the reader's threads are the only zmqdata threads it has.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator

import pytest

import zmqdata as zd
from tests.helpers import poll_for
from tests.service.cluster import Cluster
from zmqdata import service

FAST_S = 1.0
SIGINT_EXIT_S = 3.0
"""A slow read's bound: ~0.1-0.3 s measured, up to 1 s on 2 loaded cores."""
CHILD_TIMEOUT_S = 30.0

_TRAINER = """
import signal
import sys
import zmqdata as zd

# Ctrl-C raises KeyboardInterrupt, as in a terminal, even when the suite runs
# as a background job (which starts with SIGINT ignored, and so would we).
signal.signal(signal.SIGINT, signal.default_int_handler)
from zmqdata import service

ds = zd.Dataset.range(10**9).apply(service.distribute("parallel_epochs", sys.argv[1]))
ds = ds.prefetch(2) if sys.argv[2] == "prefetch" else ds
"""

TRAINING_LOOP = (
    _TRAINER
    + """
for step, x in enumerate(ds):
    if step == 100:
        print("training", flush=True)
"""
)

UNFINISHED = (
    _TRAINER
    + """
it = iter(ds)
next(it)
print("training", flush=True)
"""
)

SLOW_READ = """
import signal
import sys
import threading
import zmqdata as zd

signal.signal(signal.SIGINT, signal.default_int_handler)
from zmqdata import service


def slow(x):  # ten fast elements, then one every half second
    threading.Event().wait(0.5 if x >= 10 else 0)
    return x


ds = zd.Dataset.range(10**6).map(slow)
ds = ds.apply(service.distribute("distributed_epoch", sys.argv[1]))
at = {"start": -1, "element": 3, "waiting": 9}[sys.argv[2]]
if at < 0:
    print("training", flush=True)
with iter(ds) as it:
    for x in it:
        if x == at:
            print("training", flush=True)
"""
"""A ``distributed_epoch`` read of a slow map, told (argv[2]) when to say
"training": before ``iter`` (Ctrl-C meets first contact and the reader's
start), on element 3 (elements stream), on element 9 (the next one is 0.5 s
away: Ctrl-C meets the wait)."""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    """Child processes, killed at teardown if a test left them running."""
    made: list[subprocess.Popen[str]] = []
    yield made
    for proc in made:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _time_to_exit(
    children: list[subprocess.Popen[str]],
    code: str,
    target: str,
    variant: str,
    interrupt: bool,
) -> tuple[float, subprocess.Popen[str], str]:
    """Runs ``code`` until it prints "training"; (seconds it then takes to exit,
    the process, its stderr), after a SIGINT if ``interrupt``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), target, variant],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    children.append(proc)
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], CHILD_TIMEOUT_S)
    assert readable, f"the child printed nothing in {CHILD_TIMEOUT_S} s"
    assert proc.stdout.readline().strip() == "training"
    start = time.monotonic()
    if interrupt:
        proc.send_signal(signal.SIGINT)
    try:
        _, stderr = proc.communicate(timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        state = _where(proc.pid)
        proc.kill()
        _, stderr = proc.communicate()
        raise AssertionError(
            f"the child did not exit in {CHILD_TIMEOUT_S} s: {state}\n{stderr}"
        ) from None
    return time.monotonic() - start, proc, stderr


def _assert_interrupted(
    elapsed: float, proc: subprocess.Popen[str], stderr: str, bound_s: float
) -> None:
    """The child exited within ``bound_s`` of SIGINT, on one KeyboardInterrupt."""
    assert elapsed < bound_s, f"exit took {elapsed:.2f} s after SIGINT"
    assert proc.returncode != 0
    assert stderr.count("Traceback") == 1, stderr
    assert stderr.rstrip().endswith("KeyboardInterrupt"), stderr
    assert "Exception ignored" not in stderr


def _where(pid: int) -> str:
    """A hung child's signal masks and where each of its threads waits (Linux)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            masks = [line.strip() for line in status if line.startswith("Sig")]
        waits = []
        for task in sorted(os.listdir(f"/proc/{pid}/task")):
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/{pid}/task/{task}/wchan") as wchan:
                waits.append(f"{name}:{wchan.read().strip()}")
    except OSError as error:
        return f"(no /proc view: {error})"
    return f"{masks} threads {waits}"


@pytest.mark.parametrize("variant", ["plain", "prefetch"])
def test_ctrl_c_in_a_training_loop_exits_at_once(
    cluster: Callable[..., Cluster],
    children: list[subprocess.Popen[str]],
    variant: str,
) -> None:
    target = cluster(num_workers=1).target
    elapsed, proc, stderr = _time_to_exit(
        children, TRAINING_LOOP, target, variant, interrupt=True
    )
    _assert_interrupted(elapsed, proc, stderr, FAST_S)


@pytest.mark.parametrize("moment", ["start", "element", "waiting"])
def test_ctrl_c_in_a_slow_read_exits_at_once(
    cluster: Callable[..., Cluster],
    children: list[subprocess.Popen[str]],
    moment: str,
) -> None:
    c = cluster(num_workers=1)
    elapsed, proc, stderr = _time_to_exit(
        children, SLOW_READ, c.target, moment, interrupt=True
    )
    _assert_interrupted(elapsed, proc, stderr, SIGINT_EXIT_S)
    if moment != "start":  # (Ctrl-C during first contact may leave a job made)
        poll_for(lambda: c.status()["jobs"] == [])


@pytest.mark.parametrize("variant", ["plain", "prefetch"])
def test_script_ending_with_an_unfinished_iterator_exits_at_once(
    cluster: Callable[..., Cluster],
    children: list[subprocess.Popen[str]],
    variant: str,
) -> None:
    c = cluster(num_workers=1)
    elapsed, proc, stderr = _time_to_exit(
        children, UNFINISHED, c.target, variant, interrupt=False
    )
    assert elapsed < FAST_S, f"exit took {elapsed:.2f} s"
    assert (proc.returncode, stderr) == (0, "")
    # The reader released its iteration on the way out: its unnamed job is gone.
    poll_for(lambda: c.status()["jobs"] == [])


def test_closing_prefetch_while_an_element_is_pending_returns_at_once(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster(num_workers=1).target
    slow = zd.Dataset.range(10**9).map(lambda x: threading.Event().wait(2) and x)
    ds = slow.apply(service.distribute("parallel_epochs", target)).prefetch(1)
    it = iter(ds)
    start = time.monotonic()
    it.close()
    assert time.monotonic() - start < FAST_S
    assert list(it) == []
