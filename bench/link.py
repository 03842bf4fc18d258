"""Compression AUTO against ``compression=None`` on loopback and on a slow link.

    python bench/link.py                       # both links, 3 repeats
    python bench/link.py --rate 200mbit --repeats 5 --out link.json
    python bench/link.py --only loopback

The pipeline makes normalized image batches (float32, 16 x 112 x 112 x 3, 2.4
MB; images of random size letterboxed onto a zero canvas, which zstd shrinks
to about half) on one worker process; a trainer process reads them with
``parallel_epochs``. Each pass is a fresh job, read for ``--warmup`` seconds,
then counted for ``--seconds``: elements/s in steady state (the warm-up covers
the task's first measurements and the buffer of elements it encoded before
deciding; loopback warms up for 1 s, as nothing there waits on a decision). Passes alternate between None and AUTO; figures are medians.

Links: ``loopback`` (worker and trainer on 127.0.0.1, over tcp: same-host
shared memory, which never compresses, is turned off), and ``slow``: the
worker in one network namespace sending to the trainer in another over a veth
pair that ``tc`` (tbf) limits to ``--rate`` (needs root, ``ip`` and ``tc``;
the namespaces are removed afterwards, also on failure).

``link(bench)`` is the same as a bench/run.py section. Run it under the
shared lock: ``flock /tmp/zmqdata-bench.lock python bench/link.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.common import ROOT, Bench, Stat, stop_processes, subprocess_env, times

BATCH, SIDE, BANK = 16, 112, 64
_MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
_STD = np.array([0.229, 0.224, 0.225], np.float32) * 255
COMPRESSIONS: tuple[str | None, ...] = (None, "AUTO")


# ------------------------------------------------------------------ the pipeline


@functools.cache
def _images() -> np.ndarray[Any, Any]:
    """``BANK`` smooth, noisy uint8 images of 128 x 128 (made once per process)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:128, 0:128]
    bank = np.empty((BANK, 128, 128, 3), np.uint8)
    for i in range(BANK):
        f, p = rng.uniform(0.02, 0.2, 3), rng.uniform(0, 6, 3)
        waves = [
            100 * np.sin(f[c] * x + p[c]) * np.cos(0.7 * f[c] * y) for c in range(3)
        ]
        noisy = 127 + np.stack(waves, -1) + rng.normal(0, 8, (128, 128, 3))
        bank[i] = np.clip(noisy, 0, 255)
    return bank


def image_batch(index: Any) -> np.ndarray[Any, Any]:
    """A batch of normalized images, each cropped to a random size and letterboxed."""
    rng = np.random.default_rng(int(index))
    bank = _images()
    out = np.zeros((BATCH, SIDE, SIDE, 3), np.float32)
    for k in range(BATCH):
        h, w = rng.integers(56, SIDE + 1, 2)
        oy, ox = rng.integers(0, 128 - h + 1), rng.integers(0, 128 - w + 1)
        image = bank[rng.integers(BANK), oy : oy + h, ox : ox + w]
        if rng.random() < 0.5:
            image = image[:, ::-1]
        out[k, :h, :w] = (image - _MEAN) / _STD
    return out


# ------------------------------------------------------------------ the trainer


