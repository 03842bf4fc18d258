"""Preprocess once, inline: ``snapshot(path)`` before ``distribute``, written
while epoch 1 streams and read by later epochs and jobs.

Issue 40's bench. A pipeline whose map costs ~5-6 ms of CPU per element
(``decode``: a seeded 64x64x3 float32 image, 48 KiB, through ``ROUNDS`` rounds
of numpy ops; the local reference pass measures its cost on this machine),
``N`` elements (1,200; quick: 300), read from a ``zmqdata up`` deployment of 2
workers under ``distributed_epoch``, defaults; this process (the trainer)
only iterates:

* ``plain``: the pipeline without ``snapshot``, a new job each pass: epoch 1
  with nothing written;
* ``writing``: ``pipeline.snapshot(path)`` with a fresh ``path`` each pass:
  epoch 1 while the workers write the snapshot. The read is timed; then the
  pass waits until the snapshot's save is ``"finished"`` (``get_status()
  ["saves"]``) and records the seconds from the pass's start to its
  ``manifest.json`` (``finished_s``) and from epoch 1's last element
  (``finish_lag_s``; ``repeat`` too; negative: the manifest was written while the last
  elements were on their way to the trainer);
* ``second_job``: a new job over ``pipeline.snapshot(kept)``, whose snapshot a
  job before the rounds wrote and finished: it reads the chunks;
* ``repeat``: ``pipeline.snapshot(path).repeat(2)``, a fresh ``path`` each
  pass: epoch 1 is the read up to the ``N``-th element, epoch 2 the next ``N``
  (epoch 2's first splits start while epoch 1's last run: a few of them run
  the map again);
* ``load``: ``Dataset.load`` of the kept snapshot's folder through the same
  workers.

Each system's first pass is checked, not timed: every element as often as
the local pipeline gives it (once; ``repeat``: twice), equal values (a
multiset of dtype, shape and CRC-32 of each element: bench/snapshots.py's
check), the job's snapshot state in ``get_status()`` once its first element
came (``writing``, ``reading`` or none: ``STATES``), and, for the systems that
write, the finished snapshot read back with ``Dataset.load`` holding every
element once. Then a warm-up pass of each and ``repeats`` interleaved rounds
(bench/exactly_once.py's ``interleaved``). Figures per pass: elements/s, the
milliseconds to the first element (a new job's start) and the trainer's CPU
seconds per 1,000 elements (``getrusage``; ``repeat``: over both epochs);
medians with the rounds' min-max. Every file is hot in the page cache
(written in the run).

Issue 40's targets (``TARGETS``), of the medians and per round:
``second_job`` ≥ 5x ``writing``, ``second_job`` ≥ 0.9x ``load``, ``repeat``'s
epoch 2 ≥ 5x its epoch 1, ``writing`` ≥ 0.9x ``plain`` (writing costs at most
10%). A section for bench/run.py::

    SECTIONS["inline_snapshots"] = inline_snapshots.inline_snapshots

or on its own: ``python bench/inline_snapshots.py [--quick] [--repeats N]
[--workloads plain,writing]`` (the workloads are the systems).
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
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
from bench.snapshots import Reference, check_epoch
from zmqdata import service

WORKERS = peers.WORKERS
SIDE = 64
ROUNDS = 480
"""``decode``'s rounds: ~5-6 ms of CPU per element on the 2-core bench machine."""
SYSTEMS = ("plain", "writing", "second_job", "repeat", "load")
LABELS = {
    "plain": "plain: no snapshot, a new job each pass",
    "writing": "writing: epoch 1 while the snapshot is written",
    "second_job": "second_job: a new job over the finished snapshot",
    "repeat": "repeat: snapshot(path).repeat(2), epoch 1",
    "load": "Dataset.load of the finished snapshot",
}
STATES = {"writing": "writing", "second_job": "reading", "repeat": "writing"}
"""The snapshot state ``get_status()`` shows for each system's job (others: none)."""
Ratio = tuple[str, str, str, str]
"""A target's numerator and denominator, each a system and its figure."""
TARGETS: dict[Ratio, float] = {
    ("second_job", "rate", "writing", "rate"): 5.0,
    ("second_job", "rate", "load", "rate"): 0.9,
    ("repeat", "epoch2_rate", "repeat", "rate"): 5.0,
    ("writing", "rate", "plain", "rate"): 0.9,
}
FINISHED_TIMEOUT_S = 120.0


