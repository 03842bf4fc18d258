"""The control plane at scale: fake fleets of 100 to 10,000 workers and as many
consumers on one real dispatcher, a real trainer reading meanwhile.

    python bench/control.py                    # the curve: 100, 1,000, 3,000, 10,000
    python bench/control.py --peers 10000      # one size
    python bench/control.py --quick            # 100, short windows
    python bench/control.py --only journal     # group commit (bench/journal.py)

Section ``control``: for each fleet size, a real dispatcher (``zmqdata
dispatcher --config``, its own process, pinned to CPU 0) and fake peers from
``--drivers`` driver processes pinned to CPU 1 (``bench/fleet.py``). Each
window reports, per request kind, the offered and served rates and the p50/p99
round trip, the dispatcher's CPU seconds per wall second, and the drivers'
own lag; a window whose drivers fell behind their schedule shows no latency.

A real trainer (its own process, 2 workers in it) reads a
``distributed_epoch`` job through the same dispatcher, taking a 5 ms step per
batch of 64: its steps/s without the fleet (measured first) and with it, in
windows of its own between the fleet's (its process would take the
dispatcher's core at times). A trainer without steps would take every cycle
the cores have left, and time the cores, not the dispatcher.

``state_costs(peers)`` (``bench/state_costs.py``): microseconds per request in
the dispatcher's state alone (no sockets), reported with each size.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zmqdata as zd
from bench import journal as journal_section
from bench.common import Bench, Stat, sizes_for, subprocess_env
from bench.daemon import cpu_seconds, dispatcher_process, pin, raise_fd_limit
from bench.fleet import FAKE_RANGE, LINKS, Fleet, Window
from bench.floor import floor
from bench.state_costs import state_costs
from zmqdata import service

DISPATCHER_CPU = 0
DRIVER_CPU = 1


@dataclass(frozen=True)
class ControlSizes:
    curve: tuple[int, ...] = (100, 1_000, 3_000, 6_000, 10_000)
    """Fleet sizes: fake workers, and as many fake consumers."""
    drivers: int = 1
    window_s: float = 10.0
    split_interval_s: float = 1.0
    requesters: int = 64
    journal_window_s: float = 5.0


QUICK = ControlSizes(curve=(100,), window_s=3.0, journal_window_s=2.0)


# ------------------------------------------------------------------ drivers


def _drive(
    target: str, indexes: range, dataset_id: str, sizes: ControlSizes, conn: Any
) -> None:
    """A driver process: set up, then one window per ``"go"`` from the parent."""
    pin(DRIVER_CPU)
    raise_fd_limit()
    fleet = Fleet(target, indexes, dataset_id, sizes.split_interval_s)
    try:
        fleet.setup()
        conn.send("ready")
        while conn.recv() == "go":
            conn.send(fleet.window(sizes.window_s))
    except BaseException as error:
        conn.send(error)
        raise
    finally:
        fleet.close()


def _expect(conn: Any, what: str | None = None) -> Any:
    got = conn.recv()
    if isinstance(got, BaseException):
        raise RuntimeError(f"a driver failed: {got!r}")
    if what is not None and got != what:
        raise RuntimeError(f"a driver said {got!r}")
    return got


@contextmanager
def drivers(
    target: str, peers: int, dataset_id: str, sizes: ControlSizes
) -> Iterator[list[Any]]:
    """``sizes.drivers`` driver processes with ``peers`` fake peers set up."""
    spawn = multiprocessing.get_context("spawn")
    per = -(-peers // sizes.drivers)
    started = []
    try:
        for start in range(0, peers, per):
            parent, child = spawn.Pipe()
            indexes = range(start, min(peers, start + per))
            proc = spawn.Process(
                target=_drive, args=(target, indexes, dataset_id, sizes, child)
            )
            proc.start()
            started.append((proc, parent))
        for _, conn in started:
            _expect(conn, "ready")
        yield [conn for _, conn in started]
        for _, conn in started:
            conn.send("stop")
    finally:
        for proc, _ in started:
            proc.join(60)
            if proc.is_alive():
                proc.kill()


def window(conns: list[Any], pid: int) -> tuple[Window, float]:
    """One window of every driver: (the merged window, dispatcher CPU s/s)."""
    cpu, start = cpu_seconds(pid), time.perf_counter()
    for conn in conns:
        conn.send("go")
    merged: Window | None = None
    for conn in conns:
        got = _expect(conn)
        merged = got if merged is None else merged.merge(got)
    assert merged is not None
    return merged, (cpu_seconds(pid) - cpu) / (time.perf_counter() - start)


# ------------------------------------------------------------------ trainer

TRAINER = """
import sys
import time
import zmqdata as zd
from zmqdata import service
target = sys.argv[1]
workers = [service.WorkerServer(service.WorkerConfig(target)) for _ in range(2)]
ds = zd.Dataset.range(10**12).map(lambda x: x * 2).apply(service.distribute(
    "distributed_epoch", target, target_workers="LOCAL")).batch(64)
