"""The trainer side of tests/hosts/test_link_compression.py (a child process).

Run in the receiving namespace: ``python -m tests.hosts.link_driver ADDRESS
FLAG COUNT``. Starts a dispatcher on ADDRESS, reads one distributed epoch of
COUNT compressible elements with compression AUTO from the worker that
registers, and reports on stderr: ``target T`` once it listens, ``compressing
at N`` when the worker's task starts compressing, ``raw at N`` when it stops
after FLAG (a file) appears, then ``done {json}`` with what was read.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

import zmqdata as zd
from tests.helpers import poll_for
from zmqdata import service

SIZE = 256 * 1024
POLL_S = 0.02
WAIT_S = 30.0


def element(i: Any) -> np.ndarray[Any, Any]:
    """Half noise, half zeros (zstd: about 0.5); ``[0]`` is the index."""
    out = np.zeros(SIZE // 4, np.float32)
    out[: SIZE // 8] = np.random.default_rng(int(i)).standard_normal(SIZE // 8)
    out[0] = i
    return out


def log(*words: object) -> None:
    print(*words, file=sys.stderr, flush=True)


def task_stats(target: str) -> dict[str, Any] | None:
    workers = service.get_status(target)["workers"]
    tasks = workers[0]["stats"].get("tasks", []) if workers else []
    return tasks[0] if tasks else None


def watch(target: str, flag: Path, seen: list[int], phases: dict[str, Any]) -> None:
    """Logs the switch to zstd, waits for ``flag``, logs the switch back."""
    for phase, wanted in (("compressing", True), ("raw", False)):

        def switched(wanted: bool = wanted) -> dict[str, Any] | bool | None:
            stats = task_stats(target)
            if stats is not None and stats["compressing"] == wanted:
                return stats
            return bool(phases.get("finished"))

        stats = poll_for(switched, timeout=WAIT_S, interval=POLL_S)
        if stats is True:  # the epoch ended first
            return
        phases[phase] = len(seen)
        phases[f"{phase}_stats"] = stats
        log(phase, "at", len(seen))
        if phase == "compressing":
            poll_for(flag.exists, timeout=WAIT_S, interval=POLL_S)


def main(address: str, flag: Path, count: int) -> None:
    dispatcher = service.DispatchServer(service.DispatcherConfig(host=address))
    try:
        log("target", dispatcher.target)
        poll_for(lambda: service.get_status(dispatcher.target)["workers"], WAIT_S)
        ds = zd.Dataset.range(count).map(element)
        ds = ds.apply(service.distribute("distributed_epoch", dispatcher.target))
        seen: list[int] = []
        phases: dict[str, Any] = {}
        watcher = threading.Thread(
            target=watch, args=(dispatcher.target, flag, seen, phases)
        )
        watcher.start()
        intact = True
        try:
            for x in ds:
                seen.append(int(x[0]))
                intact = intact and not x[SIZE // 8 :].any()
        finally:
            phases["finished"] = True
            watcher.join()
        phases.pop("finished")
        log("done", json.dumps({"seen": seen, "intact": intact, **phases}))
    finally:
        dispatcher.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]))