def decode(index: Any, rounds: int = ROUNDS) -> np.ndarray[Any, Any]:
    """Stands for decoding and augmenting an image: a seeded 64x64x3 float32
    image through ``rounds`` rounds of elementwise numpy ops (workers import it
    by reference).

    >>> image = decode(3, rounds=2)
    >>> image.shape, image.dtype, image.nbytes, bool((decode(3, 2) == image).all())
    ((64, 64, 3), dtype('float32'), 49152, True)
    """
    rng = np.random.default_rng(int(index))
    image = rng.random((SIDE, SIDE, 3), dtype=np.float32)
    for _ in range(rounds):
        image = np.tanh(np.sin(image * 3.0) + image)
    return image


def pipeline(count: int, rounds: int = ROUNDS) -> zd.Dataset:
    """``count`` decoded images."""
    return zd.Dataset.range(count).map(functools.partial(decode, rounds=rounds))


# ------------------------------------------------------------------ the reads


@dataclass(frozen=True)
class Read:
    """One pass of a system: its dataset (read from the service), the epochs
    it holds, and the fresh snapshot folder it writes (waited for, then removed)."""

    dataset: zd.Dataset
    epochs: int = 1
    writes: Path | None = None


def snapshot_states(target: str) -> list[str]:
    """The snapshot states of the dispatcher's live jobs (jobs without one: none)."""
    jobs = service.get_status(target)["jobs"]
    return [job["snapshot"]["state"] for job in jobs if job.get("snapshot")]


def finished(target: str, root: Path) -> tuple[Path, float]:
    """The folder of the snapshot under ``root`` once its save is finished,
    and its ``manifest.json``'s modification time; RuntimeError if it fails
    or takes over ``FINISHED_TIMEOUT_S``."""
    deadline = time.monotonic() + FINISHED_TIMEOUT_S
    while True:
        saves = [
            save
            for save in service.get_status(target)["saves"]
            if Path(save["path"]).parent == root
        ]
        states = [save["state"] for save in saves]
        if states == ["finished"]:
            folder = Path(saves[0]["path"])
            return folder, (folder / "manifest.json").stat().st_mtime
        if "failed" in states or time.monotonic() > deadline:
            raise RuntimeError(f"the snapshot under {root} did not finish: {saves}")
        time.sleep(0.01)


def readers(
    target: str, dataset: zd.Dataset, folder: Path, kept: Path
) -> dict[str, Callable[[], Read]]:
    """Every system's passes over ``dataset``: fresh snapshots under
    ``folder``, ``kept`` the finished snapshot's folder."""
    fresh = itertools.count()

    def remote(ds: zd.Dataset) -> zd.Dataset:
        return distributed(ds, target, processing_mode="distributed_epoch")

    def writing(epochs: int) -> Callable[[], Read]:
        def read() -> Read:
            root = folder / f"fresh-{next(fresh)}"
            ds = dataset.snapshot(str(root))
            return Read(remote(ds.repeat(epochs) if epochs > 1 else ds), epochs, root)

        return read

    plain = remote(dataset)
    second_job = remote(dataset.snapshot(str(kept.parent)))
    loaded = remote(zd.Dataset.load(str(kept)))
    return {
        "plain": lambda: Read(plain),
        "writing": writing(1),
        "second_job": lambda: Read(second_job),
        "repeat": writing(2),
        "load": lambda: Read(loaded),
    }


def write_kept(target: str, dataset: zd.Dataset, root: Path) -> Path:
    """``dataset``'s snapshot under ``root``, written by one job and finished;
    its folder."""
    for _ in distributed(
        dataset.snapshot(str(root)), target, processing_mode="distributed_epoch"
    ):
        pass
    return finished(target, root)[0]


# ------------------------------------------------------------------ checking


def local_reference(dataset: zd.Dataset) -> tuple[Reference, float]:
    """``dataset``'s elements, as check_epoch's reference (one-element batches),
    and the CPU milliseconds per element of this local pass."""
    reference = Reference()
    start = time.process_time()
    elements = list(dataset)
    cpu_ms = (time.process_time() - start) * 1000 / max(1, len(elements))
    for element in elements:
        reference.add(element[np.newaxis])
    return reference, cpu_ms


def repeated(reference: Reference, epochs: int) -> Reference:
    """``reference``'s elements ``epochs`` times each."""
    out = Reference()
    for keys, count in reference.batches.items():
        out.images.update({key: count * epochs for key in keys})
        out.batches[keys] = count * epochs
    out.raw_bytes = reference.raw_bytes * epochs
    return out


