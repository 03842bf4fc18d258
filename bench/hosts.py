"""Throughput against K worker hosts: one trainer host fed by K = 1..4 worker hosts.

    python bench/hosts.py [--quick] [--repeats N] [--json samples.json]
    python bench/hosts.py --workloads link        # only the link-bound pipeline
    python bench/run.py --only hosts              # the bench/run.py section (+ plot)

Hosts are network namespaces on one bridge (tests/hosts/netns.py; root, ``ip``
and ``tc``; where they cannot be made the section prints why and is skipped).
A dispatcher host (unshaped) runs the dispatcher, the trainer host the
trainer, each worker host one ``zmqdata worker`` process (``Plan(dispatcher=
"trainer")`` runs the dispatcher in the trainer's process instead, so its
round trips queue behind the data on the trainer's full link). ``tc`` (tbf, tests/hosts/veth.py) limits what
every worker host sends to ``WORKER_RATE`` and what the trainer host receives
to ``TRAINER_RATE``: K worker links fill the trainer's from K = 3 on. Shared
memory is off (``ZMQDATA_SHARED_MEMORY=0``; each host has its own
``/dev/shm`` anyway). All namespaces share this machine's cores.

Pipelines, each read as ``distributed_epoch``, with ``compression="AUTO"``
and ``None``:

* ``link``: pre-encoded images, ``SIZE`` (256 KiB) of incompressible bytes
  each, sliced from a random bank (cheap to make: the link is the cost). A
  long pass (``LONG`` elements, 252 MB) and a short one (``SHORT``, 63 MB,
  where the end of the epoch weighs most). Figures in MB/s of payload.
* ``cpu``: ``range(n).map(~CPU_MS of SHA-256)`` with 16-byte outputs (the CPU
  is the cost). All hosts share this machine's cores: past their count no
  host adds anything.

Each figure is the median of ``min(repeats, 3)`` passes (a pass: ``iter()`` to
the end of input, a fresh job) after a warm-up pass, passes of all cases
interleaved, K = 1..4 each with fresh processes. Every element carries the
pid of the worker that made it, so a pass also reports each host's share and
when its last element came: the *tail* is the time from the first host's
last element to the end of input (only some links were busy).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.common import (
    KIB,
    Bench,
    Stat,
    number,
    section_main,
    stop_processes,
    subprocess_env,
    times,
)
from bench.workloads import _calibrate, burn

SIZE = 256 * KIB
BANK_BYTES = 8 * 2**20
WORKER_RATE = "200mbit"
TRAINER_RATE = "600mbit"
COMPRESSIONS: tuple[str | None, ...] = (None, "AUTO")
PIPELINES = ("link", "cpu")
TARGET_SCALING = 0.9
"""Link-bound: K hosts give at least this times K one host's rate, ..."""
TARGET_TRAINER_LINK = 0.9
"""... until the trainer's link is full; then at least this share of its rate."""


@dataclass(frozen=True)
class Plan:
    """What the section runs: hosts, pass lengths, link rates."""

    hosts: tuple[int, ...] = (1, 2, 3, 4)
    long: int = 960
    """Elements of a long link-bound pass (252 MB)."""
    short: int = 240
    """Elements of a short one (63 MB)."""
    cpu_elements: int = 400
    cpu_ms: float = 5.0
    warmup: int = 8
    """Elements of each case's warm-up pass."""
    worker_rate: str = WORKER_RATE
    trainer_rate: str = TRAINER_RATE
    dispatcher: str = "own"
    """``"own"``: on a host of its own; ``"trainer"``: in the trainer's process."""

    def cases(self, pipelines: Sequence[str]) -> list[dict[str, Any]]:
        """Every ``(pipeline, length, elements, compression)`` one K reads."""
        lengths = {
            "link": [("long", self.long), ("short", self.short)],
            "cpu": [("pass", self.cpu_elements)],
        }
        return [
            {"pipeline": p, "length": name, "elements": n, "compression": c}
            for p in PIPELINES
            if p in pipelines
            for name, n in lengths[p]
            for c in COMPRESSIONS
        ]


