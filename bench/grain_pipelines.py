"""The pipelines of bench/pipelines.py as a grain user writes them.

Imported only where ``import grain`` works (bench/peers.py checks first). The
Dataset API of grain's docs: ``grain.MapDataset.source(files).map(fn)``, batched,
``to_iter_dataset()``, then ``mp_prefetch`` with ``num_workers`` worker
processes (default buffers), iterated once per epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grain


def loader(
    paths: Sequence[str],
    per_file: Callable[[str], Any],
    batch: int,
    rows: bool,
    workers: int,
) -> grain.IterDataset:
    """``per_file`` on every path in ``workers`` processes, batched by ``batch``:
    one element per file, or (``rows``) the rows of each file's array."""
    files = grain.MapDataset.source(list(paths)).map(per_file)
    if rows:
        elements = grain.experimental.RebatchIterDataset(files.to_iter_dataset(), batch)
    else:
        elements = files.batch(batch).to_iter_dataset()
    return elements.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
