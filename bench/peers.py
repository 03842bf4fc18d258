"""Real pipelines against the peers: torch DataLoader, Ray Data, grain, SPDL, one
local process.

Not a script: ``python bench/run.py --only images,text`` runs the two sections.

* ``images``: 2,048 seeded 160x160 JPEG files (made once under
  bench/results/cache/): decode (Pillow), random 112x112 crop, random flip,
  normalize to float32, batch 64 (bench/pipelines.py).
* ``text``: 64 files of 64 synthetic documents (Zipf words): tokenize with a
  hashed word-piece tokenizer, pack into 512-token int32 sequences, batch 32.

Every system runs the same functions with two worker processes, default
settings, one system after the other in the same run; the trainer (this
process) only iterates:

* ``torch``: ``DataLoader(num_workers=2)`` (bench/torch_pipelines.py);
* ``zmqdata``: ``distributed_epoch`` from a deployment started the way users
  start one, ``zmqdata up`` with ``workers: 2`` (dispatcher and workers in
  other processes), default settings (``compression="AUTO"``);
  ``zmqdata_none`` is the same with ``compression=None``;
* ``ray``: Ray Data, ``ray.init(num_cpus=2)``, ``from_items`` +
  ``map_batches`` + ``iter_batches`` (skipped with a line where ``import ray``
  fails: ``pip install -e '.[peers]'``); progress bars and the forwarding of
  worker logs are off;
* ``grain``: ``grain.MapDataset`` + ``mp_prefetch`` with 2 worker processes
  (bench/grain_pipelines.py), which grain starts (spawns) for every epoch's
  iterator;
* ``spdl``: SPDL's ``PipelineBuilder`` with 2 threads; ``spdl_processes``: the
  same with the per-file function in a ``ProcessPoolExecutor`` of 2 processes
  (bench/spdl_pipelines.py);
* ``local``: the same functions in a plain loop in this process, no workers.

Worker processes of every system import bench.pipelines by reference
(``bench`` on their ``PYTHONPATH``), as a user's installed code would be.

Per system: one warm-up epoch (which absorbs Ray's start-up, the zmqdata
deployment's first job, DataLoader's first fork), then ``min(repeats, 3)``
timed epochs; figures are medians of those: elements/s, and trainer CPU
seconds per 1,000 elements (``getrusage(RUSAGE_SELF)``: every thread of this
process, around each epoch; the workers, the dispatcher and Ray's daemons are
other processes).
"""

from __future__ import annotations

import importlib.util
import logging
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmqdata as zd
from bench import pipelines
from bench.common import (
    ROOT,
    Bench,
    Stat,
    distributed,
    number,
    stop_processes,
    subprocess_env,
    times,
)

WORKERS = 2
CACHE = Path(ROOT, "bench", "results", "cache")

TARGET_VS_TORCH = 1.0
TARGET_CPU_VS_TORCH = 1.5
TARGET_VS_RAY = 2.0
TARGET_VS_LOCAL = 1.3

LABELS = {
    "local": "one local process, no service",
    "torch": f"torch DataLoader(num_workers={WORKERS})",
    "zmqdata": f"zmqdata distributed_epoch, `zmqdata up` {WORKERS} workers, defaults",
    "zmqdata_none": "zmqdata, the same with compression=None",
    "ray": f"Ray Data, ray.init(num_cpus={WORKERS})",
    "grain": f"grain MapDataset, mp_prefetch(num_workers={WORKERS})",
    "spdl": f"SPDL PipelineBuilder, {WORKERS} threads",
    "spdl_processes": f"SPDL, the same with a ProcessPoolExecutor({WORKERS})",
}
Reader = Callable[[], Iterable[Any]]
"""One epoch of a system: its batches."""


@dataclass(frozen=True)
class Pipeline:
    """One pipeline written for each system, the same functions inside."""

    name: str
    unit: str
    batch: int
    files: int
    elements: int | None
    """Elements per epoch where known before reading (else the first epoch's)."""
    dataset: Callable[[], zd.Dataset]
    loader: Callable[[int], Iterable[Any]]
    """torch: a DataLoader of ``num_workers``."""
    ray: Callable[[Any], Any]
    """Ray Data: the ``ray.data`` module -> a Dataset."""
    local: Reader
    paths: list[str]
    per_file: Callable[[str], Any]
    """The work of one file: an element, or (``rows``) an array of elements."""
    rows: bool