QUICK_PLAN = Plan(hosts=(1, 2), long=64, short=16, cpu_elements=40)


def mbit(rate: str) -> float:
    """MB/s (payload bytes, 1e6) of a ``tc`` rate in ``mbit``/``gbit``.

    >>> mbit("200mbit"), mbit("1gbit")
    (25.0, 125.0)
    """
    for unit, scale in (("gbit", 1000 / 8), ("mbit", 1 / 8)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise ValueError(f"a tc rate in mbit or gbit, not {rate!r}")


# ------------------------------------------------------------------ on the workers


@functools.cache
def _bank() -> np.ndarray[Any, Any]:
    """``BANK_BYTES`` random bytes, made once per worker process."""
    return np.random.default_rng(0).integers(0, 256, BANK_BYTES, np.uint8)


def image(index: Any) -> np.ndarray[Any, Any]:
    """A pre-encoded image: ``SIZE`` random bytes; the first 8 say which process made it."""
    offset = int(index) * 4099 % (BANK_BYTES - SIZE)
    out = _bank()[offset : offset + SIZE].copy()
    out[:8].view(np.int64)[0] = os.getpid()
    return out


def crunch(index: Any, rounds: int) -> np.ndarray[Any, Any]:
    """``rounds`` of SHA-256 work; ``[pid, index]`` (which process made it)."""
    burn(index, rounds)
    return np.array([os.getpid(), int(index)], np.int64)


# ------------------------------------------------------------------ the trainer


def dispatch(address: str) -> None:
    """On the dispatcher host: a dispatcher until the process is terminated."""
    from zmqdata import service

    dispatcher = service.DispatchServer(service.DispatcherConfig(host=address))
    print(dispatcher.target, flush=True)
    dispatcher.join()


def drive(target: str, spec: dict[str, Any]) -> dict[str, Any]:
    """In the trainer process: the passes, once ``spec["workers"]`` registered.

    ``target`` is the dispatcher's, or an address to start one at in this
    process (``spec["own_dispatcher"]`` false).
    """
    from zmqdata import service

    dispatcher = None
    if not spec["own_dispatcher"]:
        dispatcher = service.DispatchServer(service.DispatcherConfig(host=target))
        target = dispatcher.target
    print(target, flush=True)  # the workers need it
    try:
        deadline = time.monotonic() + 60
        while len(service.get_status(target)["workers"]) < spec["workers"]:
            if time.monotonic() > deadline:
                raise RuntimeError("the workers did not register within 60 s")
            time.sleep(0.05)
        cases = spec["cases"]
        for case in cases:  # warm-up: imports, first tasks, the workers' banks
            read_pass(target, {**case, "elements": spec["warmup"]}, spec)
        passes: list[list[dict[str, Any]]] = [[] for _ in cases]
        for repeat in range(spec["repeats"]):
            order = list(enumerate(cases))
            for index, case in order if repeat % 2 == 0 else reversed(order):
                passes[index].append(read_pass(target, case, spec))
        return {"passes": passes}
    finally:
        if dispatcher is not None:
            dispatcher.stop()


def read_pass(
    target: str, case: dict[str, Any], spec: dict[str, Any]
) -> dict[str, Any]:
    """One ``distributed_epoch`` pass: seconds, bytes, and each host's share."""
    import zmqdata as zd
    from bench.hosts import crunch as crunch_by_reference  # not __main__'s
    from bench.hosts import image as image_by_reference
    from zmqdata import service

    n = case["elements"]
    if case["pipeline"] == "link":
        ds = zd.Dataset.range(n).map(image_by_reference)
    else:
        ds = zd.Dataset.range(n).map(
            functools.partial(crunch_by_reference, rounds=spec["rounds"])
        )
    ds = ds.apply(
        service.distribute("distributed_epoch", target, compression=case["compression"])
    )
    arrivals: list[float] = []
    makers: list[int] = []
    nbytes = 0
    start = time.perf_counter()
    with iter(ds) as elements:
        for element in elements:
            arrivals.append(time.perf_counter() - start)
            makers.append(int(element[:8].view(np.int64)[0]))
            nbytes += element.nbytes
    seconds = time.perf_counter() - start
    if len(arrivals) != n:
        raise RuntimeError(f"read {len(arrivals)} elements of {n}")
    return {"seconds": seconds, "bytes": nbytes, **shares(arrivals, makers, seconds)}


def shares(
    arrivals: Sequence[float], makers: Sequence[int], seconds: float
) -> dict[str, Any]:
    """Each host's elements and last arrival, the tail, the end-of-input wait.

    >>> r = shares([0.1, 0.2, 0.3, 0.9], [7, 8, 7, 7], 1.0)
    >>> r["hosts"], round(r["tail_s"], 3), round(r["end_s"], 3)
    ([[3, 0.9], [1, 0.2]], 0.8, 0.1)
    """
    last: dict[int, list[Any]] = {}
    for arrival, maker in zip(arrivals, makers, strict=True):
        entry = last.setdefault(maker, [0, 0.0])
        entry[0] += 1
        entry[1] = arrival
    hosts = sorted(last.values(), key=lambda entry: -entry[0])
    return {
        "first_s": arrivals[0],
        "hosts": hosts,
        "tail_s": seconds - min(entry[1] for entry in hosts),
        "end_s": seconds - arrivals[-1],
    }


# ------------------------------------------------------------------ the hosts


def unavailable() -> str | None:
    """Why the section cannot run here (None: it can)."""
    from tests.hosts import netns, veth

    return netns.unavailable_reason() or veth.tc_missing()


@dataclass(frozen=True)
class Hosts:
    """The namespaces of a run (``dispatcher`` None: it runs on ``trainer``)."""

    dispatcher: Any
    trainer: Any
    workers: list[Any]


@contextmanager
def network(plan: Plan) -> Iterator[Hosts]:
    """The hosts of ``plan``: ``max(plan.hosts)`` worker hosts, links shaped."""
    from tests.hosts import netns, veth

    netns.remove_stale()
    net = netns.Network()
    try:
        dispatcher = net.add_host() if plan.dispatcher == "own" else None
        trainer = net.add_host()
        workers = [net.add_host() for _ in range(max(plan.hosts))]
        for host in workers:
            veth.shape(host, plan.worker_rate)
        veth.shape_into(net, trainer, plan.trainer_rate)
        yield Hosts(dispatcher, trainer, workers)
    finally:
        net.close()


def worker_argv(target: str, address: str) -> list[str]:
    """The worker command of one worker host (``zmqdata worker``, as deployed)."""
    return [
        sys.executable, "-m", "zmqdata", "worker", "--dispatcher", target,
        "--host", address, "--insecure", "--heartbeat-interval-ms", "200",
    ]  # fmt: skip


def run_k(
    hosts: Hosts, k: int, spec: dict[str, Any], timeout_s: float
) -> dict[str, Any]:
    """The dispatcher, a trainer process and ``k`` worker processes, one per host."""
    env = subprocess_env({"ZMQDATA_SHARED_MEMORY": "0"})
    here = [sys.executable, "-m", "bench.hosts"]
    with ExitStack() as stack:
        procs: list[subprocess.Popen[Any]] = []

        def stop() -> None:
            stop_processes(reversed(procs))
            for proc in procs:
                if proc.stdout is not None:
                    proc.stdout.close()

        stack.callback(stop)

        def start(host: Any, *argv: str) -> subprocess.Popen[str]:
            proc = subprocess.Popen(
                [*host.prefix(), *here, *argv],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            procs.append(proc)
            return proc

        target = hosts.trainer.address
        if hosts.dispatcher is not None:
            dispatcher = start(hosts.dispatcher, "--dispatch", hosts.dispatcher.address)
            assert dispatcher.stdout is not None
            target = dispatcher.stdout.readline().strip()
        spec = {**spec, "workers": k, "own_dispatcher": hosts.dispatcher is not None}
        proc = start(hosts.trainer, "--drive", target, json.dumps(spec))
        assert proc.stdout is not None
        target = proc.stdout.readline().strip()
        for host in hosts.workers[:k]:
            worker = [*host.prefix(), *worker_argv(target, host.address)]
            procs.append(subprocess.Popen(worker, stderr=subprocess.DEVNULL, env=env))
        out, _ = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"the trainer failed (exit {proc.returncode})")
        result: dict[str, Any] = json.loads(out)
        return result


def figures(
    plan: Plan, case: dict[str, Any], passes: list[dict[str, Any]]
) -> dict[str, Any]:
    """One case at one K: the rate (MB/s or el/s) and the tail, medians."""
    if case["pipeline"] == "link":
        rate = Stat(p["bytes"] / p["seconds"] / 1e6 for p in passes)
    else:
        rate = Stat(case["elements"] / p["seconds"] for p in passes)
    top_share = [p["hosts"][0][0] / case["elements"] for p in passes]
    return {
        **case,
        "rate": rate,
        "seconds": Stat(p["seconds"] for p in passes),
        "tail_s": Stat(p["tail_s"] for p in passes),
        "end_s": Stat(p["end_s"] for p in passes),
        "first_s": Stat(p["first_s"] for p in passes),
        "top_share": Stat(top_share),
        "hosts_used": statistics.median(len(p["hosts"]) for p in passes),
        "passes": passes,
    }


def hosts(bench: Bench, pipelines: Sequence[str] = PIPELINES) -> dict[str, Any]:
    """The bench/run.py section: every case at K = 1..4 worker hosts."""
    unknown = set(pipelines) - set(PIPELINES)
    if unknown:
        raise ValueError(f"unknown pipelines {sorted(unknown)}, of {PIPELINES}")
    plan = QUICK_PLAN if bench.quick else Plan()
    reason = unavailable()
    if reason is not None:
        print(f"hosts: SKIPPED, {reason}", file=sys.stderr, flush=True)
        return {"skipped": reason}
    return measure(plan, pipelines, min(bench.repeats, 3))


def measure(plan: Plan, pipelines: Sequence[str], repeats: int) -> dict[str, Any]:
    """Runs ``plan`` (namespaces must be available); figures by case and K."""
    cases = plan.cases(pipelines)
    spec = {
        "cases": cases,
        "repeats": repeats,
        "warmup": plan.warmup,
        "rounds": _calibrate(plan.cpu_ms),
    }
    slowest = mbit(plan.worker_rate) * 1e6
    link_bytes = sum(c["elements"] * SIZE for c in cases if c["pipeline"] == "link")
    cpu_s = sum(c["elements"] for c in cases if c["pipeline"] == "cpu") * plan.cpu_ms
    timeout_s = 120 + 3 * (repeats + 1) * (link_bytes / slowest + cpu_s / 1000)
    by_k: dict[str, Any] = {}
    with network(plan) as found:
        for k in plan.hosts:
            result = run_k(found, k, spec, timeout_s)
            by_k[str(k)] = [
                figures(plan, case, passes)
                for case, passes in zip(cases, result["passes"], strict=True)
            ]
    return {"plan": asdict(plan), "repeats": repeats, "cases": collate(plan, by_k)}


def collate(plan: Plan, by_k: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per case (``link/long/None``): each K's figures and ratios against K = 1."""
    worker, trainer = mbit(plan.worker_rate), mbit(plan.trainer_rate)
    out: dict[str, Any] = {}
    for k, results in by_k.items():
        for r in results:
            name = f"{r['pipeline']}/{r['length']}/{r['compression']}"
            entry = out.setdefault(name, {**_case_of(r), "k": {}})
            entry["k"][k] = r
    for entry in out.values():
        one = float(entry["k"][min(entry["k"], key=int)]["rate"])
        for k, r in entry["k"].items():
            r["vs_one"] = float(r["rate"]) / one
            if entry["pipeline"] == "link":
                bound = min(int(k) * worker, trainer)
                r["link_bound_mb_s"] = bound
                r["vs_bound"] = float(r["rate"]) / bound
                r["trainer_full"] = int(k) * worker >= trainer
                r["target_met"] = (
                    r["vs_bound"] >= TARGET_TRAINER_LINK
                    if r["trainer_full"]
                    else r["vs_one"] >= TARGET_SCALING * int(k)
                )
    return out


def _case_of(r: dict[str, Any]) -> dict[str, Any]:
    return {key: r[key] for key in ("pipeline", "length", "elements", "compression")}


# ------------------------------------------------------------------ tables


def _spread(stat: Stat, fmt: str = ".1f") -> str:
    return f"{min(stat.samples):{fmt}}-{max(stat.samples):{fmt}}"


def details(result: dict[str, Any]) -> str:
    """Per case: each K's rate with its spread, its ratios and its tail."""
    from bench.report import mark, markdown

    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    plan = result["plan"]
    header = (
        "pipeline, pass", "compression", "worker hosts", "rate (min-max)",
        "vs K=1", "vs link bound", "tail s", "end s", "top host's share", "target",
    )  # fmt: skip
    rows = []
    for entry in result["cases"].values():
        link = entry["pipeline"] == "link"
        label = (
            f"link-bound, {entry['length']} ({entry['elements'] * SIZE / 1e6:.0f} MB)"
            if link
            else f"CPU-bound ({plan['cpu_ms']:.0f} ms/element, {entry['elements']})"
        )
        for k, r in sorted(entry["k"].items(), key=lambda item: int(item[0])):
            unit = "MB/s" if link else "el/s"
            target = "—"
            if link and r["trainer_full"]:
                target = f"≥ {TARGET_TRAINER_LINK:.0%} trainer link"
            elif link:
                target = f"≥ {TARGET_SCALING * int(k):.1f}x"
            rows.append(
                (
                    label,
                    str(entry["compression"]),
                    k,
                    f"{number(r['rate'])} {unit} ({_spread(r['rate'])})",
                    times(r["vs_one"]),
                    f"{r['vs_bound']:.0%} of {r['link_bound_mb_s']:.0f}"
                    if link
                    else "—",
                    f"{float(r['tail_s']):.2f}",
                    f"{float(r['end_s']):.3f}",
                    f"{float(r['top_share']):.0%}",
                    f"{target} {mark(r['target_met'])}" if link else target,
                )
            )
    return markdown(header, rows)


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: the most hosts against one, per case (None only)."""
    from bench.report import NONE, mark

    if "skipped" in result:
        return []
    out: list[tuple[str, ...]] = []
    for entry in result["cases"].values():
        if entry["compression"] is not None:
            continue
        most = max(entry["k"], key=int)
        r, one = entry["k"][most], entry["k"][min(entry["k"], key=int)]
        link = entry["pipeline"] == "link"
        unit = "MB/s" if link else "el/s"
        what = (
            f"link-bound {entry['elements'] * SIZE / 1e6:.0f} MB pass"
            if link
            else "CPU-bound pass"
        )
        target = NONE
        if link:
            bound = "trainer link" if r["trainer_full"] else "0.9·K"
            target = f"{bound} {mark(r['target_met'])}"
        out.append(
            (
                f"many hosts, {what}: {most} worker hosts vs 1 (tc, shared cores)",
                f"{number(r['rate'])} {unit}",
                f"1 host {number(one['rate'])} {unit}",
                times(r["vs_one"]),
                NONE,
                NONE,
                target,
            )
        )
    return out


def main() -> None:
    section_main(__doc__ or "", hosts, details, list(PIPELINES))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--drive":
        print(json.dumps(drive(sys.argv[2], json.loads(sys.argv[3]))), flush=True)
    elif len(sys.argv) == 3 and sys.argv[1] == "--dispatch":
        dispatch(sys.argv[2])
    else:
        main()
