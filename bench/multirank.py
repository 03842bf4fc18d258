"""Multi-rank reads: what dealing costs, and how long save/merge/restore take.

    python bench/multirank.py [--quick] [--repeats N] [--json samples.json]
    python bench/multirank.py --workloads images_unbatched   # a diagnostic
    python bench/run.py --only multirank

``R = 2`` ranks, each its own process (spawned, as DDP ranks are; the
trainer only iterates), read one ``distributed_epoch`` job of a finite
dataset from 2 worker processes (``common.cluster(2)``: the dispatcher in
this process, which only waits while the ranks read).

1. Throughput. Every pass is a fresh job read by both ranks at once, either
   ``dealt`` (``num_consumers=2, consumer_index=r, seed=0``: rank ``r`` gets
   elements ``r, r+2, ...``) or ``fcfs`` (the same ``job_name``, no
   ``num_consumers``: first come, first served). Interleaved passes
   (``exactly_once.interleaved``): a warm-up pass of each, then ``repeats``
   rounds of one pass of each, the order reversed every other round. A pass's
   rate is the units (source elements; images) both ranks received over the
   window from the first rank's ``iter()`` to the last rank's end of input;
   trainer CPU is both ranks' ``time.process_time()`` over their reads, per
   1,000 units; "units per element received" shows the batch size each mode
   delivered. Each pass checks its counts: dealt, every rank exactly its
   share; fcfs, the whole epoch between them.

   * ``W1``: ``range(200,000)`` int64 scalars (W1's anchor size).
   * ``images``: bench/peers.py's JPEG pipeline, 2,048 files,
     ``list_files -> image_element -> batch(64)``: images/s.
   * ``images_unbatched`` (only with ``--workloads``): the same without
     ``batch``, to compare both modes at one image per element.

2. Latency, each workload, ``max(5, repeats)`` rounds: both ranks read a
   quarter of their share of a dealt job (``seed=0``), then each times
   ``it.save()``; this process times ``service.merge_positions`` of the two
   states; then new ranks on a fresh ``job_name`` each time ``iter(ds)``,
   ``it.restore(merged)`` and the first ``next(it)``. In the same round each
   rank also times ``iter(ds)`` + first ``next`` of a fresh dealt job, no
   restore, and of a fresh fcfs job: the baselines (before the restore in
   even rounds, after it in odd ones). Figures: median and p90 over rounds x
   ranks. The first round reads the restored job to the end and checks that
   the ranks received exactly the elements not consumed before the save.

Issue target: dealing costs under 5% of the fcfs throughput.
"""

from __future__ import annotations

import importlib.util
import itertools
import multiprocessing
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench import peers, pipelines
from bench.common import Bench, Stat, cluster, number, section_main
from bench.exactly_once import compared, interleaved
from zmqdata import service

RANKS = 2
WORKERS = 2
SEED = 0
TARGET_OVERHEAD = 0.05
"""The issue's target: dealt reads cost under 5% of fcfs throughput."""
MODES = ("dealt", "fcfs")
WORKLOADS = ("W1", "images", "images_unbatched")
DEFAULT_WORKLOADS = ("W1", "images")
Figures = dict[str, float]


# ------------------------------------------------------------------ the ranks


def dataset(workload: str, size: int) -> zd.Dataset:
    """The workload's pipeline, before ``distribute``."""
    if workload == "W1":
        return zd.Dataset.range(size)
    if workload == "images":
        return peers.image_pipeline(size).dataset()
    if workload == "images_unbatched":  # a diagnostic: the same, no batch
        peers.image_pipeline(size)  # makes the files
        folder = peers.CACHE / f"images-{pipelines.IMAGE_SIDE}px-{size}-seed0"
        files = zd.Dataset.list_files(str(folder / "*.jpg"), shuffle=False)
        return files.map(pipelines.image_element)
    raise ValueError(f"unknown workload {workload!r}")