def image_pipeline(count: int) -> Pipeline:
    folder = CACHE / f"images-{pipelines.IMAGE_SIDE}px-{count}-seed0"
    paths = pipelines.make_images(folder, count)

    def loader(workers: int) -> Iterable[Any]:
        from bench import torch_pipelines

        return torch_pipelines.image_loader(paths, workers)

    def dataset() -> zd.Dataset:
        files = zd.Dataset.list_files(str(folder / "*.jpg"), shuffle=False)
        return files.map(pipelines.image_element).batch(pipelines.IMAGE_BATCH)

    def ray(data: Any) -> Any:
        items = data.from_items([{"path": path} for path in paths])
        return items.map_batches(
            pipelines.image_batch, batch_size=pipelines.IMAGE_BATCH
        )

    return Pipeline(
        name="images",
        unit="images",
        batch=pipelines.IMAGE_BATCH,
        files=count,
        elements=count,
        dataset=dataset,
        loader=loader,
        ray=ray,
        local=lambda: pipelines.stack_batches(
            map(pipelines.image_element, paths), pipelines.IMAGE_BATCH
        ),
        paths=paths,
        per_file=pipelines.image_element,
        rows=False,
    )


def text_pipeline(files: int, documents: int) -> Pipeline:
    folder = CACHE / f"text-{files}x{documents}-seed0"
    paths = pipelines.make_corpus(folder, files, documents)

    def loader(workers: int) -> Iterable[Any]:
        from bench import torch_pipelines

        return torch_pipelines.text_loader(paths, workers)

    def dataset() -> zd.Dataset:
        files = zd.Dataset.list_files(str(folder / "*.txt"), shuffle=False)
        sequences = files.map(pipelines.text_sequences).unbatch()
        return sequences.batch(pipelines.TEXT_BATCH)

    def ray(data: Any) -> Any:
        items = data.from_items([{"path": path} for path in paths])
        return items.map_batches(pipelines.text_batch, batch_size=1)

    def rows() -> Iterator[Any]:
        for path in paths:
            yield from pipelines.text_sequences(path)

    return Pipeline(
        name="text",
        unit="sequences",
        batch=pipelines.TEXT_BATCH,
        files=files,
        elements=None,
        dataset=dataset,
        loader=loader,
        ray=ray,
        local=lambda: pipelines.stack_batches(rows(), pipelines.TEXT_BATCH),
        paths=paths,
        per_file=pipelines.text_sequences,
        rows=True,
    )


# ------------------------------------------------------------------ systems

_READY = re.compile(r"deployment ready: dispatcher (\S+),")


@contextmanager
def zmqdata_up(
    workers: int, timeout_s: float = 60, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """``zmqdata up`` of a ``workers: N`` file, as a child process (``env`` set
    in its and its workers' environment); its dispatcher."""
    with tempfile.TemporaryDirectory(prefix="zd-peers-") as folder:
        config, log = Path(folder, "deploy.yaml"), Path(folder, "up.log")
        config.write_text(f"workers: {workers}\n")
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "zmqdata", "up", str(config)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=subprocess_env(env),
            )
        try:
            deadline = time.monotonic() + timeout_s
            while not (ready := _READY.search(log.read_text(errors="replace"))):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"zmqdata up not ready (exit code {proc.poll()}):\n"
                        + log.read_text(errors="replace")[-2000:]
                    )
                time.sleep(0.05)
            yield ready.group(1)
        finally:
            stop_processes([proc])


@contextmanager
def _zmqdata(pipeline: Pipeline, compression: str | None) -> Iterator[Reader]:
    """``compression="AUTO"`` passes nothing: the default, as users leave it."""
    options = {} if compression == "AUTO" else {"compression": compression}
    with zmqdata_up(WORKERS) as target:
        remote = distributed(
            pipeline.dataset(), target, processing_mode="distributed_epoch", **options
        )
        yield lambda: remote


@contextmanager
def _ray(pipeline: Pipeline) -> Iterator[Reader]:
    import ray
    import ray.data

    ray.init(
        num_cpus=WORKERS,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
        runtime_env={"env_vars": {"PYTHONPATH": subprocess_env()["PYTHONPATH"]}},
    )
    try:
        logging.getLogger("ray.data").setLevel(logging.ERROR)  # per-run INFO lines
        ray.data.DataContext.get_current().enable_progress_bars = False
        dataset = pipeline.ray(ray.data)
        yield lambda: dataset.iter_batches(
            batch_size=pipeline.batch, batch_format="numpy"
        )
    finally:
        ray.shutdown()


