"""Tables from a run's results: per-section details and the final markdown table.

Not a script; ``python bench/run.py`` prints both. tf.data figures come from
bench/anchors.py (ANCHORS.md constants) and are labelled so; every other
figure is measured in the run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from bench import (
    control,
    exactly_once,
    formats,
    hosts,
    inline_snapshots,
    jax_steps,
    multirank,
    packing,
    peers,
    profiling,
    snapshots,
)
from bench.anchors import (
    MEMORY_CONSTANT_MIB,
    MIB,
    TARGET_W1_VS_TF,
    TARGET_W3_VS_RAW,
    TARGET_W3_VS_TF,
    TARGET_W4_SPEEDUP,
    TARGET_W5_END_MS,
    TARGET_W6_VS_TF,
    TF_W1_EL_S,
    TF_W2_BATCHES_S,
    TF_W3_MB_S,
    TF_W4_SPEEDUP,
    TF_W5_END_MS,
    TF_W5_FIRST_MS,
    TF_W6_EL_S,
)
from bench.common import format_bytes, number, times

Row = tuple[str, ...]
NONE = "—"
HEADER: Row = (
    "workload",
    "zmqdata",
    "baseline, same run",
    "ratio",
    "tf.data service (ANCHORS, TF 2.21, not measured here)",
    "ratio to tf.data",
    "target met?",
)


def markdown(header: Row, rows: Sequence[Row]) -> str:
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def mark(ok: bool) -> str:
    return "✔" if ok else "✘"


def overhead_row(
    label: str, rate: str, baseline: str, ratio: float, overhead: float, target: float
) -> Row:
    """A final-table row for a feature's cost against its baseline, same run."""
    return (
        label,
        rate,
        baseline,
        f"{ratio:.3f}x ({overhead:+.1%} lost)",
        NONE,
        NONE,
        f"< {target:.0%} lost {mark(overhead < target)}",
    )


# ------------------------------------------------------------------ final table


def _w1(r: dict[str, Any]) -> list[Row]:
    z, local, raw = r["zmqdata_el_s"], r["local_el_s"], r["raw_8B_msgs_s"]
    vs_tf = z / TF_W1_EL_S
    return [
        (
            f"W1 {r['elements']:,} int64 scalars, 1 worker",
            f"{number(z)} el/s",
            (
                f"local pipeline {number(local)} el/s; raw pyzmq 8 B PUSH/PULL "
                f"{number(raw)} msg/s"
            ),
            f"{times(z / local)} local, {times(z / raw)} raw",
            f"{TF_W1_EL_S:,} el/s",
            f"{vs_tf:.1f}x",
            f"≥ {TARGET_W1_VS_TF:.0f}x {mark(vs_tf >= TARGET_W1_VS_TF)}",
        )
    ]


def _w2(r: dict[str, Any]) -> list[Row]:
    z, local, raw = r["zmqdata_batches_s"], r["local_batches_s"], r["raw_msgs_s"]
    return [
        (
            f"W2 range({r['elements']:,}).batch({r['batch']})",
            f"{number(z)} batches/s",
            (
                f"local pipeline {number(local)} batches/s; raw pyzmq "
                f"{format_bytes(r['raw_message_bytes'])} PUSH/PULL {number(raw)} msg/s"
            ),
            f"{times(z / local)} local, {times(z / raw)} raw",
            f"{TF_W2_BATCHES_S:,} batches/s",
            times(z / TF_W2_BATCHES_S),
            NONE,
        )
    ]


def _w3(r: dict[str, Any]) -> list[Row]:
    rows = []
    for case in r["cases"].values():
        size, compression = case["size"], case["compression"]
        path = case.get("path", "tcp")
        z, raw, memcpy = case["zmqdata_mb_s"], case["raw_mb_s"], case["memcpy_mb_s"]
        shipped = path == "tcp" and not case.get("made")  # as tf.data measured it
        tf = TF_W3_MB_S.get((size, compression)) if shipped else None
        target = NONE
        if (size, compression, path) == (4 * MIB, None, "tcp") and tf:
            target = (
                f"≥ {TARGET_W3_VS_TF:.0f}x tf.data {mark(z / tf >= TARGET_W3_VS_TF)}, "
                f"≥ {TARGET_W3_VS_RAW:.0%} raw {mark(z / raw >= TARGET_W3_VS_RAW)}"
            )
        if (size, compression, path) == (64 * MIB, None, "tcp"):
            target = f"≥ 90% raw {mark(z / raw >= 0.9)}"
        over = "tcp" if path == "tcp" else "same-host shared memory"
        if case.get("made"):
            over += ", made on the worker (not shipped in the pipeline)"
        rows.append(
            (
                f"W3 {format_bytes(size)} float32 noise, {compression=}, {over}",
                f"{number(z)} MB/s",
                (
                    f"raw pyzmq tcp zero-copy {number(raw)} MB/s; memcpy "
                    f"{number(memcpy)} MB/s"
                ),
                f"{z / raw:.0%} of raw",
                f"{tf:,} MB/s" if tf else NONE,
                times(z / tf) if tf else NONE,
                target,
            )
        )
    return rows


