"""One consumer in a fresh process: its CPU time and peak RSS growth while reading.

bench/scaling.py starts it against the run's cluster, so that neither the
dispatcher in the benchmark process nor an earlier run shows in the figures.
It prints one JSON line. By hand, against a running dispatcher::

    python bench/consumer.py 127.0.0.1:5050 --size 4194304 --count 64 \
        --max-outstanding 4 --memory

``--size 8`` reads int64 scalars (``range``), larger sizes float32 tensors
(``from_tensors(...).repeat``), always with ``compression=None``. CPU is
``time.process_time()`` (user + system of every thread of the process: trainer,
fetcher, ZeroMQ I/O) around each read. With ``--memory`` it reads once
and reports the peak of VmRSS above its value before the read: the larger of a
1 ms sampling thread and VmHWM after resetting it (``/proc/self/clear_refs``).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench.common import distributed, drain


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field (VmRSS, VmHWM) in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); whether it could."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True


class RssSampler(threading.Thread):
    def __init__(self, interval_s: float = 0.001) -> None:
        super().__init__(daemon=True)
        self.interval_s, self.peak_kib = interval_s, status_kib("VmRSS")
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval_s):
            self.peak_kib = max(self.peak_kib, status_kib("VmRSS"))


def dataset(target: str, size: int, count: int, outstanding: int | None) -> zd.Dataset:
    if size <= 8:
        ds = zd.Dataset.range(count)
    else:
        ds = zd.Dataset.from_tensors(np.zeros(size // 4, np.float32)).repeat(count)
    return distributed(
        ds, target, compression=None, max_outstanding_requests=outstanding
    )


def cpu_reads(ds: zd.Dataset, count: int, reads: int) -> dict[str, list[float]]:
    cpu, wall = [], []
    for _ in range(reads):
        cpu_start, start = time.process_time(), time.perf_counter()
        drain(ds, count)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return {"cpu_s": cpu, "wall_s": wall}


def memory_read(ds: zd.Dataset, count: int) -> dict[str, float]:
    base = status_kib("VmRSS")
    reset = reset_peak()
    sampler = RssSampler()
    sampler.start()
    drain(ds, count)
    sampler.stopped.set()
    sampler.join()
    peak = max(sampler.peak_kib, status_kib("VmHWM") if reset else 0)
    return {"base_mib": base / 1024, "peak_growth_mib": (peak - base) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target")
    parser.add_argument("--size", type=int, required=True, help="element bytes")
    parser.add_argument("--count", type=int, required=True, help="elements per read")
    parser.add_argument("--max-outstanding", type=int, default=None)
    parser.add_argument("--reads", type=int, default=1, help="reads (CPU mode)")
    parser.add_argument("--memory", action="store_true", help="one read, peak RSS")
    args = parser.parse_args()
    ds = dataset(args.target, args.size, args.count, args.max_outstanding)
    result = (
        memory_read(ds, args.count)
        if args.memory
        else cpu_reads(ds, args.count, args.reads)
    )
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