for command in sys.stdin:
    seconds, step_s = map(float, command.split())
    steps, it = 0, iter(ds)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        next(it)
        if step_s:
            time.sleep(step_s)
        steps += 1
    rate = steps / (time.perf_counter() - start)
    it.close()
    print(rate, flush=True)
for worker in workers:
    worker.stop()
"""
STEP_S = 0.005
"""The trainer's step per batch of 64: it asks for 12,800 elements/s at most."""


class Trainer:
    """A real trainer process (2 workers in it) reading a distributed_epoch job."""

    def __init__(self, target: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER, target],
            env=subprocess_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def start(self, seconds: float, step_s: float) -> None:
        """Starts a read of ``seconds`` with steps of ``step_s`` (see ``rate``)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{seconds} {step_s}\n")
        self.proc.stdin.flush()

    def rate(self) -> float:
        """The last read's batches per second."""
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the real trainer died")
        return float(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(60)


# ------------------------------------------------------------------ section


def one_size(peers: int, sizes: ControlSizes, repeats: int) -> dict[str, Any]:
    """``peers`` fake workers and consumers: windows, and the trainer's rate.

    The fleet's figures come from windows of the fleet alone (the trainer, a
    process of its own on either core, would take the dispatcher's core at
    times); the trainer reads in windows of its own while the fleet runs.
    """
    with dispatcher_process(cpu=DISPATCHER_CPU) as (target, pid):
        dataset_id = service.register_dataset(
            target, zd.Dataset.range(FAKE_RANGE), compression=None
        )
        trainer = Trainer(target)
        trainer.start(sizes.window_s, STEP_S)
        alone = trainer.rate()
        started = time.perf_counter()
        windows, cpus, rates = [], [], []
        with drivers(target, peers, dataset_id, sizes) as conns:
            setup_s = time.perf_counter() - started
            window(conns, pid)  # warm-up: consumers find their pace
            for _ in range(repeats):
                got, cpu = window(conns, pid)
                windows.append(got)
                cpus.append(cpu)
                trainer.start(sizes.window_s, STEP_S)
                window(conns, pid)
                rates.append(trainer.rate())
        trainer.close()
    figures = [w.figures() for w in windows]
    out: dict[str, Any] = {
        "peers": peers,
        "setup_s": setup_s,
        "dispatcher_cpu": Stat(cpus),
        "windows_behind": sum(w.behind for w in windows),
        "windows_saturated": sum(w.saturated for w in windows),
        **{key: Stat(f[key] for f in figures) for key in figures[0]},
    }
    out["trainer_alone"] = alone
    out["trainer"] = Stat(rates)
    out["trainer_kept"] = Stat(rate / alone for rate in rates)
    offered = sum(
        out[f"{kind}_offered_per_s"] for kind in ("worker", "consumer", "split")
    )
    out["floor"] = floor(offered, peers + 2 * LINKS, sizes.window_s, DISPATCHER_CPU)
    out["state"] = state_costs(peers)
    return out


def control(bench: Bench, sizes: ControlSizes | None = None) -> dict[str, Any]:
    """The curve: each fleet size of ``sizes.curve`` on a fresh dispatcher."""
    sizes = sizes or (QUICK if bench.quick else ControlSizes())
    raise_fd_limit()  # the dispatcher process inherits it
    return {
        "curve": [one_size(peers, sizes, bench.repeats) for peers in sizes.curve],
        "split_interval_s": sizes.split_interval_s,
        "window_s": sizes.window_s,
    }


def journal(bench: Bench, sizes: ControlSizes | None = None) -> dict[str, Any]:
    sizes = sizes or (QUICK if bench.quick else ControlSizes())
    return journal_section.journal(bench, sizes.requesters, sizes.journal_window_s)


# ------------------------------------------------------------------ main

SECTIONS = {"control": control, "journal": journal}


def curve_row(size: dict[str, Any]) -> str:
    """One fleet size's markdown row; latencies only where the drivers kept up."""
    kinds = ("worker", "consumer", "split")
    offered = sum(size[f"{kind}_offered_per_s"] for kind in kinds)
    served = sum(size[f"{kind}_served_per_s"] for kind in kinds)
    behind, saturated = size["windows_behind"], size["windows_saturated"]

    def latency(key: str) -> str:
        if behind:
            return f"drivers behind ({behind} windows)"
        return f"{float(size[key]):.1f} ms" + (" (saturated)" if saturated else "")

    return (
        f"| {size['peers']:,} | {offered:,.0f} → {served:,.0f} "
        f"| {latency('consumer_p99_ms')} | {latency('worker_p99_ms')} "
        f"| {latency('split_p99_ms')} | {float(size['dispatcher_cpu']):.2f} "
        f"| {size['floor']['cpu']:.2f} "
        f"| {float(size['driver_cpu']):.2f} s/s, lag {float(size['driver_lag_p99_ms']):.1f} ms "
        f"| {float(size['trainer_kept']):.0%} |"
    )


def rows(results: dict[str, Any]) -> list[tuple[str, ...]]:
    """``make bench``'s final-table rows: one a fleet size."""
    out = []
    for size in results["curve"]:
        peers = size["peers"]
        p99 = max(
            float(size[f"{kind}_p99_ms"]) for kind in ("worker", "consumer", "split")
        )
        cpu, floor_cpu = float(size["dispatcher_cpu"]), size["floor"]["cpu"]
        met = not size["windows_behind"] and p99 < 20 and cpu < 1
        verdict = "drivers behind" if size["windows_behind"] else ("✔" if met else "✘")
        out.append(
            (
                f"control plane: {peers:,} workers + {peers:,} consumers",
                f"p99 {p99:.1f} ms, dispatcher {cpu:.2f} CPU s/s",
                f"no-op ZeroMQ server {floor_cpu:.2f} CPU s/s",
                f"{cpu / floor_cpu:.2f}x" if floor_cpu else "—",
                "—",
                "—",
                f"p99 < 20 ms, < 1 CPU s/s {verdict}",
            )
        )
    return out


def table(results: dict[str, Any]) -> str:
    """Markdown: the curve (a row per size), then the journal's figures."""
    lines = []
    if "control" in results:
        lines += [
            (
                "| peers | requests/s offered → served | consumer p99 | worker hb p99 "
                "| GetSplit p99 | dispatcher CPU s/s | no-op server CPU s/s "
                "| driver (CPU, lag p99) | trainer kept |"
            ),
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for size in results["control"]["curve"]:
            lines.append(curve_row(size))
    if "journal" in results:
        lines.append("")
        lines.append(journal_section.table(results["journal"]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--peers", type=int, action="append", default=None)
    parser.add_argument("--drivers", type=int, default=None)
    parser.add_argument("--window", type=float, default=None, help="seconds")
    parser.add_argument("--requesters", type=int, default=None)
    parser.add_argument("--split-interval", type=float, default=None)
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(SECTIONS),
    )
    parser.add_argument("--out", type=Path, default=None, help="results JSON")
    parser.add_argument("--plots", type=Path, default=None, help="PNG folder")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else ControlSizes()
    changes = {
        key: value
        for key, value in (
            ("curve", tuple(args.peers) if args.peers else None),
            ("drivers", args.drivers),
            ("window_s", args.window),
            ("requesters", args.requesters),
            ("split_interval_s", args.split_interval),
        )
        if value is not None
    }
    sizes = replace(sizes, **changes)
    bench = Bench(
        sizes_for(args.quick), args.repeats or (2 if args.quick else 3), args.quick
    )
    results = {}
    for name in args.only:
        start = time.perf_counter()
        print(f"{name} ...", end=" ", file=sys.stderr, flush=True)
        results[name] = SECTIONS[name](bench, sizes)
        print(f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print(table(results))
    if args.plots is not None:
        from bench import plots

        label = f"python bench/control.py --repeats {bench.repeats}"
        for path in plots.write(results, args.plots, label):
            print(f"plot: {path}", file=sys.stderr)
    if args.out is not None:
        from bench.run import jsonable

        args.out.write_text(json.dumps(jsonable(results), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
