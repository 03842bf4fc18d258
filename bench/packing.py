"""Text with packing against grain and torch DataLoader: documents, tokenized,
packed first fit into rows of 512 slots, batch 32.

Issue 26's bench. bench/peers.py's text corpus (64 files of 64 synthetic
documents, one a line, made once under bench/results/cache/), each document
tokenized with an ``EOS`` and trimmed to 512 tokens
(``pipelines.document_tokens``: packers take no sequence longer than a row),
packed into rows of 512 slots with segment ids and positions, 8 rows open at
once, in batches of 32 rows. Every system runs in this process's run with 2
worker processes and default settings; this process (the trainer) only
iterates:

* ``zmqdata``: ``list_files`` -> ``map(file_documents)`` -> ``unbatch`` ->
  ``map(document_tokens)`` -> ``pack(512)`` -> ``batch(32)``, read with
  ``distributed_epoch`` from a ``zmqdata up`` deployment of 2 workers: the
  files are the splits, and each worker packs the documents of the files it
  is handed;
* ``grain``: grain's own packer, ``experimental.FirstFitPackIterDataset``
  with 8 bins, batched, ``mp_prefetch`` with 2 worker processes
  (bench/grain_pipelines.py);
* ``torch``: ``DataLoader(num_workers=2)`` of an ``IterableDataset`` whose
  workers take every second file and pack with ``pipelines.first_fit_pack``
  (``Dataset.pack``'s algorithm in plain numpy), default collate
  (bench/torch_pipelines.py);
* ``local``: the same plain code in this process, no workers.

Figures per epoch: real (not padding) tokens/s, the fair figure as the systems
pack differently; rows/s; packing efficiency (real tokens over slots); the
trainer's CPU seconds per 1M real tokens (``getrusage(RUSAGE_SELF)``). First
one epoch of each system is checked: each batch is ``[1..32, 512]``, each row
a packing (segment ids 1, 2, ... then padding, positions from 0 in each
segment, padding tokens 0), and the segments of all rows are the corpus's
documents, each once and whole (as multisets: equal to the local loop's
``document_tokens``); every later epoch must hold all the corpus's real
tokens. Then rounds as bench/exactly_once.py runs them: a warm-up epoch of
each system, then ``repeats`` rounds of one epoch of each, the order reversed
every other round. Medians with the rounds' min-max, and zmqdata's real
tokens/s over the best peer's (torch or grain, by median): issue 26's target
is at least 1.0x. A section for bench/run.py::

    SECTIONS["packing"] = packing.packing

or on its own: ``python bench/packing.py [--quick] [--repeats N]
[--workloads zmqdata,torch]`` (the workloads are the systems).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

import zmqdata as zd
from bench import peers
from bench.common import Bench, Stat, distributed, number, section_main, times
from bench.exactly_once import Figures, Pass, interleaved
from bench.pipelines import (
    PACK_OPEN_ROWS,
    PACKED_KEYS,
    SEQUENCE,
    TEXT_BATCH,
    document_tokens,
    file_documents,
    first_fit_pack,
    stack_batches,
)

WORKERS = peers.WORKERS
SYSTEMS = ("local", "torch", "grain", "zmqdata")
PEERS = ("torch", "grain")
"""The systems zmqdata's ratio is taken against (the best of them)."""
LABELS = {
    "local": "one local process, no workers",
    "torch": f"torch DataLoader(num_workers={WORKERS}), first_fit_pack",
    "grain": f"grain FirstFitPackIterDataset, mp_prefetch(num_workers={WORKERS})",
    "zmqdata": f"zmqdata pack, distributed_epoch, `zmqdata up` {WORKERS} workers",
}
TARGET_VS_BEST = 1.0
"""Issue 26: zmqdata at least as fast as the best of the peers."""
MILLION = 1_000_000
Reader = peers.Reader


# ------------------------------------------------------------------ systems


