"""What per-op profiling costs: workers with ``ZMQDATA_PROFILE_EVERY=16`` and ``=0``.

Issue 24: workers time one element in 16 through every op for per-op
statistics (zmqdata/_dataset/profile.py) at a cost under 2% on W1 and the
image pipeline. Each workload reads the same pipeline from two deployments side by
side: one whose worker processes run with ``ZMQDATA_PROFILE_EVERY=16`` (the
default: "on") and one with ``ZMQDATA_PROFILE_EVERY=0`` (profiling off: no
wrappers, no timing: "off"), default settings otherwise, in
interleaved passes as bench/exactly_once.py runs them: one warm-up pass of
each, then ``repeats`` rounds of one pass of each, the order reversed every
other round, so that drift on a shared machine hits both alike.

* ``images``: bench/peers.py's JPEG pipeline (2,048 files, batch 64) from two
  ``zmqdata up`` deployments of 2 workers each, ``distributed_epoch``:
  images/s and trainer CPU seconds per 1,000 images. First: it counts this
  process's CPU, before W1's in-process dispatchers start.
* ``W1``: ``range(200,000)`` int64 scalars from one worker process per
  deployment (an in-process dispatcher each, as ``bench.common.cluster``),
  read as bench/workloads.py reads W1 (``parallel_epochs``): elements/s.

Figures: medians with the samples' min-max, the ratio on/off of the medians
and the median (min-max) of the per-round ratios, and the overhead
``1 - on/off``: the share of throughput profiling costs. Before the passes,
the dispatchers' status confirms that the "on" job's workers report per-op
statistics (every op with elements out) and the "off" job's report none. A
section for bench/run.py::

    SECTIONS["profiling"] = profiling.profiling

or on its own: ``python bench/profiling.py [--quick] [--repeats N]``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmqdata as zd
from bench import peers
from bench.common import Bench, cluster, distributed, section_main
from bench.exactly_once import (
    Pass,
    compared,
    comparison_rows,
    comparison_table,
    drain_pass,
    image_pass,
    interleaved,
)
from zmqdata import service

PROFILE_ENV = "ZMQDATA_PROFILE_EVERY"
SETTINGS = {"on": {PROFILE_ENV: "16"}, "off": {PROFILE_ENV: "0"}}
"""Label -> what the deployment's worker processes get in their environment."""
TARGET_OVERHEAD = 0.02
"""Issue 24: profiling costs under 2% of throughput."""
WORKLOADS = ("images", "W1")
STATUS_TIMEOUT_S = 30.0
"""How long the check waits for the workers' first per-op statistics."""
Deploy = Callable[[Mapping[str, str]], AbstractContextManager[str]]
"""A deployment whose worker processes get an environment; its dispatcher."""


# ------------------------------------------------------------------ checking


