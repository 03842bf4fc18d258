"""PNG plots of a run: throughput against element size, scaling against workers.

Not a script; ``python bench/run.py`` writes them (to docs/img/ for a full
run). matplotlib is imported lazily: without it the run prints a note and
skips the plots (``pip install -e '.[bench]'`` installs it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.common import format_bytes, number

SIZES_PNG = "bench_throughput_vs_size.png"
SCALING_PNG = "bench_scaling_workers.png"
PIPELINES_PNG = "bench_pipelines.png"
HOSTS_PNG = "bench_hosts_scaling.png"
CONTROL_PNG = "bench_control_curve.png"
PIPELINES = ("images", "text")
SHORT_LABELS = {
    "local": "local\nprocess",
    "torch": "torch\nDataLoader",
    "zmqdata": "zmqdata\ndefaults",
    "zmqdata_none": "zmqdata\ncompression=None",
    "ray": "Ray Data",
    "grain": "grain",
    "spdl": "SPDL\nthreads",
    "spdl_processes": "SPDL\nprocesses",
}


def write(results: dict[str, Any], directory: Path, label: str) -> list[Path]:
    """The plots whose sections ran, in ``directory``; their paths."""
    wanted = [
        name
        for name in ("sweep", "scaling", "hosts", "control", *PIPELINES)
        if name in results
    ]
    if not wanted:
        return []
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            "note: matplotlib is not installed, so no plots (pip install -e .[bench])"
        )
        return []
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    if "sweep" in results:
        paths.append(_sizes(plt, results["sweep"], directory / SIZES_PNG, label))
    if "scaling" in results:
        paths.append(_scaling(plt, results["scaling"], directory / SCALING_PNG, label))
    if "cases" in results.get("hosts", {}):
        paths.append(_hosts(plt, results["hosts"], directory / HOSTS_PNG, label))
    if "curve" in results.get("control", {}):
        curve = results["control"]["curve"]
        paths.append(_control(plt, curve, directory / CONTROL_PNG, label))
    ran = {
        name: results[name]
        for name in PIPELINES
        if name in results and "systems" in results[name]
    }
    if ran:
        paths.append(_pipelines(plt, ran, directory / PIPELINES_PNG, label))
    return paths


def _sizes(plt: Any, sweep: dict[str, Any], path: Path, label: str) -> Path:
    points = sweep["points"]
    sizes = [p["size"] for p in points]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(sizes, [p["zmqdata_mb_s"] for p in points], "o-", label="zmqdata")
    ax.plot(
        sizes,
        [p["raw_mb_s"] for p in points],
        "s--",
        label="raw pyzmq PUSH/PULL (same run)",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes, [format_bytes(size) for size in sizes], rotation=30)
    ax.set_xlabel("element size (float32 tensor, compression=None)")
    ax.set_ylabel("MB/s, median")
    ax.set_title(
        f"Throughput against element size, 1 worker process\n{label}", fontsize=10
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _scaling(plt: Any, scaling: dict[str, Any], path: Path, label: str) -> Path:
    rates = scaling["workers_el_s"]
    workers = sorted(int(n) for n in rates)
    measured = [rates[str(n)] for n in workers]
    cores = os.cpu_count() or 1
    ideal = [rates[str(workers[0])] * min(n, cores) / workers[0] for n in workers]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(workers, measured, "o-", label="zmqdata, distributed_epoch")
    ax.plot(workers, ideal, ":", color="gray", label=f"linear up to {cores} cores")
    for n, rate in zip(workers, measured, strict=True):
        speedup = scaling["speedup"][str(n)]
        ax.annotate(
            f"{speedup:.2f}x", (n, rate), xytext=(4, -12), textcoords="offset points"
        )
    ax.set_xticks(workers)
    ax.set_xlabel("worker processes")
    ax.set_ylabel("elements/s, median")
    cpu = scaling["cpu_ms_per_element"]
    ax.set_title(f"CPU-bound pipeline ({cpu:.1f} ms CPU/element)\n{label}", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _hosts(plt: Any, hosts: dict[str, Any], path: Path, label: str) -> Path:
    """Throughput against worker hosts: link-bound passes (MB/s, with the
    bound the links set) and the CPU-bound pass (el/s); whiskers span the passes."""
    from bench.hosts import mbit

    plan, cases = hosts["plan"], hosts["cases"].values()
    fig, (link_ax, cpu_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    ks = sorted({int(k) for case in cases for k in case["k"]})
    bound = [min(k * mbit(plan["worker_rate"]), mbit(plan["trainer_rate"])) for k in ks]
    link_ax.plot(ks, bound, ":", color="gray", label="the links' bound (tc rates)")
    for case in cases:
        ax = link_ax if case["pipeline"] == "link" else cpu_ax
        points = sorted((int(k), r["rate"]) for k, r in case["k"].items())
        rates = [rate for _, rate in points]
        spans = [
            [float(rate) - min(rate.samples) for rate in rates],
            [max(rate.samples) - float(rate) for rate in rates],
        ]
        what = f"{case['length']} pass, " if case["pipeline"] == "link" else ""
        ax.errorbar(
            [k for k, _ in points],
            [float(rate) for rate in rates],
            yerr=spans,
            marker="o" if case["compression"] is None else "s",
            linestyle="-" if case["length"] != "short" else "--",
            capsize=3,
            label=f"{what}compression={case['compression']}",
        )
    link_ax.set_title(
        f"Link-bound: 256 KiB incompressible elements\nworker links "
        f"{plan['worker_rate']}, trainer link {plan['trainer_rate']} (tc tbf)",
        fontsize=10,
    )
    link_ax.set_ylabel("MB/s of elements, median")
    cpu_ax.set_title(
        f"CPU-bound: {plan['cpu_ms']:.0f} ms of CPU per element\n"
        f"every host shares this machine's {os.cpu_count()} cores",
        fontsize=10,
    )
    cpu_ax.set_ylabel("elements/s, median")
    for ax in (link_ax, cpu_ax):
        ax.set_xticks(ks)
        ax.set_xlabel("worker hosts (network namespaces), distributed_epoch")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"Throughput against worker hosts\n{label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _control(plt: Any, curve: list[dict[str, Any]], path: Path, label: str) -> Path:
    """p99 round trips and the dispatcher's CPU against fleet size; a saturated
    size's latencies (queues, not the dispatcher's speed) get no marker."""
    peers = [size["peers"] for size in curve]
    fig, (lat_ax, cpu_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind, what in (
        ("consumer", "consumer heartbeat"),
        ("worker", "worker heartbeat"),
        ("split", "GetSplit"),
    ):
        p99 = [float(size[f"{kind}_p99_ms"]) for size in curve]
        [line] = lat_ax.plot(peers, p99, "-", alpha=0.4)
        ok = [
            not (size["windows_saturated"] or size["windows_behind"]) for size in curve
        ]
        lat_ax.plot(
            [n for n, good in zip(peers, ok, strict=True) if good],
            [v for v, good in zip(p99, ok, strict=True) if good],
            "o",
            color=line.get_color(),
            label=what,
        )
    lat_ax.axhline(20, linestyle=":", color="gray", label="target p99 20 ms")
    lat_ax.set_yscale("log")
    lat_ax.set_ylabel("p99 round trip, ms (no marker: saturated)")
    lat_ax.set_title("Latency, median of the windows", fontsize=10)
    cpu_ax.plot(
        peers, [float(s["dispatcher_cpu"]) for s in curve], "o-", label="dispatcher"
    )
    cpu_ax.plot(
        peers,
        [s["floor"]["cpu"] for s in curve],
        "s--",
        label="no-op ZeroMQ server, same rate",
    )
    cpu_ax.axhline(1.0, linestyle=":", color="gray", label="one core")
    cpu_ax.set_ylabel("CPU s per s")
    cpu_ax.set_title("The dispatcher's CPU (pinned to one core)", fontsize=10)
    for ax in (lat_ax, cpu_ax):
        ax.set_xscale("log")
        ax.set_xlabel("fake workers (and as many fake consumers)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"The control plane against fleet size\n{label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pipelines(plt: Any, ran: dict[str, Any], path: Path, label: str) -> Path:
    """Bars per system: elements/s (top) and trainer CPU per 1,000 (bottom),
    one column per pipeline; whiskers span the samples."""
    bars = max(len(result["systems"]) for result in ran.values())
    width = max(6.5, 1.15 * bars)  # room for each bar's two-line label
    fig, axes = plt.subplots(
        2, len(ran), figsize=(width * len(ran), 7), squeeze=False, sharex="col"
    )
    for column, (name, result) in enumerate(ran.items()):
        systems = {k: v for k, v in result["systems"].items() if "el_s" in v}
        names, unit = list(systems), result["unit"]
        colors = ["tab:blue" if n.startswith("zmqdata") else "tab:gray" for n in names]
        for row, (key, ylabel, text) in enumerate(
            (
                ("el_s", f"{unit}/s", number),
                ("cpu_s_per_1k", f"trainer CPU s / 1,000 {unit}", "{:.3f}".format),
            )
        ):
            ax = axes[row][column]
            stats = [systems[n][key] for n in names]
            medians = [float(stat) for stat in stats]
            spans = [
                [float(stat) - min(stat.samples) for stat in stats],
                [max(stat.samples) - float(stat) for stat in stats],
            ]
            ticks = [SHORT_LABELS.get(n, n) for n in names]
            bars = ax.bar(ticks, medians, yerr=spans, color=colors, capsize=3)
            ax.bar_label(bars, [text(m) for m in medians], fontsize=8)
            ax.set_ylabel(ylabel + ", median")
            ax.grid(True, axis="y", alpha=0.3)
        axes[0][column].set_title(
            f"{name}: {result['elements']:,} {unit}/epoch, batch {result['batch']},"
            f" {result['workers']} workers, median of {result['repeats']}",
            fontsize=10,
        )
    fig.suptitle(f"Real pipelines against the peers\n{label}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