def packed_dataset(paths: Sequence[str], batch: int = TEXT_BATCH) -> zd.Dataset:
    """zmqdata's pipeline: the files' documents, tokenized, packed, batched.

    >>> import tempfile
    >>> from bench.pipelines import make_corpus
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     paths = make_corpus(folder, 2, 3, vocabulary=50)
    ...     rows = next(iter(packed_dataset(paths, batch=2)))
    >>> {key: value.shape for key, value in rows.items()}
    {'tokens': (2, 512), 'segment_ids': (2, 512), 'positions': (2, 512)}
    """
    files = zd.Dataset.list_files(list(paths), shuffle=False)
    documents = files.map(file_documents).unbatch()
    return documents.map(document_tokens).pack(SEQUENCE).batch(batch)


def local_batches(paths: Sequence[str], batch: int = TEXT_BATCH) -> Iterator[Any]:
    """The plain loop: every document of every file, packed, in batches."""
    documents = (
        document_tokens(text) for path in paths for text in file_documents(path)
    )
    yield from stack_batches(first_fit_pack(documents), batch)


@contextmanager
def _local(paths: list[str], batch: int) -> Iterator[Reader]:
    yield lambda: local_batches(paths, batch)


@contextmanager
def _torch(paths: list[str], batch: int) -> Iterator[Reader]:
    from bench import torch_pipelines

    loader = torch_pipelines.packed_loader(paths, WORKERS, batch)
    yield lambda: loader


@contextmanager
def _grain(paths: list[str], batch: int) -> Iterator[Reader]:
    from bench import grain_pipelines

    dataset = grain_pipelines.packed_loader(paths, WORKERS, batch)
    yield lambda: dataset


@contextmanager
def _zmqdata(paths: list[str], batch: int) -> Iterator[Reader]:
    with peers.zmqdata_up(WORKERS) as target:
        remote = distributed(
            packed_dataset(paths, batch), target, processing_mode="distributed_epoch"
        )
        yield lambda: remote


READERS: dict[str, Callable[[list[str], int], AbstractContextManager[Reader]]] = {
    "local": _local,
    "torch": _torch,
    "grain": _grain,
    "zmqdata": _zmqdata,
}


# ------------------------------------------------------------------ checking


def columns(batch: Any) -> tuple[np.ndarray[Any, Any], ...]:
    """A batch's tokens, segment ids and positions, as numpy arrays: under
    ``Dataset.pack``'s keys (zmqdata, torch, local) or grain's
    (``tokens_segment_ids``, ``tokens_positions``).

    >>> ids = np.ones((1, 2), np.int32)
    >>> [a.tolist() for a in columns({"tokens": ids, "tokens_segment_ids": ids,
    ...                               "tokens_positions": ids - 1})]
    [[[1, 1]], [[1, 1]], [[0, 0]]]
    """
    return tuple(
        np.asarray(batch[key] if key in batch else batch[f"tokens_{key}"])
        for key in PACKED_KEYS
    )


def segments(
    tokens: np.ndarray[Any, Any],
    segment_ids: np.ndarray[Any, Any],
    positions: np.ndarray[Any, Any],
) -> list[bytes]:
    """The sequences packed in rows, each as its tokens' bytes; ValueError
    naming the first row that is not a packing (segment ids 1, 2, ... then
    padding, positions from 0 in each segment, padding tokens and positions 0).

    >>> ids = np.array([[1, 1, 2, 0]])
    >>> rows = np.array([[5, 6, 7, 0]], np.int32)
    >>> [np.frombuffer(s, np.int32).tolist() for s in segments(rows, ids, [[0, 1, 0, 0]])]
    [[5, 6], [7]]
    >>> segments(rows, ids, np.array([[0, 1, 2, 0]]))
    Traceback (most recent call last):
    ...
    ValueError: row 0 is not a packing: segment ids [1, 1, 2, 0], positions [0, 1, 2, 0]
    """
    found = []
    for index, (row, ids, pos) in enumerate(
        zip(tokens, segment_ids, positions, strict=True)
    ):
        used = int(np.count_nonzero(ids))
        starts = np.flatnonzero(np.diff(ids[:used], prepend=0))
        sizes = np.diff(starts, append=used)
        if not (
            used > 0
            and np.array_equal(ids[starts], np.arange(1, len(starts) + 1))
            and not np.any(ids[used:])
            and not np.any(row[used:])
            and not np.any(pos[used:])
            and np.array_equal(pos[:used], np.arange(used) - np.repeat(starts, sizes))
        ):
            raise ValueError(
                f"row {index} is not a packing: segment ids {ids.tolist()}, "
                f"positions {np.asarray(pos).tolist()}"
            )
        found.extend(
            row[a : a + n].tobytes() for a, n in zip(starts, sizes, strict=True)
        )
    return found


