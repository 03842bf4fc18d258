"""Reading Parquet and WebDataset shards: zmqdata against one local process and Ray Data.

    python bench/formats.py [--quick] [--repeats N] [--json samples.json]
    python bench/formats.py --workloads webdataset        # one workload
    python bench/run.py --only formats

The data is written into a temporary folder first (seeded, removed at the
end):

* Parquet: 4 files x 262,144 rows (row groups of 65,536), columns ``id``
  int64, ``x`` float64, ``y`` float32, ``label`` int32, ``text`` a short
  string (``"gamma-417"``), ~6 MB a file;
* token rows: 1 Parquet file x 262,144 LM-style rows (row groups of 65,536),
  ``id`` int64, ``score`` float32, ``source`` int16, ``tokens`` a list of 8-96
  int32 token ids (lengths drawn per row);
* WebDataset: 8 tar shards x 250 samples, each a ~20 KB 256x256 JPEG
  (``jpg``) and a class (``cls``).

Workloads (an element is what the trainer receives):

* ``parquet_batches``: the 4 files in batches of 1,024 rows, a ``dict`` of
  numpy columns (1,024 batches);
* ``parquet_rows``: the first file, row by row, a ``dict`` of numpy values
  (262,144 rows);
* ``token_rows``: the token file row by row, the same ``dict`` with ``tokens``
  a 1-D int32 array (262,144 rows);
* ``webdataset``: the 8 shards, one decoded sample at a time: the JPEG as a
  ``uint8`` array ``(256, 256, 3)`` (Pillow), the class an integer.

Systems, each reading the same files to the same elements:

* ``local``: one process, the reader a user would write without zmqdata:
  ``pyarrow.parquet.ParquetFile.iter_batches`` with columns to numpy (rows:
  batches of 65,536 cut into ``dict`` rows, a list column's values the
  arrays of ``to_numpy``'s object array); the ``webdataset`` package's
  ``WebDataset(urls, shardshuffle=False).decode("rgb8")`` (``tarfile`` +
  Pillow where ``import webdataset`` fails);
* ``zmqdata_local``: ``zd.Dataset.from_parquet`` / ``from_webdataset(decode=True)``
  iterated in this process, no service;
* ``zmqdata_1``, ``zmqdata_2``: the same dataset read as ``distributed_epoch``
  from 1 and from 2 worker processes (``common.cluster``, the dispatcher in a
  process of its own), default settings;
* ``ray``: Ray Data as bench/peers.py runs it (``ray.init(num_cpus=2)``,
  progress bars and worker logs off, defaults otherwise):
  ``ray.data.read_parquet`` + ``iter_batches(batch_size=1024,
  batch_format="numpy")`` or ``iter_rows()``; ``ray.data.read_webdataset``
  (its default decoder: JPEG to a numpy array) + ``iter_rows()``. Skipped with
  a line where ``import ray`` fails (``pip install -e '.[peers]'``).

All five are up at once (both clusters, Ray), and the passes interleave: a
warm-up pass of each system, then ``repeats`` rounds of one pass of each, the
order reversed every other round, so that drift on a shared machine hits every
system alike. Every pass checks its element and row counts. Figures: elements/s
(rows/s too for batches) and the trainer's CPU per element (``time.process_time``
around the pass: every thread of this process, which runs no dispatcher and
no worker), medians with min-max, ratios of medians, and the median (min-max)
of the per-round ratios.

Issue targets: zmqdata with 1 worker at least the local single-process rate
(``zmqdata_1 / local >= 1``), on the row workloads with no more trainer CPU per
row than local, and with 2 workers at least the best peer
(``zmqdata_2 / max(local, ray) >= 1``).
"""

from __future__ import annotations

import importlib.util
import io
import logging
import statistics
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench.common import Bench, Stat, cluster, number, section_main, times
from zmqdata import service

