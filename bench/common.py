"""Shared by the benchmarks: workload sizes, worker clusters, repetitions, timing.

Not a script; ``python bench/run.py`` uses it (see that module).
"""

from __future__ import annotations

import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Self, TypeVar

import zmqdata as zd
from bench.anchors import MIB
from zmqdata import service

KIB = 2**10
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    """How big every workload is; ``Sizes()`` is the anchor size, ``QUICK`` tiny."""

    w1_elements: int = 200_000
    w2_elements: int = 20_000_000
    w2_batch: int = 1024
    w3_sizes: tuple[int, ...] = (4 * MIB, 64 * MIB)
    w4_elements: int = 400
    w4_cpu_ms: float = 5.0
    w6_rounds: int = 20_000
    scaling_workers: tuple[int, ...] = (1, 2, 4)
    cpu_sizes: tuple[int, ...] = (8, 1 * KIB, 64 * KIB, 1 * MIB, 4 * MIB)
    memory_size: int = 4 * MIB
    memory_count: int = 64
    memory_outstanding: tuple[int, ...] = (1, 4, 16)
    sweep_sizes: tuple[int, ...] = tuple(KIB << (2 * i) for i in range(9))
    transfer_bytes: int = 2 * 2**30
    """Bytes per pass of a throughput measurement, ..."""
    min_count: int = 8
    max_count: int = 200_000
    """... within this many elements (see ``count_for``)."""

    def count_for(self, size: int) -> int:
        """Elements of ``size`` bytes per pass of a throughput measurement."""
        return max(self.min_count, min(self.max_count, self.transfer_bytes // size))


QUICK = Sizes(
    w1_elements=20_000,
    w2_elements=200_000,
    w4_elements=40,
    w6_rounds=2_000,
    cpu_sizes=(8, 64 * KIB, 4 * MIB),
    memory_count=24,
    sweep_sizes=(KIB, 16 * KIB, 256 * KIB, 4 * MIB, 64 * MIB),
    transfer_bytes=64 * MIB,
    min_count=2,
    max_count=20_000,
)


def sizes_for(quick: bool, w2_elements: int | None = None) -> Sizes:
    sizes = QUICK if quick else Sizes()
    return replace(sizes, w2_elements=w2_elements) if w2_elements else sizes


class Stat(float):
    """The median of repeated measurements, remembering the samples."""

    samples: tuple[float, ...]

    def __new__(cls, samples: Iterable[float]) -> Self:
        values = tuple(samples)
        stat = super().__new__(cls, statistics.median(values))
        stat.samples = values
        return stat

    def scaled(self, factor: float) -> Stat:
        return Stat(sample * factor for sample in self.samples)


def per_second(units: float, run: Callable[[], object]) -> Callable[[], float]:
    """A measurement: ``units`` divided by the seconds ``run()`` takes."""

    def once() -> float:
        start = time.perf_counter()
        run()
        return units / (time.perf_counter() - start)

    return once


def drain(iterable: Iterable[Any], expected: int | None = None) -> int:
    """Iterates to the end; the number of elements (which must be ``expected``)."""
    count = 0
    for _ in iterable:
        count += 1
    if expected is not None and count != expected:
        raise RuntimeError(f"read {count} elements, expected {expected}")
    return count


def format_bytes(size: int) -> str:
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def number(value: float) -> str:
    """A figure with as many digits as it needs: 213,278 / 42.5 / 3.41."""
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def times(ratio: float) -> str:
    """A ratio as "1.54x" (two significant digits below 0.1: "0.0049x")."""
    return f"{ratio:.2g}x" if abs(ratio) < 0.1 else f"{ratio:.2f}x"


def busy_cores(seconds: float = 0.5) -> float:
    """Cores' worth of CPU that other processes used over ``seconds`` (/proc/stat)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as stat:
            ticks = [int(tick) for tick in stat.readline().split()[1:]]
        return sum(ticks), ticks[3] + ticks[4]  # total, idle + iowait

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    cores = os.cpu_count() or 1
    return cores * (1 - (idle1 - idle0) / max(1, total1 - total0))


# ------------------------------------------------------------------ clusters

_WORKER = """
import signal, sys
from zmqdata import service
worker = service.WorkerServer(service.WorkerConfig(sys.argv[1], heartbeat_interval_ms=200))
print("ready", flush=True)
signal.signal(signal.SIGTERM, lambda *_: worker.stop())
worker.join()
"""


def subprocess_env(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of helper processes: ``bench`` importable (workers
    unpickle functions defined in bench modules by reference), ``overrides`` set."""
    env = {**os.environ, **(overrides or {})}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


SHARED_MEMORY_ENV = "ZMQDATA_SHARED_MEMORY"


@contextmanager
def transport(path: str) -> Iterator[None]:
    """Reads started in this block take ``path``: ``"shm"`` (the default: same-host
    shared memory) or ``"tcp"`` (``ZMQDATA_SHARED_MEMORY=0``: the socket path a
    remote trainer takes), for this process and the processes it starts."""
    before = os.environ.get(SHARED_MEMORY_ENV)
    os.environ[SHARED_MEMORY_ENV] = "1" if path == "shm" else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SHARED_MEMORY_ENV)
        else:
            os.environ[SHARED_MEMORY_ENV] = before


@contextmanager
def cluster(
    num_workers: int, env: Mapping[str, str] | None = None, apart: bool = False
) -> Iterator[str]:
    """A dispatcher with ``num_workers`` worker processes (``env`` set in
    theirs); its target. The dispatcher runs in this process, or with ``apart``
    in its own (``bench/daemon.py``), so that this process's CPU is the trainer's."""
    # W3 embeds its 64 MiB tensor in the pipeline (a shortcut for a transfer
    # benchmark; real pipelines read files): over the default 64 MiB cap.
    settings: dict[str, Any] = {"max_pipeline_bytes": 256 * 2**20}
    if apart:
        from bench.daemon import dispatcher_process

        with (
            dispatcher_process(**settings) as (target, _),
            registered(target, workers(target, num_workers, env)),
        ):
            yield target
        return
    dispatcher = service.DispatchServer(service.DispatcherConfig(**settings))
    with serving(dispatcher, workers(dispatcher.target, num_workers, env)) as target:
        yield target


def workers(
    target: str, num_workers: int, env: Mapping[str, str] | None = None
) -> list[subprocess.Popen[Any]]:
    """``num_workers`` worker processes of the dispatcher at ``target``."""
    return [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, target],
            stdout=subprocess.DEVNULL,
            env=subprocess_env(env),
        )
        for _ in range(num_workers)
    ]