def check_epoch(
    name: str, read: Reader, expected: Counter[bytes], batch: int
) -> dict[str, Any]:
    """One epoch of ``read``: batches of ``[1..batch, SEQUENCE]`` rows that are
    packings of the ``expected`` documents, each once and whole; its shape."""
    found: Counter[bytes] = Counter()
    rows = batches = 0
    shape: tuple[int, ...] = ()
    for each in read():
        arrays = columns(each)
        shape = shape or arrays[0].shape
        if any(a.shape != arrays[0].shape for a in arrays) or not (
            0 < len(arrays[0]) <= batch and arrays[0].shape[1:] == (SEQUENCE,)
        ):
            shapes = [a.shape for a in arrays]
            raise RuntimeError(f"{name}: a batch of shapes {shapes}")
        found.update(segments(*arrays))
        rows, batches = rows + len(arrays[0]), batches + 1
    if found != expected:
        missing, extra = expected - found, found - expected
        raise RuntimeError(
            f"{name}: the rows hold not the corpus's documents, each once and"
            f" whole: {missing.total()} of {expected.total()} missing,"
            f" {extra.total()} segments not documents"
        )
    return {"rows": rows, "batches": batches, "shape": list(shape)}


# ------------------------------------------------------------------ measuring


def epoch_pass(name: str, read: Reader, tokens: int) -> Pass:
    """A pass: real tokens/s, rows/s, packing efficiency and trainer CPU s per
    1M tokens of one epoch of ``read``, which must hold ``tokens`` real tokens."""

    def once() -> Figures:
        rows = real = 0
        cpu, start = peers.cpu_s(), time.perf_counter()
        for batch in read():
            ids = columns(batch)[1]
            rows += len(ids)
            real += int(np.count_nonzero(ids))
        wall, cpu = time.perf_counter() - start, peers.cpu_s() - cpu
        if real != tokens:
            raise RuntimeError(f"{name} read {real} real tokens, expected {tokens}")
        return {
            "tokens_s": real / wall,
            "rows_s": rows / wall,
            "efficiency": real / (rows * SEQUENCE),
            "cpu_s_per_1m": cpu * MILLION / real,
        }

    return once


def measure(
    bench: Bench,
    systems: Sequence[str],
    paths: list[str],
    batch: int = TEXT_BATCH,
) -> dict[str, Any]:
    """``systems`` on the documents of ``paths``: each checked once, then
    interleaved rounds; their figures and zmqdata's ratio to the best peer.
    A peer that is not installed, or fails, is skipped with a line."""
    load = os.getloadavg()[0]
    documents = [document_tokens(text) for p in paths for text in file_documents(p)]
    expected = Counter(document.tobytes() for document in documents)
    tokens = sum(map(len, documents))
    out: dict[str, Any] = {}
    passes: dict[str, Pass] = {}
    with ExitStack() as stack:
        for name in (name for name in SYSTEMS if name in systems):
            reason = peers.missing(name)
            if reason is None:
                try:
                    read = stack.enter_context(READERS[name](paths, batch))
                    out[name] = {"label": LABELS[name]}
                    out[name]["check"] = check_epoch(name, read, expected, batch)
                    passes[name] = epoch_pass(name, read, tokens)
                    continue
                except Exception as error:
                    if name not in PEERS:  # zmqdata and local must work
                        raise
                    reason = f"failed: {error!r}"[:300]
            print(f"\n  packing: {name} skipped: {reason}", file=sys.stderr)
            out[name] = {"label": LABELS[name], "skipped": reason}
        figures = interleaved(passes, bench.repeats) if passes else {}
    for name, stats in figures.items():
        out[name].update(stats)
    result = {
        "files": len(paths),
        "documents": len(documents),
        "tokens": tokens,
        "length": SEQUENCE,
        "open_rows": PACK_OPEN_ROWS,
        "batch": batch,
        "workers": WORKERS,
        "repeats": bench.repeats,
        "load_average": round(load, 2),
        "systems": out,
    }
    ran = [name for name in PEERS if name in figures]
    if ran and "zmqdata" in figures:
        best = max(ran, key=lambda name: figures[name]["tokens_s"])
        ours, theirs = figures["zmqdata"]["tokens_s"], figures[best]["tokens_s"]
        result["best_peer"] = best
        result["ratio"] = ours / theirs
        result["round_ratios"] = Stat(
            a / b for a, b in zip(ours.samples, theirs.samples, strict=True)
        )
    return result


