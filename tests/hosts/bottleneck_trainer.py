"""The trainer of tests/hosts/test_bottleneck_link.py, run in its own namespace.

``python -m tests.hosts.bottleneck_trainer SPEC`` reads
``Dataset.range(N).map(random_bytes)`` (or ``map(slow_random_bytes)`` with
``slow``) as a ``distributed_epoch`` job named ``job_name``: each element is
``SIZE`` incompressible bytes. ``read_s`` seconds after the first element,
still reading, it takes the dispatcher's status (again every ``RETRY_S``,
reading on, until the worker has reported its ops' ``phases``, for at most
``MAX_WAIT_S`` more) and writes ``result: {...}`` on stderr: the job's entry of ``get_status()["jobs"]``, every worker's task
stats, what it read (elements; seconds and bytes per second since it
started) and how long the status took. SPEC (JSON)
keys: ``dispatcher`` (host:port), ``job_name``, ``slow``, ``read_s``. CURVE
keys come from the ``ZMQDATA_CURVE_*`` variables, as for any trainer.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

SIZE = 256 * 1024
N = 1_000_000  # more than any read takes: the trainer stops after read_s
SLOW_S = 0.05
RETRY_S = 0.5
MAX_WAIT_S = 20.0


def random_bytes(i: Any) -> np.ndarray[Any, Any]:
    """``SIZE`` random bytes: cheap to make, nothing to compress."""
    return np.frombuffer(os.urandom(SIZE), np.uint8)


def slow_random_bytes(i: Any) -> np.ndarray[Any, Any]:
    """``random_bytes`` after ``SLOW_S`` asleep: slower than the link."""
    threading.Event().wait(SLOW_S)
    return random_bytes(i)


def status(dispatcher: str, job_name: str) -> dict[str, Any]:
    """The job's status entry and every worker's task stats."""
    found = service.get_status(dispatcher)
    [job] = [j for j in found["jobs"] if j["job_name"] == job_name]
    tasks = [t for w in found["workers"] for t in w["stats"].get("tasks", [])]
    return {"job": job, "tasks": tasks}


def read(spec: dict[str, Any]) -> dict[str, Any]:
    """Reads for ``read_s`` seconds after the first element; then the status."""
    make = slow_random_bytes if spec["slow"] else random_bytes
    distribute = service.distribute(
        "distributed_epoch", spec["dispatcher"], job_name=spec["job_name"]
    )
    started = time.monotonic()
    times: list[float] = []
    asked = -float("inf")
    with iter(zd.Dataset.range(N).map(make).apply(distribute)) as elements:
        for element in elements:
            assert element.nbytes == SIZE
            times.append(time.monotonic())
            if times[-1] - times[0] < spec["read_s"] or times[-1] - asked < RETRY_S:
                continue
            found = status(spec["dispatcher"], spec["job_name"])
            asked = times[-1]
            if found["job"].get("phases") or asked - times[0] > MAX_WAIT_S:
                break
    reading = times[-1] - started
    return {
        **found,
        "elements": len(times),
        "first_element_s": round(times[0] - started, 3),
        "read_s": round(reading, 3),
        "bytes_per_s": round(len(times) * SIZE / reading),
        "status_s": round(time.monotonic() - times[-1], 3),
    }


if __name__ == "__main__":
    result = read(json.loads(sys.argv[1]))
    print(f"result: {json.dumps(result)}", file=sys.stderr, flush=True)
