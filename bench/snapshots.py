"""Preprocess once: ``distributed_save`` and ``Dataset.load`` against recomputing
the pipeline and against ``numpy.load`` of ``.npy`` files.

Issue 27's bench. bench/peers.py's images pipeline (2,048 seeded JPEG files:
decode, random crop, random flip, normalize to float32 CHW, batch 64; quick:
512 files) runs on a ``zmqdata up`` deployment of 2 workers, default settings.
First the pipeline is saved twice from it with ``service.distributed_save(...,
wait=True)``, compression ``"AUTO"`` (the default: raw chunks on a local path) and ``"zstd"`` (what
``"AUTO"`` writes to object stores):
each save's time (from the call until its ``manifest.json`` was written; the
call itself returns up to 0.2 s later, when its poll sees the save finished),
its images/s, and its size on disk against the arrays' raw bytes. The same
batches are written once as ``.npy`` files, one per batch (``numpy.save``),
from one local pass of the pipeline, which is also the reference every system
is checked against. Then every system reads the images, this process (the
trainer) only iterating:

* ``recompute``: the pipeline read from the same 2 workers,
  ``distributed_epoch``, defaults: what a run without a save does;
* ``load``: ``Dataset.load(path)`` of the ``"AUTO"`` save, read through the
  same 2 workers (``distribute("distributed_epoch")``, defaults);
* ``load_zstd``: the same for the ``compression="zstd"`` save;
* ``numpy``: the ``.npy`` files read with ``numpy.load`` in this process, one
  after the other;
* ``load_local``, ``load_local_zstd``: ``Dataset.load(path)`` of each save
  iterated in this process, no service.

Each system's first epoch is checked, not timed: the same number of images as
the reference, and the same images as a multiset (dtype, shape and CRC-32 of
each image); the systems that read a save or the ``.npy`` files must also give
the reference's batches, as a multiset of batches (``recompute``'s batches are
cut where its workers' splits fall, so only its images are compared). Then a
warm-up epoch of each system and ``repeats`` rounds of one epoch of each, the
order reversed every other round (bench/exactly_once.py's ``interleaved``).
Figures per epoch: images/s and the trainer's CPU seconds per 1,000 images
(``getrusage``); medians with the rounds' min-max. Every file read is hot in
the page cache: written in this run, a few hundred MB on a host with GBs free,
and read again every round (the result records the files' size and the
memory available at the start).

Issue 27's targets: ``load`` at least 3x ``recompute`` and at least the
single-process ``numpy`` rate; both ratios are given of the medians and per
round (median, min-max), for ``load_zstd`` too. A section for bench/run.py::

    SECTIONS["snapshots"] = snapshots.snapshots

or on its own: ``python bench/snapshots.py [--quick] [--repeats N]
[--workloads load,numpy]`` (the workloads are the systems).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench import peers
from bench.common import Bench, Stat, distributed, number, section_main, times
from bench.exactly_once import Figures, Pass, interleaved
from bench.formats import round_ratios
from bench.packing import _spread
from zmqdata import service

WORKERS = peers.WORKERS
SAVES = {"AUTO": "AUTO", "zstd": "zstd"}
"""Label -> ``distributed_save``'s ``compression``."""
SYSTEMS = ("recompute", "load", "load_zstd", "numpy", "load_local", "load_local_zstd")
SAVE_OF = {
    "load": "AUTO",
    "load_zstd": "zstd",
    "load_local": "AUTO",
    "load_local_zstd": "zstd",
}
"""The systems that read a save, and which."""
LABELS = {
    "recompute": f"recompute: the pipeline, distributed_epoch, {WORKERS} workers",
    "load": f"Dataset.load (AUTO save), distributed_epoch, {WORKERS} workers",
    "load_zstd": f"Dataset.load (zstd save), distributed_epoch, {WORKERS} workers",
    "numpy": "numpy.load of .npy files, one process",
    "load_local": "Dataset.load (AUTO save), one process, no service",
    "load_local_zstd": "Dataset.load (zstd save), one process, no service",
}
LOADS = ("load", "load_zstd")
"""The systems issue 27's targets apply to (``load``: the defaults)."""
TARGET_VS_RECOMPUTE = 3.0
TARGET_VS_NUMPY = 1.0
Reader = peers.Reader
Key = tuple[str, tuple[int, ...], int]
"""An image: dtype, shape, CRC-32 of its bytes."""


