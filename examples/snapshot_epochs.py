"""Preprocess once, inline: snapshot(path) before distribute; epoch 2 reads it.

A dispatcher and two workers in this process (in production: `zmqdata up`, or
daemons on many hosts sharing the snapshot's folder or bucket). The pipeline's
map costs ~5 ms of CPU per element. Epoch 1 streams its elements while the
workers write them under `path/<fingerprint>`; once the snapshot is finished,
epoch 2 (and any later epoch or job of the same pipeline) reads the chunks and
runs none of the ops before `snapshot`.

    python examples/snapshot_epochs.py [--path FOLDER] [--count 256]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

ROUNDS = 300
"""``decode``'s rounds: ~5 ms of CPU per element on a laptop core."""


def decode(index: np.int64) -> dict[str, Any]:
    """Stands for decode + augment: a seeded 96x96 image, ~5 ms of numpy."""
    rng = np.random.default_rng(int(index))
    image = rng.random((96, 96, 3), dtype=np.float32)
    for _ in range(ROUNDS):
        image = np.sqrt(image * image + 0.5) - 0.5
    return {"image": image, "index": np.int64(index)}


def map_ms() -> float:
    """CPU milliseconds of ``decode`` per element, here (a few elements)."""
    start = time.process_time()
    for index in range(8):
        decode(np.int64(index))
    return (time.process_time() - start) * 1000 / 8


def epoch(ds: zd.Dataset, target: str) -> tuple[list[int], float, dict[str, Any]]:
    """One epoch: the elements' indices, its seconds, and its job's snapshot
    status once the first element came."""
    start = time.perf_counter()
    iterator = iter(ds)
    first = next(iterator)
    [job] = service.get_status(target)["jobs"]
    indices = [int(first["index"]), *(int(e["index"]) for e in iterator)]
    return indices, time.perf_counter() - start, job["snapshot"]


def finished_save(target: str, timeout_s: float = 60) -> dict[str, Any]:
    """The snapshot's save once its manifest is written (``"finished"``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        [save] = service.get_status(target)["saves"]
        if save["state"] != "running":
            return dict(save)
        time.sleep(0.02)
    raise TimeoutError(f"the snapshot did not finish within {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=None, help="the snapshots' folder")
    parser.add_argument("--count", type=int, default=256, help="elements")
    args = parser.parse_args()
    path = args.path or tempfile.mkdtemp()
    print(f"the map costs {map_ms():.1f} ms of CPU per element here")
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
    ):
        target = dispatcher.target
        ds = (
            zd.Dataset.range(args.count)
            .map(decode)
            .snapshot(path)
            .apply(service.distribute("distributed_epoch", target))
        )
        first, first_s, writing = epoch(ds, target)
        ended = time.perf_counter()
        save = finished_save(target)
        lag = time.perf_counter() - ended
        print(
            f"epoch 1: {len(first)} elements, {len(first) / first_s:,.0f}/s"
            f" (snapshot {writing['state']})"
        )
        print(
            f"snapshot {save['path']}: {save['state']} {lag:.2f} s after epoch 1,"
            f" {save['elements']} elements in {save['chunks']} chunks"
            f" ({save['bytes'] / 2**20:.1f} MiB)"
        )
        second, second_s, reading = epoch(ds, target)
        print(
            f"epoch 2: {len(second)} elements, {len(second) / second_s:,.0f}/s"
            f" (snapshot {reading['state']}, {reading['written']}/{reading['total']}"
            " chunks written)"
        )
    print(f"epoch 2 / epoch 1: {first_s / second_s:.1f}x")
    everything = list(range(args.count))
    once = sorted(first) == everything and sorted(second) == everything
    print(f"every element once in each epoch: {'OK' if once else 'NO'}")
    read = reading["state"] == "reading" and save["state"] == "finished"
    print(f"epoch 2 read from the snapshot: {'OK' if read else 'NO'}")


if __name__ == "__main__":
    main()
