"""What exactly once costs: ``distributed_epoch`` with ``exactly_once`` on and off.

Issue 15: exactly once is the default if it costs under 5% on W1, W3 and the
image pipeline. Each workload reads the same pipeline from the same workers
with ``exactly_once=True`` (the default) and ``exactly_once=False``, default
settings otherwise, in interleaved passes: one warm-up pass of each, then
``repeats`` rounds of one pass of each, the order reversed every other round
(on/off, off/on, ...) so that drift on a shared machine hits both alike.

* ``images``: bench/peers.py's JPEG pipeline (2,048 files, batch 64) from a
  ``zmqdata up`` deployment of 2 workers (compression AUTO): images/s and
  trainer CPU seconds per 1,000 images (``peers.epoch``). First: it counts
  this process's CPU, before the shared cluster's in-process dispatcher starts.
* ``W1``: ``range(200,000)`` int64 scalars, one worker process (the shared
  cluster, ``Bench.target``): elements/s.
* ``W3``: 4 MiB float32 noise, ``range(count).map(noise_tensor)`` (a
  splittable source), ``compression=None``, over tcp: MB/s.
* ``rows``: a 1-to-many pipeline, ``range(n).map(row_block).unbatch()
  .batch(64)``: 16 rows of 8 int64 per element, one worker process: rows/s
  (with exactly once, each row carries a mark: docs/modes.md).

Figures: medians with the samples' min-max, the ratio on/off of the medians
and the median (min-max) of the per-round ratios, and the overhead
``1 - on/off``: the share of throughput exactly once costs. The dispatcher's
status confirms that each setting's jobs ran with that setting. A section for
bench/run.py::

    SECTIONS["exactly_once"] = exactly_once.exactly_once

or on its own: ``python bench/exactly_once.py [--quick] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench import peers
from bench.anchors import MIB
from bench.common import Bench, Stat, distributed, drain, number, sizes_for, transport
from bench.workloads import noise
from zmqdata import service

SETTINGS = {"on": True, "off": False}
"""Label -> ``exactly_once``."""
TARGET_OVERHEAD = 0.05
"""Issue 15: exactly once is the default if it costs under 5%."""
W3_SIZE = 4 * MIB
ROWS_PER_ELEMENT = 16
WORKLOADS = ("W1", "W3", "rows", "images")
Figures = dict[str, float]
"""One pass's figures: ``rate`` (elements/s or MB/s), and more per workload."""
Pass = Callable[[], Figures]


@functools.cache
def _noise(size: int) -> np.ndarray[Any, Any]:
    return noise(size)


def noise_tensor(index: Any, size: int) -> np.ndarray[Any, Any]:
    """The same ``size`` bytes of float32 noise for every ``index``, made once
    per process (workers import this function by reference)."""
    return _noise(size)


def row_block(index: Any) -> np.ndarray[Any, Any]:
    """``ROWS_PER_ELEMENT`` rows of 8 int64 (workers import it by reference)."""
    return np.full((ROWS_PER_ELEMENT, 8), index, np.int64)


# ------------------------------------------------------------------ measuring


