"""Read throughput of a save's chunks (``read_chunk``), hot page cache, A/B.

Run ``python bench/chunk_reads.py [--baseline OLD.py]``; it prints one table. A
chunk of ``--batches`` float32 batches of 64x3x112x112 (9.6 MB each, the shape of
bench/snapshots.py's images; seeded random pixels / 255) and one of 100,000
small elements (a dict of a 4-int64 array and a str) are written raw and zstd,
then each is read ``--repeats`` times after one warm-up read, every element
taken. Figures are MB/s of elements decoded (the chunk's raw msgpack bytes), the
best of the repeats (the one least disturbed by other load). ``--baseline``: a
``snapshot_chunks.py`` of another version (``git show
REV:zmqdata/_dataset/snapshot_chunks.py > OLD.py``), read alternately with this
one in the same process, and the ratio of the two. ``crc32`` is
``zlib.crc32`` alone over the mapped file, for scale.
"""

from __future__ import annotations

import argparse
import importlib.util
import mmap
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from zmqdata._dataset import snapshot_chunks


def batches(count: int) -> Iterable[np.ndarray[Any, Any]]:
    """``count`` float32 image batches, 64x3x112x112, of pixels / 255."""
    rng = np.random.default_rng(0)
    for _ in range(count):
        pixels = rng.integers(0, 256, (64, 3, 112, 112), dtype=np.uint8)
        yield pixels.astype(np.float32) / 255


def small(count: int) -> Iterable[dict[str, Any]]:
    """``count`` small elements."""
    for i in range(count):
        yield {"x": np.arange(i, i + 4, dtype=np.int64), "name": f"e{i}"}


def best_s(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Least seconds of each of ``fns`` over ``repeats`` rounds, calls alternated."""
    for fn in fns:  # warm-up
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, spent in zip(fns, times, strict=True):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [min(spent) for spent in times]


def row(
    path: str,
    name: str,
    elements: Iterable[Any],
    compression: str | None,
    versions: list[ModuleType],
    repeats: int,
) -> str:
    """One table row: the chunk written, then read by each of ``versions``."""
    with snapshot_chunks.ChunkWriter(path, name, compression) as writer:
        for element in elements:
            writer.write(element)
    info = writer.info
    with snapshot_chunks.ChunkWriter(path, name + "-raw", None) as raw:
        for element in snapshot_chunks.read_chunk(path, info, compression=compression):
            raw.write(element)
    decoded = raw.info["bytes"] / 1e6

    def reader(version: ModuleType) -> Callable[[], None]:
        def read() -> None:
            for _ in version.read_chunk(path, info, compression=compression):
                pass

        return read

    with open(snapshot_chunks.chunk_path(path, name), "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        fns = [reader(v) for v in versions] + [lambda: zlib.crc32(mapped)]
        *reads, crc = best_s(fns, repeats)
        mapped.close()
    cells = [f"{decoded / s:,.0f}" for s in reads]
    if len(reads) == 2:
        cells.append(f"{reads[1] / reads[0]:.2f}")
    return (
        f"| {name} | {compression or 'raw'} | {info['bytes'] / 1e6:.1f} | "
        + " | ".join(cells)
        + f" | {info['bytes'] / 1e6 / crc:,.0f} |"
    )


def load(path: str) -> ModuleType:
    """The module in file ``path`` (another version of ``snapshot_chunks``)."""
    spec = importlib.util.spec_from_file_location("baseline_snapshot_chunks", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline", help="a snapshot_chunks.py to compare with")
    args = parser.parse_args()
    versions = [snapshot_chunks] + ([load(args.baseline)] if args.baseline else [])
    heads = ["read MB/s"] + (
        ["baseline MB/s", "this / baseline"] if args.baseline else []
    )
    print(f"| chunk | compression | MB on disk | {' | '.join(heads)} | crc32 MB/s |")
    print("|---" * (len(heads) + 4) + "|")
    with tempfile.TemporaryDirectory() as path:
        for compression in (None, "zstd"):
            for name, elements in (
                ("images", batches(args.batches)),
                ("small", small(100_000)),
            ):
                print(row(path, name, elements, compression, versions, args.repeats))


if __name__ == "__main__":
    main()
