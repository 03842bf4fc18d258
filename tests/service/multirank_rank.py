"""Ranks of a multi-rank read, each its own process (tests/service/test_chaos_multirank.py).

``python -m tests.service.multirank_rank SPECS`` imports zmqdata once and
forks one process per spec of the JSON list SPECS (no thread or socket
exists yet: forking is safe, and saves each rank the import). Rank ``r``
reads ``pipeline(n)`` through ``service.distribute("distributed_epoch",
...)`` as consumer ``consumer_index`` of ``num_consumers``, batched in the
rank, and logs, for the test to check after a ``kill -9``:

* ``out``: one line per step (the batch's elements, space separated), written
  and flushed before anything else happens at that step;
* ``states``: after every ``save_every``-th step, ``it.save()`` in
  ``<states>/<step>.bin`` (written to a temporary file, then renamed: a file
  there is always a whole state).

Spec keys: ``target``, ``job_name``, ``num_consumers``, ``consumer_index``,
``seed``, ``n``, ``batch``, ``out``, ``states``, ``save_every``; optional
``restore`` (a merged state's path: restored before the first element),
``stop_at`` (after that step, say ``stopped at STEP`` and wait to be killed,
at most 120 s) and ``delay`` (seconds to wait per step, so that faults land
mid-read).

On stderr: ``rank R pid PID`` for each rank started, then each rank's lines
prefixed ``rank R: `` (``done STEPS`` when its read ends), and ``rank R
exited CODE`` (or ``killed by signal SIG``). The launcher exits 0 when every
rank did.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import zmqdata as zd
from zmqdata import service

STOPPED_WAIT_S = 120.0


def pipeline(n: int) -> zd.Dataset:
    """What the workers run: a filter, so keys and elements differ."""
    return zd.Dataset.range(n).filter(lambda x: x % 5 != 0)


def dataset(spec: dict[str, Any]) -> zd.Dataset:
    """The rank's read: ``pipeline`` dealt to ranks, batched in the rank."""
    read = service.distribute(
        "distributed_epoch",
        spec["target"],
        job_name=spec["job_name"],
        num_consumers=spec["num_consumers"],
        consumer_index=spec["consumer_index"],
        seed=spec["seed"],
    )
    return pipeline(spec["n"]).apply(read).batch(spec["batch"])


def _save(path: Path, state: bytes) -> None:
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as file:
        file.write(state)
    os.replace(temporary, path)


def run(spec: dict[str, Any]) -> int:
    """Reads as ``spec`` says; returns the number of steps read."""
    states, every = Path(spec["states"]), int(spec["save_every"])
    states.mkdir(parents=True, exist_ok=True)
    stop_at, delay = spec.get("stop_at"), float(spec.get("delay", 0.0))
    pause = threading.Event()
    steps, started = 0, time.monotonic()
    with open(spec["out"], "w") as out, iter(dataset(spec)) as iterator:
        if spec.get("restore"):
            iterator.restore(Path(spec["restore"]).read_bytes())
        for batch in iterator:
            steps += 1
            if steps == 1:
                first = time.monotonic() - started
                _say(f"first step after {first:.2f} s")
            out.write(" ".join(str(int(v)) for v in batch) + "\n")
            out.flush()
            if steps % every == 0:
                _save(states / f"{steps}.bin", iterator.save())
            if steps == stop_at:
                _say(f"stopped at {steps}")
                pause.wait(STOPPED_WAIT_S)
                raise SystemExit(3)  # nobody killed it: the test failed
            if delay:
                pause.wait(delay)
    took = time.monotonic() - started
    _say(f"read {steps} steps in {took:.2f} s")
    return steps


_prefix = ""  # "rank R: " in a rank


def _say(line: str) -> None:
    """One line on stderr in one write: the ranks share the pipe."""
    os.write(sys.stderr.fileno(), f"{_prefix}{line}\n".encode())


def _rank(spec: dict[str, Any]) -> int:
    """Runs in the forked rank process; its exit code."""
    try:
        _say(f"done {run(spec)}")
        return 0
    except SystemExit as stop:
        return int(stop.code or 0)
    except BaseException:
        traceback.print_exc()
        return 1


def main(specs: list[dict[str, Any]]) -> int:
    """Forks a process per spec and waits for them all; 0 if every rank ended well."""
    global _prefix
    ranks: dict[int, int] = {}
    sys.stderr.flush()
    for spec in specs:
        pid = os.fork()
        if pid == 0:
            _prefix = f"rank {spec['consumer_index']}: "
            os._exit(_rank(spec))
        ranks[pid] = spec["consumer_index"]
        _say(f"rank {ranks[pid]} pid {pid}")
    failed = 0
    while ranks:
        pid, status = os.wait()
        index = ranks.pop(pid)
        if os.WIFSIGNALED(status):
            how = f"killed by signal {os.WTERMSIG(status)}"
        else:
            how = f"exited {os.waitstatus_to_exitcode(status)}"
        failed += how != "exited 0"
        _say(f"rank {index} {how}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(json.loads(sys.argv[1])))