def packing(bench: Bench, systems: Sequence[str] = SYSTEMS) -> dict[str, Any]:
    """The section: bench/peers.py's text corpus (quick: 16 files of 32
    documents), every system in ``systems``."""
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise ValueError(f"unknown systems {sorted(unknown)}, of {SYSTEMS}")
    files, documents = (16, 32) if bench.quick else (64, 64)
    return measure(bench, systems, peers.text_pipeline(files, documents).paths)


# ------------------------------------------------------------------ tables


def _spread(stat: Stat, show: Callable[[float], str] = number) -> str:
    """A median with its samples' min-max: "1,234 (1,200-1,300)"."""
    low, high = min(stat.samples), max(stat.samples)
    return f"{show(stat)} ({show(low)}-{show(high)})"


def _percent(value: float) -> str:
    return f"{value:.1%}"


def _cpu(value: float) -> str:
    return f"{value:.3f}"


def details(result: dict[str, Any]) -> str:
    """The section's own table: every system, with the rounds' spreads."""
    from bench.report import mark, markdown

    systems = result["systems"]
    best = systems.get(result.get("best_peer", ""), {})
    rows = []
    for figures in systems.values():
        if "skipped" in figures:
            rows.append((figures["label"], "skipped: " + figures["skipped"], *"————"))
            continue
        rate = figures["tokens_s"]
        rows.append(
            (
                figures["label"],
                _spread(rate),
                times(rate / best["tokens_s"]) if best else "—",
                _spread(figures["rows_s"]),
                _spread(figures["efficiency"], _percent),
                _spread(figures["cpu_s_per_1m"], _cpu),
            )
        )
    header = (
        "system",
        "real tokens/s (min-max)",
        "vs best peer",
        "rows/s (min-max)",
        "packing efficiency (min-max)",
        "trainer CPU s per 1M tokens (min-max)",
    )
    about = (
        f"{result['documents']:,} documents ({result['tokens']:,} tokens, each"
        f" document trimmed to {result['length']}) from {result['files']} files,"
        f" first fit over {result['open_rows']} open rows of {result['length']},"
        f" batch {result['batch']}, {result['workers']} worker processes per"
        f" system; medians of {result['repeats']} interleaved rounds after a"
        f" checked epoch and a warm-up epoch of each; 1-minute load average"
        f" {result['load_average']:.2f} at the start."
    )
    text = f"{about}\n\n{markdown(header, rows)}"
    if best:
        ratio, rounds = result["ratio"], result["round_ratios"]
        text += (
            f"\n\nzmqdata over the best peer ({best['label']}): {times(ratio)}"
            f" (per round {_spread(rounds, times)}), target"
            f" ≥ {TARGET_VS_BEST:.1f}x {mark(ratio >= TARGET_VS_BEST)}"
        )
    return text


def rows(result: dict[str, Any]) -> list[tuple[str, ...]]:
    """The final table's row: zmqdata's real tokens/s against the best peer's."""
    from bench.report import NONE, mark

    if "best_peer" not in result:
        return []
    ours, best = result["systems"]["zmqdata"], result["systems"][result["best_peer"]]
    ratio = result["ratio"]
    return [
        (
            f"packing: real tokens/s, zmqdata defaults vs {best['label']}",
            f"{number(ours['tokens_s'])} tokens/s",
            f"{number(best['tokens_s'])} tokens/s",
            times(ratio),
            NONE,
            NONE,
            f"≥ {TARGET_VS_BEST:.1f}x {mark(ratio >= TARGET_VS_BEST)}",
        )
    ]


if __name__ == "__main__":
    section_main(__doc__, packing, details, SYSTEMS)