def checked(
    name: str, read: Callable[[], Read], target: str, reference: Reference
) -> dict[str, Any]:
    """The first pass of system ``name``: its elements against ``reference``
    (``repeat``: twice each), its job's snapshot state, and the snapshot it
    wrote; RuntimeError naming ``name`` otherwise."""
    run = read()
    states: list[list[str]] = []

    def batches() -> Iterator[np.ndarray[Any, Any]]:
        for index, element in enumerate(run.dataset):
            if index == 0:
                states.append(snapshot_states(target))
            yield element[np.newaxis]

    check = check_epoch(name, batches, repeated(reference, run.epochs), False)
    expected = [STATES[name]] if name in STATES else []
    if states != [expected]:
        raise RuntimeError(f"{name}: job snapshot states {states}, not {expected}")
    if run.writes is not None:
        written, _ = finished(target, run.writes)
        load = zd.Dataset.load(str(written))
        check_epoch(f"{name}'s snapshot", lambda: _rows(load), reference, False)
        shutil.rmtree(run.writes)
    return {"elements": check["images"], "state": states[0][0] if expected else None}


def _rows(elements: Iterable[Any]) -> Iterator[np.ndarray[Any, Any]]:
    return (element[np.newaxis] for element in elements)


# ------------------------------------------------------------------ measuring


def marked_epochs(
    dataset: Iterable[Any], marks: Sequence[int]
) -> tuple[list[float], float]:
    """One read of ``dataset``: the wall seconds at which it had given each
    of ``marks`` elements (the last: all of them), and the trainer's CPU
    seconds.

    >>> seconds, cpu = marked_epochs(range(4), [1, 2, 2, 4])
    >>> len(seconds), seconds == sorted(seconds), cpu >= 0
    (4, True, True)
    """
    cpu, start = peers.cpu_s(), time.perf_counter()
    wanted, seconds, count = iter(marks), [], 0
    mark = next(wanted)
    for _ in dataset:
        count += 1
        while count == mark:
            seconds.append(time.perf_counter() - start)
            mark = next(wanted, -1)
    if count != marks[-1]:
        raise RuntimeError(f"read {count} elements, expected {marks[-1]}")
    return seconds, peers.cpu_s() - cpu


def timed(read: Callable[[], Read], target: str, count: int) -> Pass:
    """A pass: elements/s of epoch 1 (``repeat``: of epoch 2 too), the
    milliseconds to its first element, trainer CPU s per 1,000 elements, and
    for a pass that writes, the seconds until its snapshot finished (from the
    start and from epoch 1's last element)."""

    def once() -> Figures:
        run = read()
        start = time.time()
        ends = [count * (epoch + 1) for epoch in range(run.epochs)]
        (first, *seconds), cpu = marked_epochs(run.dataset, [1, *ends])
        figures = {
            "rate": count / seconds[0],
            "first_ms": first * 1000,
            "cpu_s_per_1k": cpu * 1000 / ends[-1],
        }
        if run.epochs == 2:
            figures["epoch2_rate"] = count / (seconds[1] - seconds[0])
        if run.writes is not None:
            _, written = finished(target, run.writes)
            figures["finished_s"] = written - start
            figures["finish_lag_s"] = written - start - seconds[0]
            shutil.rmtree(run.writes)
        return figures

    return once


def ratios(figures: dict[str, dict[str, Stat]]) -> dict[str, Any]:
    """Each target's ratio of the medians and per round, where both systems ran."""
    out: dict[str, Any] = {}
    for (top, top_key, base, base_key), target in TARGETS.items():
        if top in figures and base in figures:
            ours, theirs = figures[top][top_key], figures[base][base_key]
            out[ratio_name((top, top_key, base, base_key))] = {
                "ratio": ours / theirs,
                "rounds": round_ratios(ours, theirs),
                "target": target,
            }
    return out


def ratio_name(ratio: Ratio) -> str:
    """A target's name: its systems, and epochs where they are ``repeat``'s.

    >>> ratio_name(("repeat", "epoch2_rate", "repeat", "rate"))
    'repeat epoch 2/repeat epoch 1'
    >>> ratio_name(("second_job", "rate", "load", "rate"))
    'second_job/load'
    """

    def one(system: str, key: str) -> str:
        if system != "repeat":
            return system
        return f"{system} epoch {2 if key == 'epoch2_rate' else 1}"

    return f"{one(*ratio[:2])}/{one(*ratio[2:])}"


