"""A trainer for the multi-host tests, run in its own namespace.

``python -m tests.hosts.trainer SPEC`` reads ``Dataset.range(n)`` from the
service as SPEC (JSON) says and writes ``result: {...}`` on stderr: the
elements read and the workers the dispatcher lists. SPEC keys: ``dispatcher``
(host:port), ``mode``, ``n``, optional ``job_name`` and ``pause_after`` with
``resume_file``: after that many elements print ``paused`` and wait (at most
30 s) for the file to exist, so a test can act mid-read; optional
``workers_left``: report the listed workers once there are that many. CURVE keys come from
the ``ZMQDATA_CURVE_*`` variables, as for any trainer.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import zmqdata as zd
from zmqdata import service


def _wait_for(path: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear in {timeout} s")
        threading.Event().wait(0.01)


def _listed_workers(dispatcher: str, expected: int | None) -> list[Any]:
    """The workers the dispatcher lists; with ``expected``, once it lists that
    many (a dead worker is dropped at its timeout, which may come after the
    read ended), or after 30 s."""
    deadline = time.monotonic() + 30.0
    while True:
        workers: list[Any] = service.get_status(dispatcher)["workers"]
        if expected is None or len(workers) == expected:
            return workers
        if time.monotonic() > deadline:
            return workers
        threading.Event().wait(0.05)


def read(spec: dict[str, Any]) -> dict[str, Any]:
    """Reads as ``spec`` says; returns the elements and the listed workers."""
    distribute = service.distribute(
        spec["mode"], spec["dispatcher"], job_name=spec.get("job_name")
    )
    got: list[int] = []
    with iter(zd.Dataset.range(spec["n"]).apply(distribute)) as elements:
        for element in elements:
            got.append(int(element))
            if len(got) == spec.get("pause_after"):
                print("paused", file=sys.stderr, flush=True)
                _wait_for(spec["resume_file"])
    workers = _listed_workers(spec["dispatcher"], spec.get("workers_left"))
    return {
        "elements": got,
        "workers": [[w["address"], w["data_address"]] for w in workers],
    }


if __name__ == "__main__":
    result = read(json.loads(sys.argv[1]))
    print(f"result: {json.dumps(result)}", file=sys.stderr, flush=True)
