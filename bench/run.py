"""``make bench``: the anchor workloads W1-W6 and the scaling sections, one table.

    python bench/run.py --quick              # every section, tiny sizes (< 1 min)
    python bench/run.py                      # anchor sizes (see docs/performance.md)
    python bench/run.py --only W3,W5 --repeats 3
    python bench/run.py --w2-elements 2000000

Sections: W1-W6 (bench/workloads.py), scaling, cpu, memory, sweep
(bench/scaling.py), images and text against torch DataLoader, Ray Data and one
local process (bench/peers.py), packing (text packed first fit into rows of
512 against grain's packer and torch DataLoader: bench/packing.py),
jax_steps (steps/s of a small JAX model fed by zmqdata.jax against grain:
bench/jax_steps.py),
exactly_once (its cost: bench/exactly_once.py), profiling (what per-op
profiling on the workers costs: bench/profiling.py),
multirank (dealt multi-rank reads against first come, first served, and
save/merge/restore latency: bench/multirank.py), formats (Parquet and
WebDataset readers against pyarrow, webdataset and Ray Data: bench/formats.py),
snapshots (the images saved once with distributed_save, then Dataset.load
against recomputing and against numpy.load: bench/snapshots.py),
inline_snapshots (snapshot(path) before distribute: epoch 1 writing it against no
snapshot, later epochs and jobs reading it: bench/inline_snapshots.py),
hosts (throughput against 1-4 worker hosts over tc-limited links, network
namespaces, root: bench/hosts.py).
Each figure is the median of ``--repeats`` runs after a warm-up, next to
baselines measured in the same run; tf.data service figures are ANCHORS.md
constants (bench/anchors.py), labelled as such. Progress goes to stderr; stdout
gets the sections' tables, then one markdown table to paste into
docs/performance.md. Every figure, with its samples, goes to
``--out`` (JSON); plots go to ``--plots`` (PNG, needs matplotlib). To profile a section:
``py-spy record -o w3.svg --subprocesses -- python bench/run.py --only W3``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import zmq

import zmqdata as zd
from bench import (
    control,
    exactly_once,
    formats,
    hosts,
    inline_snapshots,
    jax_steps,
    link,
    multirank,
    packing,
    peers,
    plots,
    profiling,
    report,
    scaling,
    shm,
    snapshots,
    threads,
    workloads,
)
from bench.common import ROOT, Bench, Stat, busy_cores, sizes_for

SECTIONS: dict[str, Callable[[Bench], dict[str, Any]]] = {
    # First: they count this process's CPU, before the shared cluster's
    # in-process dispatcher starts (bench/common.py: Bench.target).
    "images": peers.images,
    "text": peers.text,
    "packing": packing.packing,  # text packed first fit, against grain and torch
    "jax_steps": jax_steps.jax_steps,  # a JAX model fed by zmqdata and by grain
    "exactly_once": exactly_once.exactly_once,  # its images part counts CPU too
    "profiling": profiling.profiling,  # likewise; its own deployments, on and off
    "W1": workloads.w1_tiny_scalars,
    "W2": workloads.w2_batched_ints,
    "W3": workloads.w3_big_tensors,
    "W4": workloads.w4_cpu_heavy,
    "W5": workloads.w5_latency,
    "W6": workloads.w6_coordinated,
    "scaling": scaling.workers,
    "cpu": scaling.client_cpu,
    "memory": scaling.client_memory,
    "sweep": scaling.size_sweep,
    "shm": shm.shared_memory,
    "threads": threads.numpy_workers,
    "link": link.link,
    "hosts": hosts.hosts,  # namespaces: a trainer host and 1-4 worker hosts
    "control": control.control,
    "journal": control.journal,
    "multirank": multirank.multirank,  # its own 2-worker cluster, rank processes
    "formats": formats.formats,  # its own 1- and 2-worker clusters, Ray
    "snapshots": snapshots.snapshots,  # its own deployment: saves, load, numpy.load
    "inline_snapshots": inline_snapshots.inline_snapshots,  # its own deployment
}
DEFAULT_OUT = Path(ROOT, "bench", "results", "latest.json")
DOCS_IMG = Path(ROOT, "docs", "img")


def add_size_flags(parser: argparse.ArgumentParser, sections: Sequence[str]) -> None:
    """The flags bench/run.py and bench/compare.py share."""
    parser.add_argument(
        "--quick", action="store_true", help="shrink every workload (< 1 min)"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs per figure (5; quick: 2)"
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(sections),
        help=f"comma-separated sections, of {','.join(sections)}",
    )
    parser.add_argument(
        "--w2-elements", type=int, default=None, help="W2's N (20,000,000)"
    )


def check_sections(
    parser: argparse.ArgumentParser, args: argparse.Namespace, sections: Sequence[str]
) -> argparse.Namespace:
    unknown = [name for name in args.only if name not in sections]
    if unknown:
        parser.error(f"unknown sections {unknown}; choose from {list(sections)}")
    return args


def make_bench(args: argparse.Namespace) -> Bench:
    sizes = sizes_for(args.quick, args.w2_elements)
    return Bench(sizes, args.repeats or (2 if args.quick else 5), args.quick)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_size_flags(parser, list(SECTIONS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results JSON")
    parser.add_argument(
        "--plots",
        type=Path,
        default=None,
        help="PNG folder (docs/img; with --quick, the folder of --out)",
    )
    return check_sections(parser, parser.parse_args(argv), list(SECTIONS))


def run_sections(bench: Bench, names: Sequence[str]) -> dict[str, Any]:
    """Runs the named sections in ``SECTIONS`` order; their results by name."""
    results = {}
    for name in [name for name in SECTIONS if name in names]:
        start = time.perf_counter()
        print(f"{name} ...", end=" ", file=sys.stderr, flush=True)
        results[name] = SECTIONS[name](bench)
        print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return results


def jsonable(value: Any) -> Any:
    """Results as JSON: a ``Stat`` becomes its median and samples."""
    if isinstance(value, Stat):
        return {"median": float(value), "samples": list(value.samples)}
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def environment(bench: Bench, argv: Sequence[str] | None) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": list(sys.argv[1:] if argv is None else argv),
        "quick": bench.quick,
        "repeats": bench.repeats,
        "sizes": asdict(bench.sizes),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "busy_cores_before": round(busy_cores(), 2),
        "python": platform.python_version(),
        "zmqdata": zd.__version__,
        "pyzmq": zmq.__version__,
        "libzmq": zmq.zmq_version(),
        "numpy": np.__version__,
        "tf_data_figures": "constants from shared/ANCHORS.md (TF 2.21.0)",
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    bench = make_bench(args)
    print(
        f"zmqdata {zd.__version__}, {os.cpu_count()} cores, repeats {bench.repeats}"
        f"{', QUICK sizes' if args.quick else ''}; sections {','.join(args.only)}",
        file=sys.stderr,
    )
    start = time.perf_counter()
    env = environment(bench, argv)
    if env["busy_cores_before"] > 0.3:
        print(
            f"WARNING: other processes kept {env['busy_cores_before']:.1f} cores busy"
            " before the run: its figures will be low and noisy",
            file=sys.stderr,
        )
    try:
        results = run_sections(bench, args.only)
    finally:
        bench.close()
    env["seconds"] = round(time.perf_counter() - start, 1)
    env["busy_cores_after"] = round(busy_cores(), 2)  # our processes are gone
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table = [dict(zip(report.HEADER, row, strict=True)) for row in report.rows(results)]
    document = {"environment": env, "results": results, "table": table}
    args.out.write_text(json.dumps(jsonable(document), indent=1, ensure_ascii=False))
    label = f"{env['date'][:10]}, {os.cpu_count()} cores, median of {bench.repeats}"
    label += ", QUICK sizes" if args.quick else ""
    other_load = max(env["busy_cores_before"], env["busy_cores_after"])
    if other_load > 0.3:
        label += f", other load up to {other_load:.1f} cores"
    plot_dir = args.plots or (args.out.parent if args.quick else DOCS_IMG)
    written = plots.write(results, plot_dir, label)
    details = report.details(results)
    if details:
        print(details, end="\n\n")
    print(f"## zmqdata benchmarks ({label}; {env['seconds']} s)\n")
    print(report.table(results), flush=True)
    lines = [f"results: {args.out}", *(f"plot: {path}" for path in written)]
    print(*lines, sep="\n", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