@contextmanager
def serving(
    dispatcher: service.DispatchServer, procs: list[subprocess.Popen[Any]]
) -> Iterator[str]:
    """``dispatcher``'s target once every worker process in ``procs`` registered
    (60 s at most); stops them all on the way out."""
    try:
        with registered(dispatcher.target, procs):
            yield dispatcher.target
    finally:
        dispatcher.stop()


@contextmanager
def registered(target: str, procs: list[subprocess.Popen[Any]]) -> Iterator[None]:
    """Once every worker process in ``procs`` registered at ``target`` (60 s at
    most); stops them on the way out."""
    try:
        deadline = time.monotonic() + 60
        while len(service.get_status(target)["workers"]) < len(procs):
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register within 60 s")
            time.sleep(0.05)
        yield
    finally:
        stop_processes(procs)


def stop_processes(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """SIGTERM to every process, then waits for each (30 s at most)."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(30)


def coordinated_rate(
    make: Callable[[int, str], Any], consumers: int, rounds: int
) -> Callable[[], float]:
    """A measurement: elements/s of ``consumers`` threads reading ``rounds``
    each from ``make(consumer_index, job_name)`` (a fresh job per call)."""
    jobs = itertools.count()

    def once() -> float:
        name = f"w6-{next(jobs)}"
        datasets = [make(index, name) for index in range(consumers)]
        errors: list[BaseException] = []

        def consume(dataset: Any) -> None:
            try:
                drain(itertools.islice(iter(dataset), rounds), rounds)
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=consume, args=(d,)) for d in datasets]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise errors[0]
        return rounds * consumers / elapsed

    return once


def latency_passes(ds: Any, passes: int, rest: int) -> tuple[Stat, Stat]:
    """Milliseconds from ``iter(ds)`` to the first element and to the end of
    input (``rest`` more elements), medians of ``passes`` after a warm-up."""
    firsts, ends = [], []
    for _ in range(passes + 1):
        start = time.perf_counter()
        iterator = iter(ds)
        next(iterator)
        firsts.append((time.perf_counter() - start) * 1000)
        drain(iterator, rest)
        ends.append((time.perf_counter() - start) * 1000)
    return Stat(firsts[1:]), Stat(ends[1:])  # the first pass warms up


# ------------------------------------------------------------------ one run


@dataclass
class Bench:
    """One run of the suite: sizes, repetitions, the shared one-worker cluster
    (started on first use) and figures that several sections share."""

    sizes: Sizes
    repeats: int
    quick: bool = False
    stack: ExitStack = field(default_factory=ExitStack)
    _target: str | None = None
    _memo: dict[Hashable, Any] = field(default_factory=dict)

    def target(self) -> str:
        """The dispatcher of the shared cluster: one worker process."""
        if self._target is None:
            self._target = self.stack.enter_context(cluster(1))
        return self._target

    def memo(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per run: W1 and W6 share a raw baseline, W3 and
        the size sweep share transfers, W4 and the scaling section clusters."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]  # type: ignore[no-any-return]

    def measure(
        self,
        once: Callable[[], float],
        warmup: Callable[[], object] | None = None,
        repeats: int | None = None,
    ) -> Stat:
        """The median of ``repeats`` calls of ``once`` after one warm-up call
        (``warmup`` if given: a shorter pass for workloads of long passes)."""
        (warmup or once)()
        return Stat(once() for _ in range(repeats or self.repeats))

    def close(self) -> None:
        self.stack.close()


def distributed(dataset: zd.Dataset, target: str, **kwargs: Any) -> zd.Dataset:
    """``dataset`` read from the service, ``parallel_epochs`` unless given."""
    mode = kwargs.pop("processing_mode", "parallel_epochs")
    return dataset.apply(service.distribute(mode, target, **kwargs))


def section_main(
    doc: str,
    measure: Callable[[Bench, list[str]], dict[str, Any]],
    details: Callable[[dict[str, Any]], str],
    workloads: Sequence[str],
    default: Sequence[str] | None = None,
) -> None:
    """The command line of a section module: ``--quick``, ``--repeats``, ``--json``,
    ``--workloads``; runs ``measure`` and prints its ``details``."""
    import argparse
    import json
    import sys

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None, help="samples to a file")
    parser.add_argument(
        "--workloads",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(default or workloads),
        help=f"comma-separated, of {','.join(workloads)}",
    )
    args = parser.parse_args()
    unknown = set(args.workloads) - set(workloads)
    if unknown:
        parser.error(f"unknown workloads {sorted(unknown)}")
    repeats = args.repeats or (2 if args.quick else 5)
    bench = Bench(sizes_for(args.quick), repeats, args.quick)
    start = time.perf_counter()
    try:
        result = measure(bench, args.workloads)
    finally:
        bench.close()
    print(details(result))
    print(f"\n{time.perf_counter() - start:.0f} s", file=sys.stderr)
    if args.json:
        from bench.run import jsonable

        args.json.write_text(json.dumps(jsonable(result), indent=1))