def _w4(r: dict[str, Any]) -> list[Row]:
    one, two = r["workers_el_s"]["1"], r["workers_el_s"]["2"]
    speedup, cpu = r["speedup"], r["cpu_ms_per_element"]
    return [
        (
            f"W4 {cpu:.1f} ms CPU/element, 1 worker",
            f"{number(one)} el/s",
            f"local pipeline {number(r['local_el_s'])} el/s",
            f"{times(one / r['local_el_s'])} local",
            NONE,
            NONE,
            NONE,
        ),
        (
            f"W4 {cpu:.1f} ms CPU/element, 2 workers vs 1",
            f"{number(two)} el/s",
            f"1 worker {number(one)} el/s",
            times(speedup),
            f"{TF_W4_SPEEDUP}x",
            times(speedup / TF_W4_SPEEDUP),
            f"≥ {TARGET_W4_SPEEDUP}x {mark(speedup >= TARGET_W4_SPEEDUP)}",
        ),
    ]


def _w5(r: dict[str, Any]) -> list[Row]:
    first, end, trip = r["first_ms"], r["end_ms"], r["round_trip_us"]
    baseline = f"DEALER/ROUTER round trip {trip:.0f} µs"
    return [
        (
            "W5 range(10): iterator → first element",
            f"{first:.1f} ms",
            baseline,
            f"{first * 1000 / trip:.0f} round trips",
            f"{TF_W5_FIRST_MS} ms",
            f"{TF_W5_FIRST_MS / first:.1f}x faster",
            NONE,
        ),
        (
            "W5 range(10): iterator → end of input",
            f"{end:.1f} ms",
            baseline,
            f"{end * 1000 / trip:.0f} round trips",
            f"{TF_W5_END_MS:,} ms",
            f"{TF_W5_END_MS / end:.0f}x faster",
            f"≤ {TARGET_W5_END_MS:.0f} ms {mark(end <= TARGET_W5_END_MS)}",
        ),
    ]


def _w6(r: dict[str, Any]) -> list[Row]:
    z, raw = r["zmqdata_el_s"], r["raw_8B_msgs_s"]
    vs_tf = z / TF_W6_EL_S
    return [
        (
            f"W6 coordinated reads, {r['consumers']} consumers, 1 worker",
            f"{number(z)} el/s",
            f"raw pyzmq 8 B PUSH/PULL {number(raw)} msg/s",
            f"{times(z / raw)} raw",
            f"{TF_W6_EL_S:,} el/s",
            f"{vs_tf:.1f}x",
            f"≥ {TARGET_W6_VS_TF:.0f}x {mark(vs_tf >= TARGET_W6_VS_TF)}",
        )
    ]


def _scaling(r: dict[str, Any]) -> list[Row]:
    rates = r["workers_el_s"]
    most = max(rates, key=int)
    return [
        (
            f"CPU-bound pipeline, {most} workers vs 1 ({os.cpu_count()} cores)",
            f"{number(rates[most])} el/s",
            f"1 worker {number(rates['1'])} el/s",
            times(r["speedup"][most]),
            NONE,
            NONE,
            NONE,
        )
    ]


def _memory(r: dict[str, Any]) -> list[Row]:
    size = format_bytes(r["size"])
    return [
        (
            (
                f"consumer memory, {size} elements, "
                f"max_outstanding_requests={p['max_outstanding_requests']}"
            ),
            f"{p['peak_growth_mib']:.0f} MiB peak RSS growth",
            f"element size x requests = {p['window_mib']:.0f} MiB",
            times(p["peak_growth_mib"] / p["window_mib"]),
            NONE,
            NONE,
            (
                f"≤ {p['window_mib']:.0f} + {MEMORY_CONSTANT_MIB} MiB "
                f"{mark(p['peak_growth_mib'] <= p['allowed_mib'])}"
            ),
        )
        for p in r["points"]
    ]