def remote(
    workload: str, size: int, target: str, job: str, rank: int, dealt: bool
) -> zd.Dataset:
    """Rank ``rank``'s read of job ``job``: dealt or first come, first served."""
    options: dict[str, Any] = {"job_name": job}
    if dealt:
        options.update(num_consumers=RANKS, consumer_index=rank, seed=SEED)
    return dataset(workload, size).apply(
        service.distribute("distributed_epoch", target, **options)
    )


BATCHED = frozenset({"images"})
"""The workloads whose elements are batches: their units are a batch's rows."""


def units(workload: str, element: Any) -> int:
    """Units (source elements, images) a received element stands for: 1, or
    the length of a batch."""
    return len(element) if workload in BATCHED else 1


def _read(workload: str, it: Iterator[Any]) -> tuple[int, int]:
    """Drains ``it``: (elements received, units)."""
    count = total = 0
    for element in it:
        count += 1
        total += units(workload, element)
    return count, total


class Rank:
    """One rank's side of the commands (runs in its own process)."""

    def __init__(self, target: str, rank: int) -> None:
        self.target, self.rank = target, rank
        self.saved_it: Any = None

    def read(self, workload: str, size: int, job: str, dealt: bool) -> Figures:
        """One throughput pass: a fresh job read to the end."""
        ds = remote(workload, size, self.target, job, self.rank, dealt)
        cpu, start = time.process_time(), time.perf_counter()
        with iter(ds) as it:
            count, total = _read(workload, it)
        end = time.perf_counter()
        return {
            "count": count,
            "units": total,
            "start": start,
            "end": end,
            "cpu": time.process_time() - cpu,
        }

    def open(self, workload: str, size: int, job: str, take: int) -> Figures:
        """Reads a dealt job until ``take`` units are in, to save the position next."""
        self.saved_it = iter(remote(workload, size, self.target, job, self.rank, True))
        taken = 0
        while taken < take:
            taken += units(workload, next(self.saved_it))
        return {"units": taken}

    def save(self) -> tuple[bytes, float]:
        """``it.save()`` on the open read, timed; the read is closed after."""
        start = time.perf_counter()
        state = self.saved_it.save()
        elapsed = (time.perf_counter() - start) * 1000
        self.saved_it.close()
        self.saved_it = None
        return state, elapsed

    def restore(
        self,
        workload: str,
        size: int,
        job: str,
        merged: bytes,
        fresh_job: str,
        fresh_first: bool,
        verify: bool,
    ) -> Figures:
        """New rank: ``iter`` + ``restore`` + first ``next`` on ``job``; and the
        baselines (before or after): ``iter`` + first ``next`` of a fresh dealt
        job, and of a fresh fcfs job."""
        out: Figures = {}

        def fresh() -> None:
            for key, dealt in (("fresh_first_ms", True), ("fcfs_first_ms", False)):
                job = f"{fresh_job}-{'dealt' if dealt else 'fcfs'}"
                ds = remote(workload, size, self.target, job, self.rank, dealt)
                start = time.perf_counter()
                with iter(ds) as it:
                    next(it)
                    out[key] = (time.perf_counter() - start) * 1000

        if fresh_first:
            fresh()
        ds = remote(workload, size, self.target, job, self.rank, True)
        start = time.perf_counter()
        it = iter(ds)
        made = time.perf_counter()
        it.restore(merged)
        restored = time.perf_counter()
        first = next(it)
        end = time.perf_counter()
        out.update(
            restore_first_ms=(end - start) * 1000,
            iter_ms=(made - start) * 1000,
            restore_ms=(restored - made) * 1000,
            first_ms=(end - restored) * 1000,
        )
        if verify:
            _, total = _read(workload, it)
            out["rest_units"] = total + units(workload, first)
        it.close()
        if not fresh_first:
            fresh()
        return out