def interleaved(passes: dict[str, Pass], repeats: int) -> dict[str, dict[str, Stat]]:
    """A warm-up pass of each setting, then ``repeats`` rounds of one pass of
    each, the order reversed every other round; per setting and figure, the
    median of the timed passes."""
    names = list(passes)
    for name in names:
        passes[name]()
    runs: dict[str, list[Figures]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names if round_ % 2 == 0 else names[::-1]:
            runs[name].append(passes[name]())
    return {
        name: {key: Stat(figures[key] for figures in samples) for key in samples[0]}
        for name, samples in runs.items()
    }


def compared(
    figures: dict[str, dict[str, Stat]], feature: str = "on", baseline: str = "off"
) -> dict[str, Any]:
    """The ``feature`` and ``baseline`` figures, their ratio and the overhead."""
    on, off = figures[feature]["rate"], figures[baseline]["rate"]
    rounds = (a / b for a, b in zip(on.samples, off.samples, strict=True))
    return {
        **figures,
        "ratio": on / off,
        "round_ratios": Stat(rounds),
        "overhead": 1 - on / off,
    }


def drain_pass(remote: zd.Dataset, elements: int, units: float) -> Pass:
    """A pass: ``units`` per second of draining ``remote`` (``elements``)."""

    def once() -> Figures:
        start = time.perf_counter()
        drain(remote, elements)
        return {"rate": units / (time.perf_counter() - start)}

    return once


def image_pass(remote: zd.Dataset, pipeline: peers.Pipeline) -> Pass:
    """A pass: images/s and trainer CPU per 1,000 of an epoch of ``pipeline``
    read from ``remote``."""

    def once() -> Figures:
        count, wall, cpu = peers.epoch(lambda: remote)
        if count != pipeline.elements:
            raise RuntimeError(f"read {count} images, expected {pipeline.elements}")
        return {"rate": count / wall, "cpu_s_per_1k": cpu * 1000 / count}

    return once


def _reads(target: str, dataset: zd.Dataset, **options: Any) -> dict[str, zd.Dataset]:
    """Per setting, ``dataset`` read from the service as ``distributed_epoch``."""
    return {
        label: distributed(
            dataset,
            target,
            processing_mode="distributed_epoch",
            exactly_once=flag,
            **options,
        )
        for label, flag in SETTINGS.items()
    }


def _check_jobs(target: str, reads: dict[str, zd.Dataset]) -> None:
    """Each read's job runs with its setting (the dispatcher's status, while
    the job lives: finished jobs leave it)."""
    for label, remote in reads.items():
        with iter(remote) as iterator:
            next(iterator)
            jobs = service.get_status(target)["jobs"]
        flags = [job["exactly_once"] for job in jobs]
        if flags != [SETTINGS[label]]:
            raise RuntimeError(f"{label}: live jobs have exactly_once {flags}")


def _rate_section(
    bench: Bench,
    dataset: zd.Dataset,
    elements: int,
    units: float,
    compression: str | None = "AUTO",
) -> dict[str, Any]:
    """``units`` per second of draining ``dataset`` (``elements``), both settings."""
    target = bench.target()
    reads = _reads(target, dataset, compression=compression)
    _check_jobs(target, reads)
    passes = {k: drain_pass(v, elements, units) for k, v in reads.items()}
    figures = interleaved(passes, bench.repeats)
    return compared(figures)


# ------------------------------------------------------------------ workloads


def w1(bench: Bench) -> dict[str, Any]:
    """``range(N)`` int64 scalars from one worker process: elements/s."""
    n = bench.sizes.w1_elements
    figures = _rate_section(bench, zd.Dataset.range(n), n, n)
    return {"about": f"{n:,} int64 scalars, 1 worker", "unit": "el/s", **figures}


def w3(bench: Bench) -> dict[str, Any]:
    """4 MiB float32 noise, ``compression=None``, over tcp: MB/s."""
    count = bench.sizes.count_for(W3_SIZE)
    fn = functools.partial(noise_tensor, size=W3_SIZE)
    dataset = zd.Dataset.range(count).map(fn)
    with transport("tcp"):
        figures = _rate_section(bench, dataset, count, count * W3_SIZE / 1e6, None)
    about = f"{count} x 4 MiB float32 noise, compression=None, tcp, 1 worker"
    return {"about": about, "unit": "MB/s", **figures}


def rows_workload(bench: Bench) -> dict[str, Any]:
    """A 1-to-many pipeline: rows of ``unbatch`` in batches of 64, one worker."""
    n = bench.sizes.w1_elements // ROWS_PER_ELEMENT
    dataset = zd.Dataset.range(n).map(row_block).unbatch().batch(64)
    total = n * ROWS_PER_ELEMENT
    figures = _rate_section(bench, dataset, -(-total // 64), total)
    about = f"{total:,} rows of unbatch, batch 64, 1 worker"
    return {"about": about, "unit": "rows/s", **figures}


def images(bench: Bench) -> dict[str, Any]:
    """bench/peers.py's image pipeline from ``zmqdata up`` with 2 workers."""
    if importlib.util.find_spec("PIL") is None:
        return {"skipped": "`import PIL` fails (pip install -e '.[bench]')"}
    pipeline = peers.image_pipeline(512 if bench.quick else 2048)
    with peers.zmqdata_up(peers.WORKERS) as target:
        reads = _reads(target, pipeline.dataset())
        _check_jobs(target, reads)
        passes = {k: image_pass(v, pipeline) for k, v in reads.items()}
        figures = interleaved(passes, bench.repeats)
    about = (
        f"{pipeline.elements:,} JPEG images, batch {pipeline.batch}, `zmqdata up`"
        f" {peers.WORKERS} workers, defaults"
    )
    return {"about": about, "unit": "images/s", **compared(figures)}


def exactly_once(bench: Bench) -> dict[str, Any]:
    """The section: images first (trainer CPU), then W1, W3 and rows."""
    return {
        "repeats": bench.repeats,
        "images": images(bench),
        "W1": w1(bench),
        "W3": w3(bench),
        "rows": rows_workload(bench),
    }


# ------------------------------------------------------------------ tables


def _spread(stat: Stat, digits: str = "") -> str:
    low, high = min(stat.samples), max(stat.samples)
    if digits:
        return f"{low:{digits}}-{high:{digits}}"
    return f"{number(low)}-{number(high)}"


def comparison_table(
    result: dict[str, Any],
    workloads: Sequence[str],
    settings: tuple[str, str],
    target: float,
) -> str:
    """Every workload's figures with the feature on and off (``settings``: how
    the columns name them), with spreads, ratios and the overhead's ``target``."""
    from bench.report import mark, markdown

    rows = []
    for name in workloads:
        r = result[name]
        if "skipped" in r:
            rows.append((name, "skipped: " + r["skipped"], *"——————"))
            continue
        on, off, unit = r["on"]["rate"], r["off"]["rate"], r["unit"]
        rows.append(
            (
                f"{name}: {r['about']}",
                f"{number(on)} {unit} ({_spread(on)})",
                f"{number(off)} {unit} ({_spread(off)})",
                f"{r['ratio']:.3f}x",
                f"{r['round_ratios']:.3f}x ({_spread(r['round_ratios'], '.3f')})",
                f"{r['overhead']:+.1%}",
                f"< {target:.0%} {mark(r['overhead'] < target)}",
            )
        )
        if "cpu_s_per_1k" in r["on"]:
            cpu_on, cpu_off = r["on"]["cpu_s_per_1k"], r["off"]["cpu_s_per_1k"]
            rows.append(
                (
                    f"{name}: trainer CPU s per 1,000 images",
                    f"{cpu_on:.4f} ({_spread(cpu_on, '.4f')})",
                    f"{cpu_off:.4f} ({_spread(cpu_off, '.4f')})",
                    f"{cpu_on / cpu_off:.3f}x",
                    "—",
                    f"{cpu_on / cpu_off - 1:+.1%} CPU",
                    "—",
                )
            )
    header = (
        "workload",
        f"{settings[0]} (min-max)",
        f"{settings[1]} (min-max)",
        "on/off, medians",
        "on/off per round (min-max)",
        "overhead (throughput lost)",
        "target",
    )
    return markdown(header, rows)


def comparison_rows(
    result: dict[str, Any],
    workloads: Sequence[str],
    feature: str,
    baseline: str,
    target: float,
) -> list[tuple[str, ...]]:
    """The final table's rows: ``feature`` on against off (``baseline``), per
    workload."""
    from bench.report import overhead_row

    return [
        overhead_row(
            f"{feature}, {name} ({r['about']}): on vs off",
            f"{number(r['on']['rate'])} {r['unit']}",
            f"{baseline} {number(r['off']['rate'])} {r['unit']}",
            r["ratio"],
            r["overhead"],
            target,
        )
        for name in workloads
        if "skipped" not in (r := result[name])
    ]


def details(result: dict[str, Any]) -> str:
    """The section's own table: every workload, both settings, with spreads."""
    about = (
        f"distributed_epoch, interleaved passes, medians of {result['repeats']}"
        " after a warm-up pass of each setting."
    )
    settings = ("exactly_once=True", "exactly_once=False")
    table = comparison_table(result, WORKLOADS, settings, TARGET_OVERHEAD)
    return f"{about}\n\n{table}"


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: exactly once on against off, per workload."""
    return comparison_rows(
        result, WORKLOADS, "exactly once", "exactly_once=False", TARGET_OVERHEAD
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)
    bench = Bench(sizes_for(args.quick), repeats, args.quick)
    try:
        result = exactly_once(bench)
    finally:
        bench.close()
    print(details(result))
    samples = {
        name: {label: list(result[name][label]["rate"].samples) for label in SETTINGS}
        for name in WORKLOADS
        if "skipped" not in result[name]
    }
    print(json.dumps(samples), file=sys.stderr)


if __name__ == "__main__":
    # Through the package: workers import noise_tensor by reference.
    from bench.exactly_once import main as run

    run()