# ------------------------------------------------------------------ checking


def image_keys(batch: Any) -> tuple[Key, ...]:
    """A batch's images, each as its dtype, shape and CRC-32.

    >>> image_keys(np.zeros((2, 3), np.float32))
    (('<f4', (3,), 2077607535), ('<f4', (3,), 2077607535))
    """
    array = np.ascontiguousarray(batch)
    return tuple((array.dtype.str, array.shape[1:], zlib.crc32(row)) for row in array)


class Reference:
    """The batches a save should hold: their images and batches as multisets."""

    def __init__(self) -> None:
        self.images: Counter[Key] = Counter()
        self.batches: Counter[tuple[Key, ...]] = Counter()
        self.raw_bytes = 0

    def add(self, batch: np.ndarray[Any, Any]) -> None:
        keys = image_keys(batch)
        self.images.update(keys)
        self.batches[keys] += 1
        self.raw_bytes += batch.nbytes

    @property
    def count(self) -> int:
        return self.images.total()


def check_epoch(
    name: str, read: Reader, reference: Reference, whole_batches: bool
) -> dict[str, int]:
    """One epoch of ``read``: the reference's images (and, if ``whole_batches``,
    its batches), each as often; RuntimeError naming ``name`` otherwise."""
    images: Counter[Key] = Counter()
    batches: Counter[tuple[Key, ...]] = Counter()
    for batch in read():
        keys = image_keys(batch)
        images.update(keys)
        batches[keys] += 1
    if images != reference.images:
        missing, extra = reference.images - images, images - reference.images
        raise RuntimeError(
            f"{name}: {images.total()} images, not the reference's"
            f" {reference.count}: {missing.total()} missing, {extra.total()} not"
            " the reference's"
        )
    if whole_batches and batches != reference.batches:
        raise RuntimeError(
            f"{name}: {batches.total()} batches, not the reference's"
            f" {reference.batches.total()} as a multiset"
        )
    return {"images": images.total(), "batches": batches.total()}


# ------------------------------------------------------------------ the files


def folder_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of every file under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def write_npy(batches: Iterable[np.ndarray[Any, Any]], folder: Path) -> Reference:
    """``batches`` as ``.npy`` files in ``folder``, one a batch; the reference.

    >>> with tempfile.TemporaryDirectory() as folder:
    ...     reference = write_npy([np.ones((2, 3)), np.zeros((1, 3))], Path(folder))
    ...     names = sorted(os.listdir(folder))
    >>> names, reference.count, reference.batches.total(), reference.raw_bytes
    (['batch_00000.npy', 'batch_00001.npy'], 3, 2, 72)
    """
    folder.mkdir(parents=True, exist_ok=True)
    reference = Reference()
    for index, batch in enumerate(batches):
        np.save(folder / f"batch_{index:05d}.npy", batch)
        reference.add(batch)
    return reference


def npy_batches(paths: Sequence[Path]) -> Iterator[np.ndarray[Any, Any]]:
    """The ``numpy`` system: each file read with ``numpy.load``."""
    for path in paths:
        yield np.load(path)


def save(
    dataset: zd.Dataset, path: str, target: str, compression: str | None
) -> dict[str, Any]:
    """``dataset`` saved under ``path`` by ``target``'s workers; its figures.

    ``seconds``: from the call until ``manifest.json`` was written (its
    modification time); ``call_s``: until ``distributed_save(wait=True)``
    returned (its poll adds up to 0.2 s).
    """
    start = time.time()
    service.distributed_save(dataset, path, target, compression=compression, wait=True)
    call_s = time.time() - start
    manifest_path = Path(path, "manifest.json")
    manifest = json.loads(manifest_path.read_text())
    return {
        "seconds": manifest_path.stat().st_mtime - start,
        "call_s": call_s,
        "elements": manifest["cardinality"],
        "chunks": len(manifest["chunks"]),
        "compression": manifest["compression"],
        "bytes": folder_bytes(path),
    }