@contextmanager
def _torch(pipeline: Pipeline) -> Iterator[Reader]:
    loader = pipeline.loader(WORKERS)
    yield lambda: loader


@contextmanager
def _grain(pipeline: Pipeline) -> Iterator[Reader]:
    from bench import grain_pipelines

    dataset = grain_pipelines.loader(
        pipeline.paths, pipeline.per_file, pipeline.batch, pipeline.rows, WORKERS
    )
    yield lambda: dataset


@contextmanager
def _spdl(pipeline: Pipeline, processes: bool) -> Iterator[Reader]:
    from bench import spdl_pipelines

    with ExitStack() as stack:
        executor = (
            stack.enter_context(ProcessPoolExecutor(WORKERS)) if processes else None
        )
        yield lambda: spdl_pipelines.epoch(
            pipeline.paths,
            pipeline.per_file,
            pipeline.batch,
            pipeline.rows,
            WORKERS,
            executor,
        )


@contextmanager
def _local(pipeline: Pipeline) -> Iterator[Reader]:
    yield pipeline.local


SYSTEMS: dict[str, Callable[[Pipeline], AbstractContextManager[Reader]]] = {
    "local": _local,
    "torch": _torch,
    "zmqdata": lambda pipeline: _zmqdata(pipeline, "AUTO"),
    "zmqdata_none": lambda pipeline: _zmqdata(pipeline, None),
    "ray": _ray,
    "grain": _grain,
    "spdl": lambda pipeline: _spdl(pipeline, processes=False),
    "spdl_processes": lambda pipeline: _spdl(pipeline, processes=True),
}
REQUIRES = {
    "torch": ("torch", "torch"),
    "ray": ("ray", "peers"),
    "grain": ("grain", "peers"),
    "spdl": ("spdl", "peers"),
    "spdl_processes": ("spdl", "peers"),
}
"""The optional systems: the module each imports and the extra that installs it.
One that is missing, or fails, is skipped with a line instead of ending the run."""


