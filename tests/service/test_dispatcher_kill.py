"""A fault-tolerant dispatcher *process* killed with SIGKILL and restarted."""

from __future__ import annotations

import signal
from collections import Counter
from contextlib import ExitStack

import pytest

import zmqdata as zd
from tests.cli.procs import zmqdata
from tests.dataset.checks import ints
from tests.helpers import poll_for
from tests.service.cluster import free_port
from zmqdata import service

pytestmark = pytest.mark.slow


def start_dispatcher(stack: ExitStack, port: int, work_dir: str, *more: str):
    proc = stack.enter_context(
        zmqdata(
            "dispatcher",
            "--port",
            str(port),
            "--fault-tolerant",
            "--work-dir",
            work_dir,
            *more,
        )
    )
    proc.wait_for_line(r"dispatcher ready: ")
    return proc


def start_worker(stack: ExitStack, target: str):
    args = ("worker", "--dispatcher", target, "--heartbeat-interval-ms", "50")
    worker = stack.enter_context(zmqdata(*args))
    worker.wait_for_line(r"worker ready: ")
    return worker


def num_workers(target: str) -> int:
    return len(service.get_status(target)["workers"])


def test_kill_9_of_the_dispatcher_mid_read_loses_and_repeats_nothing(tmp_path):
    port, work_dir = free_port(), str(tmp_path / "state")
    target = f"tcp://127.0.0.1:{port}"
    with ExitStack() as stack:
        dispatcher = start_dispatcher(stack, port, work_dir)
        for _ in range(2):
            start_worker(stack, target)
        poll_for(lambda: num_workers(target) == 2, timeout=10)
        ds = zd.Dataset.range(3_000).apply(
            service.distribute("distributed_epoch", target, max_outstanding_requests=4)
        )
        with iter(ds) as iterator:
            got = ints(next(iterator) for _ in range(1_000))
            dispatcher.stop(signal.SIGKILL)
            start_dispatcher(stack, port, work_dir)
            got += ints(iterator)
    assert Counter(got) == {i: 1 for i in range(3_000)}


def test_every_process_churns_dynamic_still_reads_each_element_exactly_once(tmp_path):
    """All processes: a worker killed -9, the dispatcher killed -9 and restarted,
    a worker added; DYNAMIC: every element exactly once, and the read ends."""
    n, credit, port = 20_000, 8, free_port()
    target = f"tcp://127.0.0.1:{port}"
    config = tmp_path / "dispatcher.yaml"
    config.write_text("dispatcher:\n  worker_timeout_ms: 500\n")
    work_dir = str(tmp_path / "state")
    with ExitStack() as stack:
        dispatcher = start_dispatcher(stack, port, work_dir, "--config", str(config))
        workers = [start_worker(stack, target) for _ in range(3)]
        poll_for(lambda: num_workers(target) == 3, timeout=10)
        ds = zd.Dataset.range(n).apply(
            service.distribute(
                "distributed_epoch", target, max_outstanding_requests=credit
            )
        )
        with iter(ds) as iterator:
            got = ints(next(iterator) for _ in range(2_000))
            workers[0].stop(signal.SIGKILL)
            got += ints(next(iterator) for _ in range(2_000))
            dispatcher.stop(signal.SIGKILL)
            start_dispatcher(stack, port, work_dir, "--config", str(config))
            got += ints(next(iterator) for _ in range(2_000))
            start_worker(stack, target)
            got += ints(iterator)
    assert Counter(got) == {i: 1 for i in range(n)}