def mem_available() -> int:
    """``MemAvailable`` of /proc/meminfo, in bytes (0 where unknown)."""
    try:
        with open("/proc/meminfo") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# ------------------------------------------------------------------ measuring


def image_pass(name: str, read: Reader, images: int) -> Pass:
    """A pass: images/s and trainer CPU s per 1,000 images of an epoch of
    ``read``, which must hold ``images``."""

    def once() -> Figures:
        count, wall, cpu = peers.epoch(read)
        if count != images:
            raise RuntimeError(f"{name} read {count} images, expected {images}")
        return {"images_s": count / wall, "cpu_s_per_1k": cpu * 1000 / count}

    return once


def readers(
    target: str,
    pipeline: peers.Pipeline,
    paths: dict[str, str],
    npy: Sequence[Path],
) -> dict[str, Reader]:
    """Every system's reader: ``paths`` are the saves' folders by label."""

    def remote(dataset: zd.Dataset) -> Reader:
        read = distributed(dataset, target, processing_mode="distributed_epoch")
        return lambda: read

    def local(dataset: zd.Dataset) -> Reader:
        return lambda: dataset

    out = {
        "recompute": remote(pipeline.dataset()),
        "numpy": lambda: npy_batches(npy),
    }
    for name, label in SAVE_OF.items():
        loaded = zd.Dataset.load(paths[label])
        out[name] = (local if "local" in name else remote)(loaded)
    return out


def ratios(figures: dict[str, dict[str, Stat]]) -> dict[str, Any]:
    """Per loading system: its images/s over ``recompute``'s and ``numpy``'s,
    of the medians and per round."""
    out: dict[str, Any] = {}
    for name in (name for name in LOADS if name in figures):
        ours = figures[name]["images_s"]
        for base in ("recompute", "numpy"):
            if base in figures:
                theirs = figures[base]["images_s"]
                out.setdefault(name, {})[base] = {
                    "ratio": ours / theirs,
                    "rounds": round_ratios(ours, theirs),
                }
    return out


def measure(
    bench: Bench, systems: Sequence[str], pipeline: peers.Pipeline
) -> dict[str, Any]:
    """The saves, then ``systems`` on ``pipeline``'s images: each checked
    once, then interleaved rounds; their figures and the targets' ratios."""
    load = os.getloadavg()[0]
    memory = mem_available()
    out: dict[str, Any] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zd-")))
        reference = write_npy(pipeline.local(), folder / "npy")
        npy = sorted((folder / "npy").glob("*.npy"))
        target = stack.enter_context(peers.zmqdata_up(WORKERS))
        paths = {label: str(folder / f"save-{label}") for label in SAVES}
        saves = {
            label: save(pipeline.dataset(), paths[label], target, compression)
            for label, compression in SAVES.items()
        }
        for figures in saves.values():
            figures["images_s"] = reference.count / figures["seconds"]
            figures["of_raw"] = figures["bytes"] / reference.raw_bytes
        everything = readers(target, pipeline, paths, npy)
        passes: dict[str, Pass] = {}
        for name in (name for name in SYSTEMS if name in systems):
            read = everything[name]
            whole = name != "recompute"
            out[name] = {
                "label": LABELS[name],
                "check": check_epoch(name, read, reference, whole),
            }
            passes[name] = image_pass(name, read, reference.count)
        figures = interleaved(passes, bench.repeats)
        files, npy_bytes = folder_bytes(folder), folder_bytes(folder / "npy")
    for name, stats in figures.items():
        out[name].update(stats)
    return {
        "images": reference.count,
        "batches": reference.batches.total(),
        "batch": pipeline.batch,
        "raw_bytes": reference.raw_bytes,
        "workers": WORKERS,
        "repeats": bench.repeats,
        "load_average": round(load, 2),
        "mem_available": memory,
        "files_bytes": files,
        "saves": saves,
        "npy": {"files": len(npy), "bytes": npy_bytes},
        "systems": out,
        "ratios": ratios(figures),
    }