TARGET_ONE_VS_LOCAL = 1.0
"""The issue's target: 1 worker reads at least as fast as one local process."""
TARGET_TWO_VS_PEER = 1.0
"""... and 2 workers at least as fast as the best peer (local or Ray Data)."""
TARGET_CPU_VS_LOCAL = 1.0
"""Through 1 worker, the trainer's CPU per row at most local's (row workloads)."""
CPU_TARGETED = frozenset({"parquet_rows", "token_rows"})
"""The workloads with the CPU target."""
RAY_CPUS = 2
SYSTEMS = ("local", "zmqdata_local", "zmqdata_1", "zmqdata_2", "ray")
PEERS = ("local", "ray")
OPTIONAL = frozenset({"ray"})
"""Systems skipped with a line (not ending the run) where they fail."""
WORKLOADS = ("parquet_batches", "parquet_rows", "token_rows", "webdataset")
PARQUET = ("parquet_batches", "parquet_rows", "token_rows")
"""The workloads that read Parquet (with pyarrow)."""
WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
TOKENS = (8, 96)
"""The fewest and most token ids in a token row."""
VOCABULARY = 32_000
"""Token ids are drawn below this."""


@dataclass(frozen=True)
class Sizes:
    parquet_files: int = 4
    parquet_rows: int = 262_144
    """Rows per file."""
    row_group: int = 65_536
    batch_rows: int = 1024
    rows_files: int = 1
    """Files the ``parquet_rows`` workload reads (the first ones)."""
    token_rows: int = 262_144
    """Rows of the token file (row groups of ``row_group``)."""
    shards: int = 8
    samples: int = 250
    """Samples per shard."""
    image_side: int = 256
    distinct_images: int = 250
    """JPEGs made (the shards repeat them under other keys)."""


FULL = Sizes()
QUICK = Sizes(
    parquet_files=2,
    parquet_rows=16_384,
    row_group=4_096,
    rows_files=1,
    token_rows=16_384,
    shards=2,
    samples=40,
    image_side=64,
    distinct_images=20,
)


# ------------------------------------------------------------------ the data


def write_parquet(folder: Path, sizes: Sizes, seed: int = 0) -> list[str]:
    """``sizes.parquet_files`` seeded Parquet files in ``folder``; their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    words = np.array(WORDS)
    paths = []
    for index in range(sizes.parquet_files):
        n = sizes.parquet_rows
        ids = np.arange(index * n, (index + 1) * n, dtype=np.int64)
        text = [
            f"{w}-{i % 997}"
            for w, i in zip(words[rng.integers(0, 8, n)], ids, strict=True)
        ]
        table = pa.table(
            {
                "id": ids,
                "x": rng.random(n),
                "y": rng.random(n, dtype=np.float32),
                "label": rng.integers(0, 1000, n, dtype=np.int32),
                "text": pa.array(text, pa.string()),
            }
        )
        path = folder / f"part-{index:03d}.parquet"
        pq.write_table(table, path, row_group_size=sizes.row_group)
        paths.append(str(path))
    return paths


def write_tokens(folder: Path, sizes: Sizes, seed: int = 0) -> str:
    """A seeded Parquet file of ``sizes.token_rows`` LM-style rows in ``folder``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    n = sizes.token_rows
    offsets = np.zeros(n + 1, np.int32)
    np.cumsum(rng.integers(TOKENS[0], TOKENS[1] + 1, n), out=offsets[1:])
    ids = rng.integers(0, VOCABULARY, offsets[-1], dtype=np.int32)
    table = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "score": rng.random(n, dtype=np.float32),
            "source": rng.integers(0, 64, n, dtype=np.int16),
            "tokens": pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
        }
    )
    path = folder / "tokens.parquet"
    pq.write_table(table, path, row_group_size=sizes.row_group)
    return str(path)


