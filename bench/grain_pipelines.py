"""The pipelines of bench/pipelines.py as a grain user writes them.

Imported only where ``import grain`` works (bench/peers.py checks first). The
Dataset API of grain's docs: ``grain.MapDataset.source(files).map(fn)``, batched,
``to_iter_dataset()``, then ``mp_prefetch`` with ``num_workers`` worker
processes (default buffers), iterated once per epoch.

Packed text (``packed_loader``): the files' documents through a
``FlatMapIterDataset``, tokenized, packed by grain's own
``experimental.FirstFitPackIterDataset`` (8 bins, as many as the other systems'
open rows; its other arguments left at their defaults), batched, then
``mp_prefetch``. Its rows name their arrays ``tokens``,
``tokens_segment_ids``, ``tokens_positions``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np
from absl import flags

from bench.pipelines import (
    PACK_OPEN_ROWS,
    SEQUENCE,
    TEXT_BATCH,
    document_tokens,
    file_documents,
)

if not flags.FLAGS.is_parsed():
    # grain 0.2.18 with JAX installed (jaxlib >= 0.10) reads an absl flag in
    # mp_prefetch, which raises where no absl.app parsed the flags:
    # google/grain#1355 (fixed after 0.2.18); its workaround.
    flags.FLAGS.mark_as_parsed()


def loader(
    paths: Sequence[str],
    per_file: Callable[[str], Any],
    batch: int,
    rows: bool,
    workers: int,
    epochs: int = 1,
    read_options: grain.ReadOptions | None = None,
) -> grain.IterDataset:
    """``per_file`` on every path in ``workers`` processes, batched by ``batch``:
    one element per file, or (``rows``) the rows of each file's array.
    ``epochs`` (not with ``rows``): the batches of that many epochs
    (``MapDataset.repeat``), for one iterator over them all; ``read_options``:
    ``to_iter_dataset``'s (None: grain's defaults)."""
    files = grain.MapDataset.source(list(paths)).map(per_file)
    if rows:
        if epochs != 1:
            raise ValueError(f"epochs={epochs} needs batches of files, not rows")
        elements = grain.experimental.RebatchIterDataset(
            files.to_iter_dataset(read_options), batch
        )
    else:
        batches = files.batch(batch)
        repeated = batches.repeat(epochs) if epochs > 1 else batches
        elements = repeated.to_iter_dataset(read_options)
    return elements.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))


class FileDocuments(grain.experimental.FlatMapTransform):  # type: ignore[misc]
    """A file's path -> its documents (``file_documents``)."""

    max_fan_out = 1 << 16

    def flat_map(self, element: str) -> np.ndarray[Any, Any]:
        return file_documents(element)


def token_features(text: str) -> dict[str, np.ndarray[Any, Any]]:
    """A document's ``document_tokens``, as the feature grain's packer packs."""
    return {"tokens": document_tokens(text)}


def packed_loader(
    paths: Sequence[str], workers: int, batch: int = TEXT_BATCH
) -> grain.IterDataset:
    """The files' documents, tokenized, packed first fit into rows of 512,
    batched by ``batch``, in ``workers`` processes."""
    files = grain.MapDataset.source(list(paths)).to_iter_dataset()
    documents = grain.experimental.FlatMapIterDataset(files, FileDocuments())
    sequences = documents.map(token_features)
    packed = grain.experimental.FirstFitPackIterDataset(
        sequences, length_struct={"tokens": SEQUENCE}, num_packing_bins=PACK_OPEN_ROWS
    )
    return packed.batch(batch).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=workers)
    )