def snapshots(bench: Bench, systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """The section: bench/peers.py's images (quick: 512 files), every system in
    ``systems``."""
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}, of {SYSTEMS}")
    if importlib.util.find_spec("PIL") is None:
        reason = "`import PIL` fails (pip install -e '.[bench]')"
        print(f"\n  snapshots skipped: {reason}", file=sys.stderr)
        return {"skipped": reason}
    return measure(bench, systems, peers.image_pipeline(512 if bench.quick else 2048))


# ------------------------------------------------------------------ tables


def _mb(size: float) -> str:
    return f"{size / 1e6:,.1f} MB"


def _cpu(value: float) -> str:
    return f"{value:.3f}"


def _target(base: str) -> float:
    """Issue 27's target for a loading system over ``base``."""
    return TARGET_VS_RECOMPUTE if base == "recompute" else TARGET_VS_NUMPY


def details(result: dict[str, Any]) -> str:
    """The section's tables: the saves, every system, the targets' ratios."""
    from bench.report import mark, markdown

    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    raw = result["raw_bytes"]
    save_rows = [
        (
            f"compression={label}",
            f"{figures['seconds']:.2f} s ({figures['call_s']:.2f} s)",
            number(figures["images_s"]),
            f"{_mb(figures['bytes'])} ({figures['of_raw']:.0%})",
            str(figures["chunks"]),
        )
        for label, figures in result["saves"].items()
    ]
    save_header = (
        "distributed_save(wait=True)",
        "seconds to the manifest (call returned)",
        "images/s",
        f"on disk (of the {_mb(raw)} raw)",
        "chunks",
    )
    systems = result["systems"]
    recompute = systems.get("recompute", {})
    rows = [
        (
            figures["label"],
            _spread(figures["images_s"]),
            times(figures["images_s"] / recompute["images_s"])
            if "images_s" in recompute
            else "—",
            _spread(figures["cpu_s_per_1k"], _cpu),
        )
        for figures in systems.values()
    ]
    header = (
        "system",
        "images/s (min-max)",
        "vs recompute",
        "trainer CPU s per 1,000 images (min-max)",
    )
    about = (
        f"{result['images']:,} images in {result['batches']} batches of"
        f" {result['batch']}, {_mb(raw)} of float32 ({result['npy']['files']} .npy"
        f" files: {_mb(result['npy']['bytes'])}); {result['workers']} worker"
        f" processes (`zmqdata up`); medians of {result['repeats']} interleaved"
        " rounds after a checked epoch and a warm-up epoch of each; 1-minute load"
        f" average {result['load_average']:.2f} at the start. Page cache: hot (the"
        f" {_mb(result['files_bytes'])} of saves and .npy files were written in"
        f" this run and read every round; {result['mem_available'] / 2**30:.1f}"
        " GiB available at the start)."
    )
    lines = []
    for name, bases in result["ratios"].items():
        for base, r in bases.items():
            target = _target(base)
            lines.append(
                f"* {name} over {base}: {times(r['ratio'])} (per round"
                f" {_spread(r['rounds'], times)}), target ≥ {target:.1f}x"
                f" {mark(r['ratio'] >= target)}"
            )
    return "\n\n".join(
        [
            about,
            markdown(save_header, save_rows),
            markdown(header, rows),
            "\n".join(lines),
        ]
    )


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: the loading systems over recompute and numpy."""
    from bench.report import NONE, mark

    if "skipped" in result:
        return []
    out: list[tuple[str, ...]] = []
    systems = result["systems"]
    about = f"{result['images']:,} JPEGs, batch {result['batch']}"
    for name, bases in result["ratios"].items():
        for base, r in bases.items():
            target = _target(base)
            out.append(
                (
                    f"snapshots: images/s, {name} vs {base} ({about})",
                    f"{number(systems[name]['images_s'])} images/s",
                    f"{number(systems[base]['images_s'])} images/s",
                    times(r["ratio"]),
                    NONE,
                    NONE,
                    f"≥ {target:.1f}x {mark(r['ratio'] >= target)}",
                )
            )
    return out


if __name__ == "__main__":
    section_main(__doc__, snapshots, details, SYSTEMS)
