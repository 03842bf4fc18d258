"""The pipelines of bench/pipelines.py as an SPDL user writes them.

Imported only where ``import spdl.pipeline`` works (bench/peers.py checks
first). SPDL's ``PipelineBuilder`` as its docs build one: the paths as the
source, the per-file function piped with ``concurrency=workers`` on a
``build(num_threads=workers)`` thread pool, ``aggregate`` + ``np.stack`` into
batches, a default sink; a pipeline per epoch. ``executor``: the same pipe run
in a ``ProcessPoolExecutor`` of ``workers`` processes (how SPDL's "Pipeline
Parallelism" page moves work that holds the GIL off the threads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np
from spdl.pipeline import PipelineBuilder


def epoch(
    paths: Sequence[str],
    per_file: Callable[[str], Any],
    batch: int,
    rows: bool,
    workers: int,
    executor: Executor | None = None,
) -> Iterator[Any]:
    """One epoch's batches: ``per_file`` on every path, one element per file or
    (``rows``) the rows of each file's array, stacked ``batch`` at a time."""
    builder = PipelineBuilder().add_source(list(paths))
    builder = builder.pipe(per_file, concurrency=workers, executor=executor)
    if rows:
        builder = builder.disaggregate()
    pipeline = (
        builder.aggregate(batch).pipe(np.stack).add_sink().build(num_threads=workers)
    )
    with pipeline.auto_stop():
        yield from pipeline.get_iterator()