def jpeg(index: int, side: int, noise: int = 20, quality: int = 85) -> bytes:
    """A seeded ``side`` x ``side`` JPEG: colour ramps plus noise (~20 KB at 256)."""
    from PIL import Image

    rng = np.random.default_rng(index)
    yy, xx = np.mgrid[0:side, 0:side].astype(np.float32) * (256 / side)
    a, b = rng.uniform(0.3, 1.5, 2)
    ramps = np.stack([xx * a + yy * b, yy * a, (xx + yy) * b], -1)
    pixels = (ramps.astype(np.int32) % 256).astype(np.int16)
    pixels += rng.integers(-noise, noise + 1, pixels.shape, dtype=np.int16)
    buffer = io.BytesIO()
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    image.save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def write_shards(folder: Path, sizes: Sizes) -> tuple[list[str], int]:
    """``sizes.shards`` WebDataset tar shards in ``folder``: their paths, and
    the mean JPEG size in bytes."""
    images = [jpeg(i, sizes.image_side) for i in range(sizes.distinct_images)]
    paths = []
    for shard in range(sizes.shards):
        path = folder / f"shard-{shard:03d}.tar"
        with tarfile.open(path, "w") as tar:
            for index in range(sizes.samples):
                key = f"{shard:03d}{index:05d}"
                image = images[(shard * sizes.samples + index) % len(images)]
                for ext, data in (("jpg", image), ("cls", b"%d" % (index % 100))):
                    member = tarfile.TarInfo(f"{key}.{ext}")
                    member.size, member.mtime = len(data), 0
                    tar.addfile(member, io.BytesIO(data))
        paths.append(str(path))
    return paths, round(statistics.mean(len(image) for image in images))


# ------------------------------------------------------------------ local readers


def pyarrow_batches(paths: Sequence[str], batch_rows: int) -> Iterator[dict[str, Any]]:
    """``batch_rows`` rows at a time as ``dict`` of numpy columns, plain pyarrow."""
    import pyarrow.parquet as pq

    for path in paths:
        with pq.ParquetFile(path) as parquet:
            for batch in parquet.iter_batches(batch_size=batch_rows):
                yield {
                    name: column.to_numpy(zero_copy_only=False)
                    for name, column in zip(
                        batch.schema.names, batch.columns, strict=True
                    )
                }


def pyarrow_rows(paths: Sequence[str], read_rows: int = 65_536) -> Iterator[Any]:
    """Rows as ``dict`` of numpy values (``str`` text, a list column's values the
    1-D arrays of ``to_numpy``'s object array), plain pyarrow."""
    for columns in pyarrow_batches(paths, read_rows):
        names = list(columns)
        for values in zip(*columns.values(), strict=True):
            yield dict(zip(names, values, strict=True))


def _decode_sample(sample: dict[str, Any]) -> dict[str, Any]:
    from PIL import Image

    with Image.open(io.BytesIO(sample["jpg"])) as image:
        sample["jpg"] = np.asarray(image.convert("RGB"))
    sample["cls"] = int(sample["cls"])
    return sample