def _rank_main(target: str, rank: int, conn: Any) -> None:
    """A rank process: runs each command it receives, replies with its result."""
    me = Rank(target, rank)
    while True:
        command = conn.recv()
        if command is None:
            return
        name, args = command
        try:
            conn.send(("ok", getattr(me, name)(*args)))
        except BaseException:
            conn.send(("error", traceback.format_exc()))


class Ranks:
    """``RANKS`` rank processes; ``ask`` runs one command on all of them at once."""

    def __init__(self, target: str) -> None:
        spawn = multiprocessing.get_context("spawn")
        self.procs, self.conns = [], []
        for rank in range(RANKS):
            parent, child = spawn.Pipe()
            proc = spawn.Process(target=_rank_main, args=(target, rank, child))
            proc.start()
            self.procs.append(proc)
            self.conns.append(parent)

    def ask(self, name: str, *args: Any) -> list[Any]:
        """Sends command ``name`` with ``args`` to every rank, then waits for all
        replies (in rank order); a rank's error is raised here."""
        for conn in self.conns:
            conn.send((name, args))
        replies = [conn.recv() for conn in self.conns]
        for status, value in replies:
            if status != "ok":
                raise RuntimeError(f"a rank failed in {name}:\n{value}")
        return [value for _, value in replies]

    def close(self) -> None:
        for conn in self.conns:
            with suppress(OSError):
                conn.send(None)
        for proc in self.procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()


@contextmanager
def ranks(target: str) -> Iterator[Ranks]:
    group = Ranks(target)
    try:
        yield group
    finally:
        group.close()


# ------------------------------------------------------------------ throughput


def shares(total: int) -> int:
    """Units (elements, or images) each rank receives of a dealt epoch of ``total``
    (the workloads here deal whole rounds: ``total`` splits evenly)."""
    return total // RANKS


def check_pass(dealt: bool, results: list[Figures], total: int) -> None:
    """Dealt: every rank exactly its share; fcfs: the whole epoch between them."""
    got = [int(r["units"]) for r in results]
    if (dealt and got != [shares(total)] * RANKS) or sum(got) != total:
        mode = "dealt" if dealt else "fcfs"
        raise RuntimeError(f"{mode}: ranks received {got} units, epoch of {total}")


def pass_figures(results: list[Figures]) -> Figures:
    """One pass's figures from the ranks' results: units/s, CPU s per 1,000
    units, and units per element received (a batch's size)."""
    window = max(r["end"] for r in results) - min(r["start"] for r in results)
    total = sum(r["units"] for r in results)
    return {
        "rate": total / window,
        "cpu_s_per_1k": sum(r["cpu"] for r in results) * 1000 / total,
        "units_per_element": total / sum(r["count"] for r in results),
    }


def throughput(
    group: Ranks, workload: str, size: int, total: int, repeats: int
) -> dict[str, Any]:
    """Interleaved dealt and fcfs passes of ``workload`` (``total`` units a pass)."""
    jobs = itertools.count()

    def timed(dealt: bool) -> Callable[[], Figures]:
        def once() -> Figures:
            job = f"multirank-{workload}-{'dealt' if dealt else 'fcfs'}-{next(jobs)}"
            results = group.ask("read", workload, size, job, dealt)
            check_pass(dealt, results, total)
            return pass_figures(results)

        return once

    figures = interleaved({mode: timed(mode == "dealt") for mode in MODES}, repeats)
    return compared(figures, "dealt", "fcfs")


# ------------------------------------------------------------------ latency


def percentile(stat: Stat, q: float) -> float:
    return float(np.percentile(stat.samples, q))