def _row(workload: str, value: str, baseline: str, ratio: str, target: str) -> Row:
    """A row of a section with no tf.data anchor."""
    return (workload, value, baseline, ratio, NONE, NONE, target)


def _shm(r: dict[str, Any]) -> list[Row]:
    shared, tcp = r["shm"], r["tcp"]
    return [
        _row(
            "same host, 9.6 MB batches: trainer CPU s per 1,000, shared memory vs tcp",
            f"{shared['cpu_s_per_1k']:.4f} s ({number(shared['el_s'])} el/s)",
            f"{tcp['cpu_s_per_1k']:.4f} s ({number(tcp['el_s'])} el/s)",
            times(shared["cpu_s_per_1k"] / tcp["cpu_s_per_1k"]),
            NONE,
        )
    ]


def _threads(r: dict[str, Any]) -> list[Row]:
    unlimited = r["none"]
    return [
        _row(
            f"numpy map ({r['matmuls']} matmuls/element): 2 workers vs 1, {started}",
            f"{number(row['2'])} el/s",
            f"1 worker {number(row['1'])} el/s; pools unlimited: 2 workers "
            f"{number(unlimited['2'])}, 1 worker {number(unlimited['1'])}",
            times(row["speedup"]),
            f"≥ 1.8x {mark(row['speedup'] >= 1.8)}",
        )
        for started, row in (
            ("`zmqdata worker`", r["auto"]),
            ("WorkerServer(...).join()", r["api"]),
        )
    ]


def _link(r: dict[str, Any]) -> list[Row]:
    rows = []
    for name, case in r.items():
        ratio = case["auto_over_none"]
        fast = name == "loopback"
        target = f"≥ 0.95x {mark(ratio >= 0.95)}" if fast else f"> 1x {mark(ratio > 1)}"
        rows.append(
            _row(
                f"compression AUTO vs None, {'tcp loopback' if fast else 'slow veth'}",
                f"{number(case['auto_el_s'])} el/s",
                f"None {number(case['none_el_s'])} el/s",
                times(ratio),
                target,
            )
        )
    return rows


def _journal(r: dict[str, Any]) -> list[Row]:
    many, one = r["concurrent"], r["sequential"]
    return [
        _row(
            f"fault-tolerant splits, fsync before reply, {many['requesters']} requesters",
            f"{number(many['splits_per_s'])} splits/s "
            f"({number(many['commits_per_s'])} fsyncs/s, p99 {many['p99_ms']:.1f} ms)",
            f"1 requester {number(one['splits_per_s'])} splits/s",
            NONE,
            f"≥ 20,000/s {mark(many['splits_per_s'] >= 20_000)}",
        )
    ]


ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "W1": _w1,
    "W2": _w2,
    "W3": _w3,
    "W4": _w4,
    "W5": _w5,
    "W6": _w6,
    "scaling": _scaling,
    "memory": _memory,
    "images": lambda r: peers.rows("images", r),
    "text": lambda r: peers.rows("text", r),
    "packing": packing.rows,
    "jax_steps": jax_steps.rows,
    "shm": _shm,
    "threads": _threads,
    "link": _link,
    "hosts": hosts.rows,
    "control": control.rows,
    "journal": _journal,
    "exactly_once": exactly_once.rows,
    "profiling": profiling.rows,
    "multirank": multirank.rows,
    "formats": formats.rows,
    "snapshots": snapshots.rows,
    "inline_snapshots": inline_snapshots.rows,
}


def rows(results: dict[str, Any]) -> list[Row]:
    """The final table's rows, one or more per section that ran."""
    return [
        row
        for name, rows_of in ROWS.items()
        if name in results
        for row in rows_of(results[name])
    ]


def table(results: dict[str, Any]) -> str:
    return markdown(HEADER, rows(results))


# ------------------------------------------------------------------ details


def _workers_detail(r: dict[str, Any]) -> str:
    cores = os.cpu_count() or 1
    rows = [
        (
            n,
            f"{number(rate)} el/s",
            times(r["speedup"][n]),
            f"{min(int(n), cores)}x",
        )
        for n, rate in r["workers_el_s"].items()
    ]
    header = ("workers", "throughput", "speedup vs 1", f"ideal on {cores} cores")
    return markdown(header, rows)


