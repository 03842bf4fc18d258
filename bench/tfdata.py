"""tf.data service on the anchor workloads W1-W6, for ``make bench-compare``.

Not a script; bench/compare.py runs it where tensorflow imports
(``pip install tensorflow-cpu``). Like the zmqdata side: the dispatcher
(``tf.data.experimental.service.DispatchServer``) in this process, each
``WorkerServer`` a separate process, consumers here; the same sizes
(bench/common.py ``Sizes``), repetitions and medians. ``run`` returns figures
keyed as ``report.headlines`` keys zmqdata's.
"""

from __future__ import annotations

import functools
import math
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from bench.common import (
    Bench,
    coordinated_rate,
    drain,
    format_bytes,
    latency_passes,
    per_second,
    stop_processes,
    subprocess_env,
)
from bench.workloads import noise

_WORKER = """
import sys
import tensorflow as tf
service = tf.data.experimental.service
worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=sys.argv[1]))
print("ready", flush=True)
worker.join()
"""


def _service() -> Any:
    import tensorflow as tf

    return tf.data.experimental.service


def _tf() -> Any:
    import tensorflow as tf

    return tf


@contextmanager
def tf_cluster(num_workers: int) -> Iterator[str]:
    """A tf.data dispatcher here and ``num_workers`` worker processes; its target.

    ``WorkerServer`` registers with the dispatcher before it returns, so a
    worker that printed "ready" is known to the dispatcher.
    """
    dispatcher = _service().DispatchServer()
    address = dispatcher.target.split("://")[-1]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WORKER, address],
            stdout=subprocess.PIPE,
            text=True,
            env=subprocess_env(),
        )
        for _ in range(num_workers)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a tf.data worker failed to start")
        yield dispatcher.target
    finally:
        stop_processes(procs)
        dispatcher._stop()  # no public stop in TF 2.21


def distributed(dataset: Any, target: str, **kwargs: Any) -> Any:
    mode = kwargs.pop("processing_mode", "parallel_epochs")
    return dataset.apply(_service().distribute(mode, target, **kwargs))


def single_threaded(dataset: Any) -> Any:
    """Map functions on one core, as a zmqdata worker runs them."""
    options = _tf().data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    return dataset.with_options(options)


# ------------------------------------------------------------------ workloads


def w1(bench: Bench, target: str) -> dict[str, float]:
    n = bench.sizes.w1_elements
    remote = distributed(_tf().data.Dataset.range(n), target)
    return {"W1 el/s": bench.measure(per_second(n, lambda: drain(remote, n)))}


def w2(bench: Bench, target: str) -> dict[str, float]:
    n, size = bench.sizes.w2_elements, bench.sizes.w2_batch
    batches = math.ceil(n / size)
    remote = distributed(_tf().data.Dataset.range(n).batch(size), target)
    rate = bench.measure(
        per_second(batches, lambda: drain(remote, batches)),
        warmup=lambda: drain(remote.take(20)),
        repeats=min(bench.repeats, 3),
    )
    return {"W2 batches/s": rate}


def w3(bench: Bench, target: str) -> dict[str, float]:
    out = {}
    for size in bench.sizes.w3_sizes:
        count = bench.sizes.count_for(size)
        ds = _tf().data.Dataset.from_tensors(noise(size)).repeat(count)
        for compression in (None, "AUTO"):
            remote = distributed(ds, target, compression=compression)
            rate = bench.measure(
                per_second(count * size / 1e6, functools.partial(drain, remote, count))
            )
            out[f"W3 {format_bytes(size)} {compression} MB/s"] = rate
    return out


def _burn(rounds: int) -> Callable[[Any], Any]:
    """A map function of ``rounds`` sines over 16k floats (TF ops: tf.data
    service cannot run Python functions)."""
    tf = _tf()

    def burn(x: Any) -> Any:
        v = tf.fill([16_384], tf.cast(x, tf.float32))
        _, v = tf.while_loop(
            lambda i, _: i < rounds,
            lambda i, v: (i + 1, tf.math.sin(v)),
            (tf.constant(0), v),
        )
        return x + tf.cast(tf.reduce_sum(v) * 0, tf.int64)

    return burn


def _cpu_dataset(bench: Bench) -> Any:
    """range(N).map(~``w4_cpu_ms`` of CPU), calibrated here on one core."""
    tf, probe, elements = _tf(), 100, 20
    local = single_threaded(tf.data.Dataset.range(elements).map(_burn(probe)))
    drain(local)
    start = time.process_time()
    drain(local)
    per_element_s = (time.process_time() - start) / elements
    rounds = max(1, round(probe * bench.sizes.w4_cpu_ms / 1000 / per_element_s))
    ds = tf.data.Dataset.range(bench.sizes.w4_elements).map(_burn(rounds))
    return single_threaded(ds)


def w4(bench: Bench) -> dict[str, float]:
    ds, n = _cpu_dataset(bench), bench.sizes.w4_elements
    out = {}
    for workers in (1, 2):
        with tf_cluster(workers) as target:
            remote = distributed(ds, target, processing_mode="distributed_epoch")
            rate = bench.measure(per_second(n, functools.partial(drain, remote, n)))
            out[f"W4 {workers} worker(s) el/s"] = rate
    out["W4 speedup"] = out["W4 2 worker(s) el/s"] / out["W4 1 worker(s) el/s"]
    return out


def w5(bench: Bench, target: str) -> dict[str, float]:
    ds = distributed(_tf().data.Dataset.range(10), target)
    first, end = latency_passes(ds, bench.repeats * 4, 9)
    return {"W5 first ms": first, "W5 end ms": end}


def w6(bench: Bench, target: str) -> dict[str, float]:
    consumers, rounds = 2, bench.sizes.w6_rounds

    def make(index: int, name: str) -> Any:
        return distributed(
            _tf().data.Dataset.range(1 << 62).repeat(),
            target,
            job_name=name,
            consumer_index=index,
            num_consumers=consumers,
        )

    once = coordinated_rate(make, consumers, rounds)
    return {"W6 el/s": bench.measure(once)}


ONE_WORKER: dict[str, Callable[[Bench, str], dict[str, float]]] = {
    "W1": w1,
    "W2": w2,
    "W3": w3,
    "W5": w5,
    "W6": w6,
}


def run(bench: Bench, names: Sequence[str]) -> dict[str, float]:
    """tf.data service figures of the named workloads (W1-W6)."""
    out: dict[str, float] = {}
    with tf_cluster(1) as target:
        for name, workload in ONE_WORKER.items():
            if name in names:
                print(f"tf.data {name} ...", file=sys.stderr, flush=True)
                out.update(workload(bench, target))
    if "W4" in names:
        print("tf.data W4 ...", file=sys.stderr, flush=True)
        out.update(w4(bench))
    return out