def latency(
    group: Ranks, workload: str, size: int, total: int, rounds: int
) -> dict[str, Any]:
    """Save, merge and restore + first element, ``rounds`` times (``total``
    units an epoch)."""
    share = shares(total)
    take = max(1, share // 4)
    samples: dict[str, list[float]] = {}
    state_bytes, merged_bytes = 0, 0
    for round_ in range(rounds):
        name = f"multirank-{workload}-latency-{round_}"
        opened = group.ask("open", workload, size, name, take)
        saves = group.ask("save")
        states = [state for state, _ in saves]
        start = time.perf_counter()
        merged = service.merge_positions(states)
        merge_ms = (time.perf_counter() - start) * 1000
        state_bytes, merged_bytes = max(len(s) for s in states), len(merged)
        verify = round_ == 0
        restored = group.ask(
            "restore",
            workload,
            size,
            f"{name}-restored",
            merged,
            f"{name}-fresh",
            round_ % 2 == 0,  # the baseline before the restore, or after
            verify,
        )
        if verify:
            rest = [int(r["rest_units"]) for r in restored]
            expected = [share - int(o["units"]) for o in opened]
            if rest != expected:
                raise RuntimeError(
                    f"restored ranks received {rest} units, expected {expected}"
                )
        samples.setdefault("save_ms", []).extend(ms for _, ms in saves)
        samples.setdefault("merge_ms", []).append(merge_ms)
        for key in ("restore_first_ms", "iter_ms", "restore_ms", "first_ms"):
            samples.setdefault(key, []).extend(r[key] for r in restored)
        for key in ("fresh_first_ms", "fcfs_first_ms"):
            samples.setdefault(key, []).extend(r[key] for r in restored)
    return {
        "rounds": rounds,
        "taken_per_rank": int(opened[0]["units"]),
        "state_bytes": state_bytes,
        "merged_bytes": merged_bytes,
        **{key: Stat(values) for key, values in samples.items()},
    }


# ------------------------------------------------------------------ the section


def workloads(
    bench: Bench, names: Sequence[str]
) -> dict[str, tuple[int, int, str, str]]:
    """Name -> (pipeline size, units per epoch (elements, images), unit, about),
    of ``names`` (the image pipelines only where Pillow imports)."""
    out = {}
    n = bench.sizes.w1_elements
    out["W1"] = (n, n, "el/s", f"range({n:,}) int64 scalars")
    if importlib.util.find_spec("PIL") is not None:
        files = 512 if bench.quick else 2048
        about = f"{files:,} JPEGs, decode + augment"
        out["images"] = (files, files, "images/s", f"{about}, batch 64")
        out["images_unbatched"] = (files, files, "images/s", f"{about}, no batch")
    return {name: out[name] for name in names if name in out}


def multirank(bench: Bench, names: Sequence[str] = DEFAULT_WORKLOADS) -> dict[str, Any]:
    """The section: throughput, dealt against fcfs, then save/merge/restore latency."""
    result: dict[str, Any] = {
        "repeats": bench.repeats,
        "ranks": RANKS,
        "workers": WORKERS,
    }
    chosen = workloads(bench, names)
    for name in names:
        if name not in chosen:
            result[name] = {"skipped": "`import PIL` fails (pip install -e '.[bench]')"}
    rounds = max(5, bench.repeats)
    with cluster(WORKERS) as target, ranks(target) as group:
        for name, (size, total, unit, about) in chosen.items():
            figures = throughput(group, name, size, total, bench.repeats)
            result[name] = {"about": about, "unit": unit, **figures}
        for name, (size, total, _, _) in chosen.items():
            result[name]["latency"] = latency(group, name, size, total, rounds)
    return result


# ------------------------------------------------------------------ tables


def _spread(stat: Stat, digits: str = "") -> str:
    low, high = min(stat.samples), max(stat.samples)
    if digits:
        return f"{low:{digits}}-{high:{digits}}"
    return f"{number(low)}-{number(high)}"


def details(result: dict[str, Any]) -> str:
    """The section's tables: throughput with spreads, then latencies."""
    from bench.report import mark, markdown

    names = [name for name in WORKLOADS if name in result]
    rows: list[tuple[str, ...]] = []
    for name in names:
        r = result[name]
        if "skipped" in r:
            rows.append((name, "skipped: " + r["skipped"], *"———————"))
            continue
        dealt, fcfs, unit = r["dealt"]["rate"], r["fcfs"]["rate"], r["unit"]
        cpu_d, cpu_f = r["dealt"]["cpu_s_per_1k"], r["fcfs"]["cpu_s_per_1k"]
        rows.append(
            (
                f"{name}: {r['about']}",
                f"{number(dealt)} {unit} ({_spread(dealt)})",
                f"{number(fcfs)} {unit} ({_spread(fcfs)})",
                f"{r['ratio']:.3f}x",
                f"{r['round_ratios']:.3f}x ({_spread(r['round_ratios'], '.3f')})",
                f"{cpu_d:.4f} / {cpu_f:.4f} ({cpu_d / cpu_f:.2f}x)",
                "{:.0f} / {:.0f}".format(
                    r["dealt"]["units_per_element"], r["fcfs"]["units_per_element"]
                ),
                f"{r['overhead']:+.1%}",
                f"< {TARGET_OVERHEAD:.0%} {mark(r['overhead'] < TARGET_OVERHEAD)}",
            )
        )
    header = (
        "workload",
        "dealt (min-max)",
        "fcfs (min-max)",
        "dealt/fcfs, medians",
        "dealt/fcfs per round (min-max)",
        "ranks' CPU s per 1,000, dealt / fcfs",
        "units per element received, dealt / fcfs",
        "overhead (throughput lost)",
        "target",
    )
    about = (
        f"{result['ranks']} rank processes, {result['workers']} worker processes,"
        f" distributed_epoch; interleaved passes, medians of {result['repeats']}"
        " after a warm-up pass of each."
    )
    parts = [about, markdown(header, rows)]
    lat_rows: list[tuple[str, ...]] = []
    timed = [name for name in names if "latency" in result[name]]
    for name in timed:
        lat = result[name]["latency"]
        for key, label in (
            ("save_ms", "it.save() on a rank"),
            ("merge_ms", f"merge_positions of {result['ranks']} states"),
            ("restore_first_ms", "new rank: iter + restore + first element"),
            ("iter_ms", "  of which iter()"),
            ("restore_ms", "  of which restore()"),
            ("first_ms", "  of which first next()"),
            ("fresh_first_ms", "baseline: fresh dealt job, iter + first element"),
            ("fcfs_first_ms", "baseline: fresh fcfs job, iter + first element"),
        ):
            stat = lat[key]
            lat_rows.append(
                (
                    name,
                    label,
                    f"{stat:.2f}",
                    f"{percentile(stat, 90):.2f}",
                    _spread(stat, ".2f"),
                    str(len(stat.samples)),
                )
            )
    if timed:
        sizes = ", ".join(
            f"{name} {result[name]['latency']['state_bytes']} B"
            f" / {result[name]['latency']['merged_bytes']} B"
            for name in timed
        )
        parts.append(
            f"Save/restore latency (ms), {result[timed[0]]['latency']['rounds']}"
            " rounds x ranks; saved after a quarter of each rank's share (state /"
            f" merged state: {sizes})."
        )
        lat_header = ("workload", "step", "median", "p90", "min-max", "samples")
        parts.append(markdown(lat_header, lat_rows))
    return "\n\n".join(parts)


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: dealt against fcfs, per workload."""
    from bench.report import overhead_row

    return [
        overhead_row(
            f"multi-rank, {name} ({r['about']}): dealt vs fcfs, 2 ranks",
            f"{number(r['dealt']['rate'])} {r['unit']}",
            f"fcfs {number(r['fcfs']['rate'])} {r['unit']}",
            r["ratio"],
            r["overhead"],
            TARGET_OVERHEAD,
        )
        for name in WORKLOADS
        if "ratio" in (r := result.get(name, {}))
    ]


def main() -> None:
    section_main(__doc__ or "", multirank, details, list(WORKLOADS), DEFAULT_WORKLOADS)


if __name__ == "__main__":
    # Through the package: the rank processes import bench.multirank.
    from bench.multirank import main as run

    run()