def _cpu_detail(r: dict[str, Any]) -> str:
    rows = [
        (
            "int64 scalar" if p["size"] <= 8 else f"float32 {format_bytes(p['size'])}",
            f"{p['count']:,}",
            f"{p['cpu_us_per_element']:.2f}",
            f"{p['cpu_ns_per_byte']:.3f}",
            f"{number(p['el_s'])} el/s",
        )
        for p in r["points"]
    ]
    header = ("element", "elements", "CPU µs/element", "CPU ns/byte", "read rate")
    return markdown(header, rows)


def _memory_detail(r: dict[str, Any]) -> str:
    rows = [
        (
            str(p["max_outstanding_requests"]),
            f"{p['peak_growth_mib']:.1f} MiB",
            f"{p['window_mib']:.0f} MiB",
            f"{p['allowed_mib']:.0f} MiB",
            "/".join(f"{s:.1f}" for s in p["peak_growth_mib"].samples),
        )
        for p in r["points"]
    ]
    header = (
        "max_outstanding_requests",
        "peak RSS growth",
        "element size x requests",
        "allowed (+ constant)",
        "samples (MiB)",
    )
    return markdown(header, rows)


def _sweep_detail(r: dict[str, Any]) -> str:
    rows = [
        (
            format_bytes(p["size"]),
            f"{p['count']:,}",
            f"{number(p['zmqdata_mb_s'])} MB/s",
            f"{number(p['raw_mb_s'])} MB/s",
            f"{p['zmqdata_mb_s'] / p['raw_mb_s']:.0%}",
        )
        for p in r["points"]
    ]
    header = ("element", "elements/pass", "zmqdata (None)", "raw pyzmq", "of raw")
    return markdown(header, rows)


DETAILS: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "scaling": ("CPU-bound pipeline (W4's) against worker processes", _workers_detail),
    "cpu": (
        "Consumer-process CPU per element (compression=None, same-host defaults)",
        _cpu_detail,
    ),
    "memory": (
        "Consumer-process peak RSS growth, 4 MiB elements, over tcp",
        _memory_detail,
    ),
    "sweep": ("Throughput against element size, one worker", _sweep_detail),
    "images": ("Images: JPEG decode and augment against the peers", peers.details),
    "text": ("Text: tokenize and pack against the peers", peers.details),
    "packing": ("Text: packing against grain and torch", packing.details),
    "jax_steps": ("JAX: steps/s against grain", jax_steps.details),
    "exactly_once": ("Exactly once on against off", exactly_once.details),
    "profiling": ("Per-op profiling on the workers, on against off", profiling.details),
    "multirank": (
        "Multi-rank reads: dealt against first come, first served",
        multirank.details,
    ),
    "formats": ("Reading Parquet and WebDataset shards", formats.details),
    "snapshots": (
        "Preprocess once: load against recompute and numpy.load",
        snapshots.details,
    ),
    "inline_snapshots": (
        "Preprocess once, inline: snapshot(path) before distribute",
        inline_snapshots.details,
    ),
    "hosts": ("Throughput against worker hosts (network namespaces)", hosts.details),
}


def details(results: dict[str, Any]) -> str:
    """The scaling sections' own tables, for the sections that ran."""
    parts = [
        f"### {title}\n\n{render(results[name])}"
        for name, (title, render) in DETAILS.items()
        if name in results
    ]
    return "\n\n".join(parts)


# ------------------------------------------------------------------ headlines


def headlines(results: dict[str, Any]) -> dict[str, float]:
    """One figure per workload, keyed as bench/tfdata.py keys tf.data's."""
    out: dict[str, float] = {}
    if "W1" in results:
        out["W1 el/s"] = results["W1"]["zmqdata_el_s"]
    if "W2" in results:
        out["W2 batches/s"] = results["W2"]["zmqdata_batches_s"]
    for case in results.get("W3", {}).get("cases", {}).values():
        path = "" if case.get("path", "tcp") == "tcp" else " shm"
        made = " made" if case.get("made") else ""
        key = f"W3 {format_bytes(case['size'])} {case['compression']}{path}{made} MB/s"
        out[key] = case["zmqdata_mb_s"]
    if "W4" in results:
        for workers, rate in results["W4"]["workers_el_s"].items():
            out[f"W4 {workers} worker(s) el/s"] = rate
        out["W4 speedup"] = results["W4"]["speedup"]
    if "W5" in results:
        out["W5 first ms"] = results["W5"]["first_ms"]
        out["W5 end ms"] = results["W5"]["end_ms"]
    if "W6" in results:
        out["W6 el/s"] = results["W6"]["zmqdata_el_s"]
    return out


LOWER_IS_BETTER = frozenset({"W5 first ms", "W5 end ms"})