def measure(
    bench: Bench, systems: Sequence[str], count: int, rounds: int = ROUNDS
) -> dict[str, Any]:
    """``systems`` over ``count`` elements of ``decode`` with ``rounds``:
    each checked once, then interleaved rounds; their figures and the targets'."""
    load = os.getloadavg()[0]
    dataset = pipeline(count, rounds)
    reference, cpu_ms = local_reference(dataset)
    out: dict[str, Any] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="zd-")))
        target = stack.enter_context(peers.zmqdata_up(WORKERS))
        kept = write_kept(target, dataset, folder / "kept")
        every = readers(target, dataset, folder, kept)
        passes: dict[str, Pass] = {}
        for name in (name for name in SYSTEMS if name in systems):
            out[name] = {
                "label": LABELS[name],
                "check": checked(name, every[name], target, reference),
            }
            passes[name] = timed(every[name], target, count)
        figures = interleaved(passes, bench.repeats)
    for name, stats in figures.items():
        out[name].update(stats)
    return {
        "elements": count,
        "element_bytes": reference.raw_bytes // count,
        "rounds": rounds,
        "map_cpu_ms": cpu_ms,
        "workers": WORKERS,
        "repeats": bench.repeats,
        "load_average": round(load, 2),
        "systems": out,
        "ratios": ratios(figures),
    }


def inline_snapshots(bench: Bench, systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """The section: 1,200 elements (quick: 300), every system in ``systems``."""
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}, of {SYSTEMS}")
    return measure(bench, systems, 300 if bench.quick else 1200)


# ------------------------------------------------------------------ tables


def _cpu(value: float) -> str:
    return f"{value:.3f}"


def _seconds(stat: Stat) -> str:
    """Signed seconds with the samples' min-max: "+0.02 s (-0.01 to +0.05)"."""
    low, high = min(stat.samples), max(stat.samples)
    return f"{stat:+.2f} s ({low:+.2f} to {high:+.2f})"


def details(result: dict[str, Any]) -> str:
    """The section's tables: every system (``repeat`` as two epochs), the
    snapshots' finishing times, the targets' ratios."""
    from bench.report import mark, markdown

    systems = result["systems"]
    plain = systems.get("plain", {}).get("rate")

    def row(label: str, rate: Stat, *more: str) -> tuple[str, ...]:
        return (label, _spread(rate), times(rate / plain) if plain else "—", *more)

    rows = []
    for figures in systems.values():
        first, cpu = figures["first_ms"], figures["cpu_s_per_1k"]
        rows.append(
            row(figures["label"], figures["rate"], _spread(first), _spread(cpu, _cpu))
        )
        if "epoch2_rate" in figures:
            rows.append(row("repeat: epoch 2", figures["epoch2_rate"], "—", "—"))
    header = (
        "system",
        "elements/s (min-max)",
        "vs plain",
        "first element, ms (min-max)",
        "trainer CPU s per 1,000 elements (min-max)",
    )
    finishing = [
        f"* {name}: the snapshot finished {_seconds(figures['finished_s'])} after"
        f" the pass started, {_seconds(figures['finish_lag_s'])} after epoch 1's"
        " last element reached the trainer"
        for name, figures in systems.items()
        if "finished_s" in figures
    ]
    targets = [
        f"* {name}: {times(r['ratio'])} (per round {_spread(r['rounds'], times)}),"
        f" target ≥ {r['target']:.1f}x {mark(r['ratio'] >= r['target'])}"
        for name, r in result["ratios"].items()
    ]
    about = (
        f"{result['elements']:,} elements of {result['element_bytes']:,} bytes"
        f" (float32 64x64x3), map {result['map_cpu_ms']:.1f} ms of CPU per element"
        f" (the local reference pass; {result['rounds']} rounds); {result['workers']}"
        " worker processes (`zmqdata up`), distributed_epoch, defaults; medians of"
        f" {result['repeats']} interleaved rounds after a checked pass and a"
        f" warm-up pass of each; 1-minute load average {result['load_average']:.2f}"
        " at the start."
    )
    parts = [about, markdown(header, rows), "\n".join(finishing), "\n".join(targets)]
    return "\n\n".join(part for part in parts if part)


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: one per target."""
    from bench.report import NONE, mark

    about = f"{result['elements']:,} x {result['map_cpu_ms']:.1f} ms map"
    out: list[tuple[str, ...]] = []
    for top, top_key, base, base_key in TARGETS:
        name = ratio_name((top, top_key, base, base_key))
        if name not in result["ratios"]:
            continue
        r = result["ratios"][name]
        out.append(
            (
                f"inline snapshots: elements/s, {name} ({about})",
                f"{number(result['systems'][top][top_key])} el/s",
                f"{number(result['systems'][base][base_key])} el/s",
                times(r["ratio"]),
                NONE,
                NONE,
                f"≥ {r['target']:.1f}x {mark(r['ratio'] >= r['target'])}",
            )
        )
    return out


def main() -> None:
    section_main(__doc__, inline_snapshots, details, SYSTEMS)


if __name__ == "__main__":
    # Through the package: workers import decode by reference.
    from bench.inline_snapshots import main as run

    run()
