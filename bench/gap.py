"""Where the image pipeline's time goes on 2 `zmqdata up` workers, against local processes.

    python bench/gap.py                  # 2,048 images, 7 rounds
    python bench/gap.py --count 512 --rounds 2

bench/peers.py's image pipeline, interleaved rounds (the order reversed every
other round), each: one epoch in this process (``local``), the same split in
half over two forked processes at once (``local x2``: the machine's own
two-process ceiling), and 2 epochs from a ``zmqdata up`` deployment of 2
workers (defaults, ``distributed_epoch``). For zmqdata, CPU seconds per 1,000
images of the trainer (this process), of the ``zmqdata up`` process (the
dispatcher) and of the workers (``/proc``), and, from one more job of the
pipeline repeated 8 times, the dispatcher's per-op statistics of the job (the
producers' phases: ops, encode, splits, blocked, other). Prints medians with
min-max, and the core-seconds per 1,000 images split into: the pipeline's own
work (one local process's CPU), what running it in two processes at once adds
(``local x2``'s CPU), the workers' CPU beyond that, the trainer, the dispatcher,
and the rest (cores idle, or busy outside these processes).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import peers, pipelines
from bench.common import distributed
from zmqdata import service

TICK = os.sysconf("SC_CLK_TCK")
REPEATED = 8
"""Repetitions of the pipeline in the job whose per-op statistics are read."""


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as file:
        text = file.read()
    return text[text.rindex(")") + 2 :].split()


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(_stat(int(entry))[1]) == pid:
                    found.append(int(entry))
            except (OSError, IndexError):
                pass
    return found


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (every thread, ended ones too)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / TICK


def half(paths: list[str]) -> float:
    """The local pipeline over ``paths`` (in a pool process); its CPU seconds."""
    start = time.process_time()
    for _ in pipelines.stack_batches(
        map(pipelines.image_element, paths), pipelines.IMAGE_BATCH
    ):
        pass
    return time.process_time() - start


def zmqdata_epoch(read: peers.Reader, procs: list[int]) -> dict[str, float]:
    """One epoch; images/s and CPU s per 1,000 images of each process."""
    before = [cpu_s(pid) for pid in procs]
    count, wall, trainer = peers.epoch(read)
    after = [cpu_s(pid) for pid in procs]
    spent = [(b - a) * 1000 / count for a, b in zip(before, after, strict=True)]
    return {
        "el_s": count / wall,
        "trainer": trainer * 1000 / count,
        "dispatcher": spent[0],
        "workers": sum(spent[1:]),
    }


def phases(target: str, pipeline: peers.Pipeline, count: int) -> dict[str, Any]:
    """The per-op statistics of one job of the pipeline repeated (read near its end)."""
    job = distributed(
        pipeline.dataset().repeat(REPEATED),
        target,
        processing_mode="distributed_epoch",
    )
    status = None
    seen = 0
    for batch in job:
        seen += len(batch)
        if status is None and seen >= REPEATED * count - 2 * pipelines.IMAGE_BATCH:
            status = service.get_status(target)
    jobs = (status or {}).get("jobs", [])
    if not jobs:
        return {}
    return {
        "phases": jobs[0].get("phases", {}),
        "ops": {op["op"]: op["share"] for op in jobs[0].get("ops", [])},
    }


def measure(count: int, rounds: int) -> dict[str, Any]:
    pipeline = peers.image_pipeline(count)
    halves = [pipeline.paths[: count // 2], pipeline.paths[count // 2 :]]
    samples: dict[str, list[dict[str, float]]] = {
        "local": [],
        "local x2": [],
        "zmqdata": [],
    }
    load = os.getloadavg()[0]
    with (
        multiprocessing.get_context("fork").Pool(2) as pool,
        peers.zmqdata_up(peers.WORKERS) as target,
    ):
        (up,) = [p for p in children(os.getpid()) if "zmqdata up" in _cmdline(p)]
        procs = [up, *children(up)]
        remote = distributed(
            pipeline.dataset(), target, processing_mode="distributed_epoch"
        )
        pool.map(half, halves, chunksize=1)
        peers.epoch(lambda: remote)  # warm-ups
        peers.epoch(pipeline.local)
        order = list(samples)
        for index in range(rounds):
            for name in order if index % 2 == 0 else order[::-1]:
                if name == "local":
                    n, wall, cpu = peers.epoch(pipeline.local)
                    samples[name].append({"el_s": n / wall, "cpu": cpu * 1000 / n})
                elif name == "local x2":
                    start = time.perf_counter()
                    spent = pool.map(half, halves, chunksize=1)
                    wall = time.perf_counter() - start
                    samples[name].append(
                        {"el_s": count / wall, "cpu": sum(spent) * 1000 / count}
                    )
                else:
                    samples[name] += [
                        zmqdata_epoch(lambda: remote, procs) for _ in range(2)
                    ]
        job = phases(target, pipeline, count)
    return {"load": load, "samples": samples, "job": job}


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read().replace(b"\0", b" ").decode(errors="replace")


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def _spread(rows: list[dict[str, float]], key: str, digits: int = 0) -> str:
    values = [row[key] for row in rows]
    return (
        f"{statistics.median(values):,.{digits}f}"
        f" ({min(values):,.{digits}f}-{max(values):,.{digits}f})"
    )


def report(result: dict[str, Any]) -> str:
    samples = result["samples"]
    local, two, ours = samples["local"], samples["local x2"], samples["zmqdata"]
    limit = 2 * _median(local, "el_s")
    lines = [
        f"load average at the start: {result['load']:.2f}",
        (
            f"local:    {_spread(local, 'el_s')} images/s,"
            f" CPU {_spread(local, 'cpu', 3)} s per 1,000"
        ),
        (
            f"local x2: {_spread(two, 'el_s')} images/s"
            f" ({_median(two, 'el_s') / limit:.0%} of 2x local),"
            f" CPU {_spread(two, 'cpu', 3)} s per 1,000"
        ),
        (
            f"zmqdata:  {_spread(ours, 'el_s')} images/s"
            f" ({_median(ours, 'el_s') / limit:.0%} of 2x local)"
        ),
        "",
        "core-seconds per 1,000 images on 2 cores, zmqdata (medians):",
    ]
    total = 2 * 1000 / _median(ours, "el_s")
    work = _median(local, "cpu")
    pair = _median(two, "cpu")
    parts = {
        "the pipeline's work (one local process's CPU)": work,
        "the same, two processes at once (local x2's CPU beyond it)": pair - work,
        "workers' CPU beyond local x2's": _median(ours, "workers") - pair,
        "trainer": _median(ours, "trainer"),
        "dispatcher (`zmqdata up` process)": _median(ours, "dispatcher"),
    }
    parts["the rest: cores idle, or busy elsewhere"] = total - sum(parts.values())
    for label, seconds in parts.items():
        lines.append(f"  {seconds:6.3f} s  {seconds / total:5.1%}  {label}")
    lines.append(f"  {total:6.3f} s  100.0%  in all")
    job = result["job"]
    if job:
        shares = ", ".join(f"{k} {v:.1%}" for k, v in job["phases"].items())
        ops = ", ".join(f"{k} {v:.1%}" for k, v in job["ops"].items())
        lines += ["", f"producer phases: {shares}", f"ops: {ops}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2048, help="images per epoch")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()
    print(report(measure(args.count, args.rounds)))


if __name__ == "__main__":
    main()