def tar_samples(urls: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Decoded samples with ``tarfile`` + Pillow: where ``webdataset`` is missing."""
    for url in urls:
        with tarfile.open(url, "r|") as tar:
            sample: dict[str, Any] = {}
            for member in tar:
                key, _, ext = member.name.partition(".")
                if sample and sample["__key__"] != key:
                    yield _decode_sample(sample)
                    sample = {}
                sample["__key__"] = key
                sample[ext] = tar.extractfile(member).read()  # type: ignore[union-attr]
            if sample:
                yield _decode_sample(sample)


def local_samples(urls: Sequence[str]) -> Iterable[dict[str, Any]]:
    """The ``webdataset`` package's pipeline, ``.decode("rgb8")``, or ``tar_samples``."""
    if importlib.util.find_spec("webdataset") is None:
        return tar_samples(urls)
    import webdataset as wds

    return wds.WebDataset(list(urls), shardshuffle=False).decode("rgb8")


# ------------------------------------------------------------------ workloads


@dataclass(frozen=True)
class Workload:
    name: str
    about: str
    unit: str
    """What an element is: rows, batches, samples."""
    elements: int
    rows: int
    """Rows per pass (= elements, but for batches)."""
    files: tuple[str, ...]
    local_label: str
    local: Callable[[], Iterable[Any]]
    dataset: zd.Dataset
    ray: Callable[[Any], Callable[[], Iterable[Any]]]
    """``ray.data`` -> one pass's elements, a new iterator each call."""
    batched: bool = False


def batch_length(element: Any) -> int:
    """Rows in a batch (a ``dict`` of columns)."""
    return len(next(iter(element.values())))


def workloads(folder: Path, sizes: Sizes, names: Sequence[str]) -> dict[str, Workload]:
    """The data, written into ``folder``, and the workloads ``names`` over it."""
    out: dict[str, Workload] = {}
    wanted = set(names)
    if wanted & {"parquet_batches", "parquet_rows"}:
        paths = write_parquet(folder, sizes)
        rows = sizes.parquet_files * sizes.parquet_rows
        size = sizes.batch_rows
        batches = -(-rows // size)  # row groups are multiples of the batch
        out["parquet_batches"] = Workload(
            name="parquet_batches",
            about=(
                f"{len(paths)} Parquet files x {sizes.parquet_rows:,} rows"
                f" (5 columns), batches of {size:,} rows"
            ),
            unit="batches",
            elements=batches,
            rows=rows,
            files=tuple(paths),
            local_label="pyarrow iter_batches, one process",
            local=lambda: pyarrow_batches(paths, size),
            dataset=zd.Dataset.from_parquet(paths, batch_rows=size),
            ray=lambda data: _ray_batches(data.read_parquet(paths), size),
            batched=True,
        )
        first = paths[: sizes.rows_files]
        count = sizes.rows_files * sizes.parquet_rows
        out["parquet_rows"] = Workload(
            name="parquet_rows",
            about=f"{len(first)} Parquet file x {sizes.parquet_rows:,} rows, one row"
            " per element",
            unit="rows",
            elements=count,
            rows=count,
            files=tuple(first),
            local_label="pyarrow iter_batches to rows, one process",
            local=lambda: pyarrow_rows(first),
            dataset=zd.Dataset.from_parquet(first),
            ray=lambda data: _ray_rows(data.read_parquet(first)),
        )
    if "token_rows" in wanted:
        tokens = [write_tokens(folder, sizes)]
        out["token_rows"] = Workload(
            name="token_rows",
            about=(
                f"1 Parquet file x {sizes.token_rows:,} token rows ({TOKENS[0]}-"
                f"{TOKENS[1]} int32 ids + 3 columns), one row per element"
            ),
            unit="rows",
            elements=sizes.token_rows,
            rows=sizes.token_rows,
            files=tuple(tokens),
            local_label="pyarrow iter_batches to rows, one process",
            local=lambda: pyarrow_rows(tokens),
            dataset=zd.Dataset.from_parquet(tokens),
            ray=lambda data: _ray_rows(data.read_parquet(tokens)),
        )
    if "webdataset" in wanted:
        urls, mean = write_shards(folder, sizes)
        count = sizes.shards * sizes.samples
        side = sizes.image_side
        package = importlib.util.find_spec("webdataset") is not None
        out["webdataset"] = Workload(
            name="webdataset",
            about=(
                f"{len(urls)} tar shards x {sizes.samples} samples, {side}x{side}"
                f" JPEG ({mean / 1000:.1f} KB) + cls, decoded"
            ),
            unit="samples",
            elements=count,
            rows=count,
            files=tuple(urls),
            local_label=(
                'webdataset package .decode("rgb8"), one process'
                if package
                else "tarfile + Pillow, one process (no webdataset package)"
            ),
            local=lambda: local_samples(urls),
            dataset=zd.Dataset.from_webdataset(urls, decode=True),
            ray=lambda data: _ray_rows(data.read_webdataset(urls)),
        )
    return {name: out[name] for name in names if name in out}


def _ray_batches(dataset: Any, size: int) -> Callable[[], Iterable[Any]]:
    return lambda: dataset.iter_batches(batch_size=size, batch_format="numpy")


def _ray_rows(dataset: Any) -> Callable[[], Iterable[Any]]:
    return lambda: dataset.iter_rows()


# ------------------------------------------------------------------ measuring

Figures = dict[str, float]
Pass = Callable[[], Figures]


def timed(workload: Workload, read: Callable[[], Iterable[Any]]) -> Pass:
    """One pass: elements/s, rows/s and this process's CPU µs per element of
    draining ``read()``, counts checked."""

    def once() -> Figures:
        elements = rows = 0
        start, cpu = time.perf_counter(), time.process_time()
        for element in read():
            elements += 1
            if workload.batched:
                rows += batch_length(element)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        rows = rows if workload.batched else elements
        if (elements, rows) != (workload.elements, workload.rows):
            raise RuntimeError(
                f"{workload.name}: read {elements:,} {workload.unit} ({rows:,} rows),"
                f" expected {workload.elements:,} ({workload.rows:,} rows)"
            )
        return {
            "rate": elements / elapsed,
            "rows_s": rows / elapsed,
            "cpu_us": cpu * 1e6 / elements,
        }

    return once


def interleave(
    passes: dict[str, Pass], repeats: int, optional: frozenset[str] = OPTIONAL
) -> tuple[dict[str, dict[str, Stat]], dict[str, str]]:
    """A warm-up pass of each system, then ``repeats`` rounds of one pass of
    each, the order reversed every other round. Per system and figure, the
    Stat of its timed passes; and why each optional system that failed (then
    left out of the later rounds) was skipped."""
    runs: dict[str, list[Figures]] = {name: [] for name in passes}
    skipped: dict[str, str] = {}

    def run(name: str, keep: bool) -> None:
        try:
            figures = passes[name]()
        except Exception as error:
            if name not in optional:
                raise
            skipped[name] = f"failed: {error!r}"[:300]
            print(f"\n  {name} skipped: {skipped[name]}", file=sys.stderr)
            return
        if keep:
            runs[name].append(figures)

    for name in passes:
        run(name, keep=False)
    for round_ in range(repeats):
        names = list(passes) if round_ % 2 == 0 else list(passes)[::-1]
        for name in names:
            if name not in skipped:
                run(name, keep=True)
    stats = {
        name: {key: Stat(f[key] for f in samples) for key in samples[0]}
        for name, samples in runs.items()
        if name not in skipped
    }
    return stats, skipped


def round_ratios(a: Stat, b: Stat) -> Stat:
    """The per-round ratios ``a / b`` of two systems' samples (same rounds)."""
    return Stat(x / y for x, y in zip(a.samples, b.samples, strict=True))


def compared(stats: dict[str, dict[str, Stat]]) -> dict[str, Any]:
    """The targets' ratios: 1 worker vs local (rate, trainer CPU per element),
    2 workers vs the best peer."""
    out: dict[str, Any] = {}
    rate = {name: figures["rate"] for name, figures in stats.items()}
    if "zmqdata_1" in rate and "local" in rate:
        out["one_vs_local"] = rate["zmqdata_1"] / rate["local"]
        out["one_vs_local_rounds"] = round_ratios(rate["zmqdata_1"], rate["local"])
        cpu, local = stats["zmqdata_1"]["cpu_us"], stats["local"]["cpu_us"]
        out["one_cpu_vs_local"] = cpu / local
        out["one_cpu_vs_local_rounds"] = round_ratios(cpu, local)
    peers = [name for name in PEERS if name in rate]
    if "zmqdata_2" in rate and peers:
        best = max(peers, key=lambda name: rate[name])
        out["best_peer"] = best
        out["two_vs_peer"] = rate["zmqdata_2"] / rate[best]
        out["two_vs_peer_rounds"] = round_ratios(rate["zmqdata_2"], rate[best])
    return out


# ------------------------------------------------------------------ the systems


def ray_missing() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "`import ray` fails (pip install -e '.[peers]')"
    return None


@contextmanager
def ray_data() -> Iterator[Any]:
    """``ray.data`` in a Ray started as bench/peers.py starts it."""
    import ray
    import ray.data

    ray.init(
        num_cpus=RAY_CPUS,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.WARNING,
    )
    try:
        logging.getLogger("ray.data").setLevel(logging.ERROR)
        ray.data.DataContext.get_current().enable_progress_bars = False
        yield ray.data
    finally:
        ray.shutdown()


def labels(workload: Workload) -> dict[str, str]:
    return {
        "local": workload.local_label,
        "zmqdata_local": "zmqdata, in this process (no service)",
        "zmqdata_1": "zmqdata distributed_epoch, 1 worker process",
        "zmqdata_2": "zmqdata distributed_epoch, 2 worker processes",
        "ray": f"Ray Data, ray.init(num_cpus={RAY_CPUS})",
    }


def formats(bench: Bench, names: Sequence[str] = WORKLOADS) -> dict[str, Any]:
    """The section: every workload on every system, interleaved passes."""
    sizes = QUICK if bench.quick else FULL
    result: dict[str, Any] = {"repeats": bench.repeats}
    if importlib.util.find_spec("pyarrow") is None:
        reason = "`import pyarrow` fails (pip install -e '.[parquet]')"
        for name in PARQUET:
            result[name] = {"skipped": reason}
        names = [name for name in names if name not in PARQUET]
    if "webdataset" in names and importlib.util.find_spec("PIL") is None:
        result["webdataset"] = {"skipped": "`import PIL` fails (pip install Pillow)"}
        names = [name for name in names if name != "webdataset"]
    with (
        tempfile.TemporaryDirectory(prefix="zd-formats-") as folder,
        ExitStack() as stack,
    ):
        chosen = workloads(Path(folder), sizes, names)
        if not chosen:
            return result
        targets = {n: stack.enter_context(cluster(n, apart=True)) for n in (1, 2)}
        ray_reason = ray_missing()
        data = None
        if ray_reason is None:
            try:
                data = stack.enter_context(ray_data())
            except Exception as error:
                ray_reason = f"failed: {error!r}"[:300]
        if ray_reason:
            print(f"\n  formats: ray skipped: {ray_reason}", file=sys.stderr)
        for name, workload in chosen.items():
            readers: dict[str, Callable[[], Iterable[Any]]] = {
                "local": workload.local,
                "zmqdata_local": lambda w=workload: w.dataset,
            }
            for n, target in targets.items():
                remote = workload.dataset.apply(
                    service.distribute("distributed_epoch", target)
                )
                readers[f"zmqdata_{n}"] = lambda r=remote: r
            skipped = {"ray": ray_reason} if ray_reason else {}
            if data is not None:
                try:
                    readers["ray"] = workload.ray(data)
                except Exception as error:
                    skipped["ray"] = f"failed: {error!r}"[:300]
            passes = {system: timed(workload, read) for system, read in readers.items()}
            stats, failed = interleave(passes, bench.repeats)
            skipped.update(failed)
            result[name] = {
                "about": workload.about,
                "unit": workload.unit,
                "elements": workload.elements,
                "rows": workload.rows,
                "batched": workload.batched,
                "labels": labels(workload),
                "systems": stats,
                "skipped_systems": skipped,
                **compared(stats),
            }
    return result


# ------------------------------------------------------------------ tables


def _spread(stat: Stat, ratio: bool = False) -> str:
    low, high = min(stat.samples), max(stat.samples)
    if ratio:
        return f"{times(low)}-{times(high)}"
    return f"{number(low)}-{number(high)}"


def _cpu(r: dict[str, Any], system: str) -> str:
    cpu = r["systems"][system]["cpu_us"]
    return f"{number(cpu)} µs ({_spread(cpu)})"


def _ratio(value: float, rounds: Stat, target: float, most: bool = False) -> str:
    """A ratio of medians, its per-round spread and whether it meets ``target``
    (at least it, or at most it with ``most``)."""
    from bench.report import mark

    met = value <= target if most else value >= target
    return f"{times(value)} ({_spread(rounds, ratio=True)}) {mark(met)}"


def _rate(r: dict[str, Any], system: str) -> str:
    figures = r["systems"][system]
    text = f"{number(figures['rate'])} {r['unit']}/s ({_spread(figures['rate'])})"
    if r["batched"]:
        text += f"; {number(figures['rows_s'])} rows/s"
    return text


def details(result: dict[str, Any]) -> str:
    """The section's tables: every system per workload, then the targets."""
    from bench.report import markdown

    rows: list[tuple[str, ...]] = []
    targets: list[tuple[str, ...]] = []
    for name in WORKLOADS:
        r = result.get(name)
        if r is None:
            continue
        if "skipped" in r:
            rows.append((name, "skipped: " + r["skipped"], *"—————"))
            continue
        local = r["systems"].get("local")
        for system in SYSTEMS:
            label = r["labels"][system]
            if system not in r["systems"]:
                reason = r["skipped_systems"].get(system, "not run")
                rows.append((name, label, "skipped: " + reason, *"————"))
                continue
            figures = r["systems"][system]
            vs = round_ratios(figures["rate"], local["rate"]) if local else None
            cpu = round_ratios(figures["cpu_us"], local["cpu_us"]) if local else None
            rows.append(
                (
                    name,
                    label,
                    _rate(r, system),
                    times(figures["rate"] / local["rate"]) if local else "—",
                    f"{times(vs)} ({_spread(vs, ratio=True)})" if vs else "—",
                    _cpu(r, system),
                    f"{times(cpu)} ({_spread(cpu, ratio=True)})" if cpu else "—",
                )
            )
        one, two = r.get("one_vs_local"), r.get("two_vs_peer")
        cpu_one = r.get("one_cpu_vs_local") if name in CPU_TARGETED else None
        targets.append(
            (
                f"{name}: {r['about']}",
                (
                    _ratio(one, r["one_vs_local_rounds"], TARGET_ONE_VS_LOCAL)
                    if one is not None
                    else "—"
                ),
                (
                    _ratio(
                        cpu_one,
                        r["one_cpu_vs_local_rounds"],
                        TARGET_CPU_VS_LOCAL,
                        most=True,
                    )
                    if cpu_one is not None
                    else "—"
                ),
                r["labels"][r["best_peer"]] if "best_peer" in r else "—",
                (
                    _ratio(two, r["two_vs_peer_rounds"], TARGET_TWO_VS_PEER)
                    if two is not None
                    else "—"
                ),
            )
        )
    header = (
        "workload",
        "system",
        "median (min-max)",
        "vs local",
        "per round",
        "trainer CPU per element",
        "CPU vs local, per round",
    )
    about = (
        "All systems up at once, interleaved passes: medians of"
        f" {result['repeats']} rounds after a warm-up pass of each; 'per round' is"
        " the median (min-max) of each round's ratio to the local process. Trainer"
        " CPU: this process's CPU time over a pass (every thread; the dispatcher"
        " and the workers run in processes of their own) per element."
    )
    target_header = (
        "workload",
        f"1 worker / local (≥ {TARGET_ONE_VS_LOCAL:.1f}x)",
        f"1 worker trainer CPU / local (≤ {TARGET_CPU_VS_LOCAL:.1f}x)",
        "best peer",
        f"2 workers / best peer (≥ {TARGET_TWO_VS_PEER:.1f}x)",
    )
    return "\n\n".join(
        [about, markdown(header, rows), markdown(target_header, targets)]
    )


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's rows: the targets per workload."""
    from bench.report import NONE, mark

    out = []
    for name in WORKLOADS:
        r = result.get(name, {})
        systems, unit = r.get("systems", {}), r.get("unit", "")
        if "one_vs_local" in r:
            one = r["one_vs_local"]
            out.append(
                (
                    f"{name}: zmqdata 1 worker vs {r['labels']['local']}",
                    f"{number(systems['zmqdata_1']['rate'])} {unit}/s",
                    f"{number(systems['local']['rate'])} {unit}/s",
                    times(one),
                    NONE,
                    NONE,
                    f"≥ {TARGET_ONE_VS_LOCAL:.1f}x {mark(one >= TARGET_ONE_VS_LOCAL)}",
                )
            )
        if "one_cpu_vs_local" in r and name in CPU_TARGETED:
            cpu = r["one_cpu_vs_local"]
            out.append(
                (
                    f"{name}: trainer CPU per row, zmqdata 1 worker vs local",
                    f"{number(systems['zmqdata_1']['cpu_us'])} µs",
                    f"{number(systems['local']['cpu_us'])} µs",
                    times(cpu),
                    NONE,
                    NONE,
                    f"≤ {TARGET_CPU_VS_LOCAL:.1f}x {mark(cpu <= TARGET_CPU_VS_LOCAL)}",
                )
            )
        if "two_vs_peer" in r:
            two, best = r["two_vs_peer"], r["best_peer"]
            out.append(
                (
                    f"{name}: zmqdata 2 workers vs best peer, {r['labels'][best]}",
                    f"{number(systems['zmqdata_2']['rate'])} {unit}/s",
                    f"{number(systems[best]['rate'])} {unit}/s",
                    times(two),
                    NONE,
                    NONE,
                    f"≥ {TARGET_TWO_VS_PEER:.1f}x {mark(two >= TARGET_TWO_VS_PEER)}",
                )
            )
    return out


def main() -> None:
    section_main(__doc__ or "", formats, details, list(WORKLOADS), None)


if __name__ == "__main__":
    from bench.formats import main as run

    run()
