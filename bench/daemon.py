"""A real dispatcher process for the control-plane benches, pinned to a CPU.

Used by ``bench/control.py`` and ``bench/journal.py``.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import zmqdata as zd
from bench.common import subprocess_env
from zmqdata import service


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def raise_fd_limit() -> int:
    """Raises this process's soft ``ulimit -n`` to the hard one; returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def pinned(command: list[str], cpu: int | None) -> list[str]:
    """``command`` under ``taskset -c cpu`` (as is without ``cpu`` or taskset)."""
    if cpu is None or shutil.which("taskset") is None or not has_cpu(cpu):
        return command
    return ["taskset", "-c", str(cpu), *command]


def has_cpu(cpu: int) -> bool:
    return not hasattr(os, "sched_getaffinity") or cpu in os.sched_getaffinity(0)


def pin(cpu: int) -> None:
    """Pins this process (and the threads it starts) to ``cpu``, if it exists."""
    if hasattr(os, "sched_setaffinity") and has_cpu(cpu):
        os.sched_setaffinity(0, {cpu})


@contextmanager
def dispatcher_process(
    cpu: int | None = None, **settings: Any
) -> Iterator[tuple[str, int]]:
    """``zmqdata dispatcher --config`` in its own process, as users start it.

    ``settings`` are ``DispatcherConfig`` fields; ``cpu``: the one CPU it
    runs on. Yields (target, pid).
    """
    port = free_port()
    config = Path(tempfile.mkdtemp(prefix="zmqdata-bench-")) / "deploy.yaml"
    config.write_text(json.dumps({"dispatcher": {"port": port, **settings}}))
    command = [sys.executable, "-m", "zmqdata", "dispatcher", "--config", str(config)]
    proc = subprocess.Popen(
        pinned(command, cpu),
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    target = f"tcp://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                service.get_status(target)
                break
            except zd.errors.ZmqDataError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the dispatcher did not start") from None
        yield target, proc.pid
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(config.parent, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