def drive(
    address: str, repeats: int, warmup_s: float, seconds: float
) -> dict[str, Any]:
    """In the trainer process: a dispatcher, then alternating passes; the figures."""
    import zmqdata as zd
    from bench.link import image_batch as by_reference  # not __main__'s: by value
    from zmqdata import service

    dispatcher = service.DispatchServer(service.DispatcherConfig(host=address))
    print(dispatcher.target, flush=True)  # the worker needs it
    try:
        deadline = time.monotonic() + 60
        while not service.get_status(dispatcher.target)["workers"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the worker did not register within 60 s")
            time.sleep(0.05)
        rates: dict[str, list[float]] = {str(c): [] for c in COMPRESSIONS}
        tasks: dict[str, list[dict[str, Any]]] = {str(c): [] for c in COMPRESSIONS}
        for _ in range(repeats):
            for compression in COMPRESSIONS:
                ds = zd.Dataset.range(2**62).map(by_reference)
                ds = ds.apply(
                    service.distribute(
                        "parallel_epochs", dispatcher.target, compression=compression
                    )
                )
                rate, stats = _pass(ds, dispatcher.target, warmup_s, seconds)
                rates[str(compression)].append(rate)
                tasks[str(compression)].append(stats)
        return {"el_s": rates, "tasks": tasks}
    finally:
        dispatcher.stop()


def _pass(
    ds: Any, target: str, warmup_s: float, seconds: float
) -> tuple[float, dict[str, Any]]:
    """Elements/s over ``seconds`` after ``warmup_s``; the task's stats at the end."""
    from zmqdata import service

    iterator = iter(ds)
    try:
        end_warmup = time.perf_counter() + warmup_s
        while time.perf_counter() < end_warmup:
            next(iterator)
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds:
            next(iterator)
            count += 1
        [worker] = service.get_status(target)["workers"]
        tasks = worker["stats"].get("tasks", [])  # this pass's is the newest
        return count / elapsed, max(tasks, key=lambda t: t["task_id"], default={})
    finally:
        iterator.close()


# ------------------------------------------------------------------ the links


@contextmanager
def _loopback() -> Iterator[tuple[list[str], list[str], str, str]]:
    yield [], [], "127.0.0.1", "127.0.0.1"


@contextmanager
def _slow(rate: str) -> Iterator[tuple[list[str], list[str], str, str]]:
    from tests.hosts import netns, veth

    reason = netns.unavailable_reason() or veth.tc_missing()
    if reason is not None:
        raise RuntimeError(f"the slow link needs namespaces and tc: {reason}")
    pair = veth.VethPair()
    try:
        pair.limit(rate)
        yield (
            pair.sender.prefix(),
            pair.receiver.prefix(),
            pair.sender.address,
            pair.receiver.address,
        )
    finally:
        pair.close()


def run_link(
    name: str, rate: str, repeats: int, warmup_s: float, seconds: float
) -> dict[str, Any]:
    """One link's figures: a trainer process and a worker process on it."""
    link = _loopback() if name == "loopback" else _slow(rate)
    if name == "loopback":
        warmup_s = min(warmup_s, 1.0)
    env = {**subprocess_env(), "ZMQDATA_SHARED_MEMORY": "0"}  # the tcp path
    with link as (worker_prefix, trainer_prefix, worker_host, trainer_host):
        trainer = subprocess.Popen(
            [*trainer_prefix, sys.executable, "-m", "bench.link", "--drive", trainer_host,
             "--repeats", str(repeats), "--warmup", str(warmup_s),
             "--seconds", str(seconds)],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        procs: list[subprocess.Popen[Any]] = [trainer]
        try:
            assert trainer.stdout is not None
            target = trainer.stdout.readline().strip()
            worker = [
                *worker_prefix, sys.executable, "-m", "zmqdata", "worker",
                "--dispatcher", target, "--host", worker_host, "--insecure",
                "--heartbeat-interval-ms", "200",
            ]  # fmt: skip
            procs.append(subprocess.Popen(worker, stderr=subprocess.DEVNULL, env=env))
            result: dict[str, Any] = json.loads(trainer.stdout.read())
        finally:
            stop_processes(reversed(procs))
            if trainer.stdout is not None:
                trainer.stdout.close()
    el_s = {key: Stat(values) for key, values in result["el_s"].items()}
    auto = result["tasks"]["AUTO"]
    return {
        "none_el_s": el_s["None"],
        "auto_el_s": el_s["AUTO"],
        "auto_over_none": float(el_s["AUTO"]) / float(el_s["None"]),
        "auto_compressing": [task.get("compressing") for task in auto],
        "auto_tasks": auto,
        "link_mb_s": _median(auto, "link_bytes_per_s", 1e-6),
        "zstd_ratio": _median(auto, "compression_ratio", 1.0),
        "produce_mb_s": _median(auto, "produce_bytes_per_s", 1e-6),
    }


def _median(tasks: list[dict[str, Any]], key: str, scale: float) -> float | None:
    values = [task[key] * scale for task in tasks if task.get(key) is not None]
    return statistics.median(values) if values else None


def link(
    bench: Bench,
    links: Sequence[str] = ("loopback", "slow"),
    rate: str = "200mbit",
    warmup_s: float = 4.0,
    seconds: float = 5.0,
) -> dict[str, Any]:
    """The bench/run.py section: AUTO vs None on each link, medians."""
    return {
        name: run_link(name, rate, bench.repeats, warmup_s, seconds) for name in links
    }


def print_table(results: dict[str, Any], rate: str) -> None:
    print("| link | None el/s | AUTO el/s | AUTO/None | AUTO compressing | link MB/s |")
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        label = "loopback" if name == "loopback" else f"veth, tc tbf {rate}"
        link_mb_s = "-" if r["link_mb_s"] is None else f"{r['link_mb_s']:,.0f}"
        print(
            f"| {label} | {float(r['none_el_s']):.1f} | {float(r['auto_el_s']):.1f} "
            f"| {times(r['auto_over_none'])} | {r['auto_compressing']} | {link_mb_s} |"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["loopback", "slow"], default=None)
    parser.add_argument("--rate", default="200mbit", help="tc rate of the slow link")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds per pass")
    parser.add_argument("--seconds", type=float, default=5.0, help="counted per pass")
    parser.add_argument("--out", type=Path, default=None, help="results JSON")
    parser.add_argument("--drive", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.drive:
        result = drive(args.drive, args.repeats, args.warmup, args.seconds)
        print(json.dumps(result), flush=True)
        return
    links = [args.only] if args.only else ["loopback", "slow"]
    bench = Bench(sizes=None, repeats=args.repeats)  # type: ignore[arg-type]
    results = link(bench, links, args.rate, args.warmup, args.seconds)
    print_table(results, args.rate)
    if args.out is not None:
        from bench.run import jsonable

        args.out.write_text(json.dumps(jsonable(results), indent=2))
    print(f"(medians of {args.repeats} passes; ROOT={ROOT})", file=sys.stderr)


if __name__ == "__main__":
    main()