def missing(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    if system not in REQUIRES:
        return None
    module, extra = REQUIRES[system]
    if importlib.util.find_spec(module) is None:
        return f"`import {module}` fails (pip install -e '.[{extra}]')"
    return None


# ------------------------------------------------------------------ measuring


def _length(batch: Any) -> int:
    """Elements in a batch: an array, a tensor, or Ray's dict of columns."""
    if isinstance(batch, dict):
        batch = next(iter(batch.values()))
    return len(batch)


def cpu_s() -> float:
    """CPU seconds of this process so far: every thread, user and system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def epoch(read: Reader) -> tuple[int, float, float]:
    """One epoch: elements, wall seconds, trainer CPU seconds."""
    cpu, start = cpu_s(), time.perf_counter()
    count = 0
    for batch in read():
        count += _length(batch)
    return count, time.perf_counter() - start, cpu_s() - cpu


def run_system(
    name: str, pipeline: Pipeline, repeats: int, expected: int | None
) -> dict[str, Any]:
    """A warm-up epoch and ``repeats`` timed ones of system ``name``; its figures."""
    start = time.perf_counter()
    with SYSTEMS[name](pipeline) as read:
        setup_s = time.perf_counter() - start
        passes = [epoch(read) for _ in range(repeats + 1)]
    counts = sorted({count for count, _, _ in passes})
    if len(counts) != 1 or expected not in (None, counts[0]):
        raise RuntimeError(
            f"{name} read {counts} {pipeline.unit} per epoch, expected {expected}"
        )
    timed = passes[1:]
    return {
        "label": LABELS[name],
        "elements": counts[0],
        "el_s": Stat(count / wall for count, wall, _ in timed),
        "cpu_s_per_1k": Stat(cpu * 1000 / count for count, _, cpu in timed),
        "setup_s": round(setup_s, 2),
        "first_epoch_s": round(passes[0][1], 2),
    }


def compare(bench: Bench, pipeline: Pipeline) -> dict[str, Any]:
    """Every system on ``pipeline``, one after the other: the section's results."""
    repeats = min(bench.repeats, 3)
    expected = pipeline.elements
    systems: dict[str, Any] = {}
    for name in SYSTEMS:
        reason = missing(name)
        if reason is None:
            try:
                systems[name] = run_system(name, pipeline, repeats, expected)
                expected = systems[name]["elements"]
                continue
            except Exception as error:
                if name not in REQUIRES:  # zmqdata and local must work
                    raise
                reason = f"failed: {error!r}"[:300]
        print(f"\n  {pipeline.name}: {name} skipped: {reason}", file=sys.stderr)
        systems[name] = {"label": LABELS[name], "skipped": reason}
    return {
        "unit": pipeline.unit,
        "elements": expected,
        "files": pipeline.files,
        "batch": pipeline.batch,
        "workers": WORKERS,
        "repeats": repeats,
        "systems": systems,
    }


def images(bench: Bench) -> dict[str, Any]:
    """JPEG decode/crop/flip/normalize, batch 64, on every system."""
    if importlib.util.find_spec("PIL") is None:
        reason = "`import PIL` fails (pip install -e '.[bench]')"
        print(f"\n  images skipped: {reason}", file=sys.stderr)
        return {"unit": "images", "skipped": reason}
    return compare(bench, image_pipeline(512 if bench.quick else 2048))


def text(bench: Bench) -> dict[str, Any]:
    """Tokenize and pack into 512-token sequences, batch 32, on every system."""
    files, documents = (16, 32) if bench.quick else (64, 64)
    return compare(bench, text_pipeline(files, documents))


# ------------------------------------------------------------------ tables


def _ratio(value: float, base: dict[str, Any] | None, key: str = "el_s") -> str:
    """``value`` over ``base[key]``, or a dash where ``base`` was skipped."""
    return times(value / base[key]) if base and key in base else "—"


def details(result: dict[str, Any]) -> str:
    """The section's own table: every system, ratios against torch and local."""
    from bench.report import markdown

    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    systems, unit = result["systems"], result["unit"]
    torch, local = systems.get("torch"), systems.get("local")
    rows = []
    for figures in systems.values():
        if "skipped" in figures:
            rows.append((figures["label"], "skipped: " + figures["skipped"], *"—————"))
            continue
        rate, cpu = figures["el_s"], figures["cpu_s_per_1k"]
        rows.append(
            (
                figures["label"],
                number(rate),
                _ratio(rate, torch),
                _ratio(rate, local),
                f"{cpu:.3f}",
                _ratio(cpu, torch, "cpu_s_per_1k"),
                f"{figures['setup_s']:.1f} + {figures['first_epoch_s']:.1f}",
            )
        )
    header = (
        "system",
        f"{unit}/s",
        "vs torch",
        "vs local",
        f"trainer CPU s per 1,000 {unit}",
        "CPU vs torch",
        "warm-up s (start + 1st epoch)",
    )
    about = (
        f"{result['elements']:,} {unit} per epoch from {result['files']:,} files,"
        f" batch {result['batch']}, {result['workers']} worker processes per system;"
        f" medians of {result['repeats']} epochs after a warm-up one."
    )
    return f"{about}\n\n{markdown(header, rows)}"


def rows(name: str, result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: zmqdata (defaults) against each peer, and targets."""
    from bench.report import NONE, mark

    systems, unit = result.get("systems", {}), result["unit"]
    ours = systems.get("zmqdata", {})
    if "el_s" not in ours:
        return []
    out = []
    for peer, target in (
        ("torch", TARGET_VS_TORCH),
        ("ray", TARGET_VS_RAY),
        ("local", TARGET_VS_LOCAL),
    ):
        base = systems.get(peer, {})
        if "el_s" not in base:
            continue
        ratio = ours["el_s"] / base["el_s"]
        out.append(
            (
                f"{name}: zmqdata defaults vs {base['label']}",
                f"{number(ours['el_s'])} {unit}/s",
                f"{number(base['el_s'])} {unit}/s",
                times(ratio),
                NONE,
                NONE,
                f"≥ {target:.1f}x {mark(ratio >= target)}",
            )
        )
    torch = systems.get("torch", {})
    if "el_s" in torch:
        ratio = ours["cpu_s_per_1k"] / torch["cpu_s_per_1k"]
        out.append(
            (
                f"{name}: trainer CPU per 1,000 {unit}, zmqdata defaults vs torch",
                f"{ours['cpu_s_per_1k']:.3f} s",
                f"{torch['cpu_s_per_1k']:.3f} s",
                times(ratio),
                NONE,
                NONE,
                f"≤ {TARGET_CPU_VS_TORCH:.1f}x {mark(ratio <= TARGET_CPU_VS_TORCH)}",
            )
        )
    return out