def reported_ops(status: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The per-op statistics of the only job in a dispatcher's ``status``,
    once its workers reported on its tasks and every op counts elements out
    (an empty list: they reported none); None while they have not.

    >>> job = {"workers": [{"worker_id": 1}], "ops": [{"op": "range", "elements": 5}]}
    >>> reported_ops({"jobs": [job]})
    [{'op': 'range', 'elements': 5}]
    >>> reported_ops({"jobs": [job | {"ops": []}]}), reported_ops({"jobs": [{}]})
    ([], None)
    """
    jobs = status["jobs"]
    if len(jobs) != 1:
        raise RuntimeError(f"expected one live job, the dispatcher has {len(jobs)}")
    ops: list[dict[str, Any]] = jobs[0].get("ops", [])
    if not jobs[0].get("workers") or any(op["elements"] <= 0 for op in ops):
        return None
    return ops


def check_ops(label: str, ops: list[dict[str, Any]]) -> None:
    """The "on" job's workers reported per-op statistics, the "off" one's none.

    >>> check_ops("off", [])
    >>> check_ops("on", [])
    Traceback (most recent call last):
    ...
    RuntimeError: on: ZMQDATA_PROFILE_EVERY=16 but the job's workers report ops []
    """
    if bool(ops) != (SETTINGS[label][PROFILE_ENV] != "0"):
        every = SETTINGS[label][PROFILE_ENV]
        raise RuntimeError(
            f"{label}: {PROFILE_ENV}={every} but the job's workers report ops {ops}"
        )


def _check_jobs(targets: dict[str, str], reads: dict[str, zd.Dataset]) -> None:
    """Each read's job reports per-op statistics as its setting says (the
    dispatcher's status, while the job lives: finished jobs leave it)."""
    for label, remote in reads.items():
        profiled = SETTINGS[label][PROFILE_ENV] != "0"
        with iter(remote) as iterator:
            next(iterator)
            deadline = time.monotonic() + STATUS_TIMEOUT_S
            # A profiled job's first reports may come before it timed an op.
            while (ops := reported_ops(service.get_status(targets[label]))) is None or (
                profiled and not ops
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{label}: no per-op report within {STATUS_TIMEOUT_S:.0f} s"
                    )
                time.sleep(0.05)
        check_ops(label, ops)


# ------------------------------------------------------------------ workloads


def _compared(
    bench: Bench,
    deploy: Deploy,
    dataset: zd.Dataset,
    make_pass: Callable[[zd.Dataset], Pass],
    **options: Any,
) -> dict[str, Any]:
    """Interleaved passes of ``dataset`` read from an "on" and an "off"
    deployment, side by side; their figures compared."""
    with ExitStack() as stack:
        targets = {
            label: stack.enter_context(deploy(env)) for label, env in SETTINGS.items()
        }
        reads = {
            label: distributed(dataset, target, **options)
            for label, target in targets.items()
        }
        _check_jobs(targets, reads)
        passes = {label: make_pass(remote) for label, remote in reads.items()}
        return compared(interleaved(passes, bench.repeats))


def images(bench: Bench) -> dict[str, Any]:
    """bench/peers.py's image pipeline from ``zmqdata up`` with 2 workers."""
    if importlib.util.find_spec("PIL") is None:
        return {"skipped": "`import PIL` fails (pip install -e '.[bench]')"}
    pipeline = peers.image_pipeline(512 if bench.quick else 2048)
    figures = _compared(
        bench,
        lambda env: peers.zmqdata_up(peers.WORKERS, env=env),
        pipeline.dataset(),
        lambda remote: image_pass(remote, pipeline),
        processing_mode="distributed_epoch",
    )
    about = (
        f"{pipeline.elements:,} JPEG images, batch {pipeline.batch}, `zmqdata up`"
        f" {peers.WORKERS} workers, distributed_epoch"
    )
    return {"about": about, "unit": "images/s", **figures}


def w1(bench: Bench) -> dict[str, Any]:
    """``range(N)`` int64 scalars from one worker process: elements/s."""
    n = bench.sizes.w1_elements
    figures = _compared(
        bench,
        lambda env: cluster(1, env),
        zd.Dataset.range(n),
        lambda remote: drain_pass(remote, n, n),
    )
    about = f"{n:,} int64 scalars, 1 worker, parallel_epochs"
    return {"about": about, "unit": "el/s", **figures}


MEASURES: dict[str, Callable[[Bench], dict[str, Any]]] = {"images": images, "W1": w1}


def profiling(bench: Bench, workloads: Sequence[str] = WORKLOADS) -> dict[str, Any]:
    """The section: images first (trainer CPU), then W1 (``workloads`` of them)."""
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}, of {WORKLOADS}")
    ran = {name: MEASURES[name](bench) for name in WORKLOADS if name in workloads}
    return {"repeats": bench.repeats, **ran}


# ------------------------------------------------------------------ tables


def _ran(result: dict[str, Any]) -> list[str]:
    return [name for name in WORKLOADS if name in result]


def details(result: dict[str, Any]) -> str:
    """The section's own table: every workload, both settings, with spreads."""
    about = (
        f"Interleaved passes, medians of {result['repeats']} after a warm-up pass"
        " of each setting; two deployments side by side."
    )
    settings = (f"{PROFILE_ENV}=16", f"{PROFILE_ENV}=0")
    table = comparison_table(result, _ran(result), settings, TARGET_OVERHEAD)
    return f"{about}\n\n{table}"


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: profiling on against off, per workload."""
    return comparison_rows(
        result,
        _ran(result),
        "per-op profiling",
        f"{PROFILE_ENV}=0",
        TARGET_OVERHEAD,
    )


if __name__ == "__main__":
    section_main(__doc__, profiling, details, WORKLOADS)
