"""The pipelines of bench/pipelines.py as a PyTorch user writes them: DataLoaders.

Imported only where ``import torch`` works (bench/peers.py checks first).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from bench.pipelines import (
    IMAGE_BATCH,
    TEXT_BATCH,
    document_tokens,
    file_documents,
    first_fit_pack,
    image_element,
    text_sequences,
)


class ImageFiles(torch.utils.data.Dataset):  # type: ignore[misc]
    """Map-style: item ``i`` is ``image_element(paths[i])``."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray[Any, Any]:
        return image_element(self.paths[index])


class PackedText(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Iterable-style: the packed sequences of the files, each DataLoader worker
    reading every ``num_workers``-th file (the sharding the torch docs show)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
        for path in worker_files(self.paths):
            yield from text_sequences(path)


class PackedDocuments(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Iterable-style: the documents of each DataLoader worker's files
    (``worker_files``), tokenized and packed first fit (rows of 512)."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = list(paths)

    def __iter__(self) -> Iterator[dict[str, np.ndarray[Any, Any]]]:
        documents = (
            document_tokens(text)
            for path in worker_files(self.paths)
            for text in file_documents(path)
        )
        return first_fit_pack(documents)


def worker_files(paths: list[str]) -> list[str]:
    """This DataLoader worker's files: every ``num_workers``-th (the sharding
    the torch docs show); all of them outside a worker."""
    info = torch.utils.data.get_worker_info()
    return paths[info.id :: info.num_workers] if info else paths


def image_loader(paths: Sequence[str], workers: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        ImageFiles(paths), batch_size=IMAGE_BATCH, num_workers=workers
    )


def text_loader(paths: Sequence[str], workers: int) -> torch.utils.data.DataLoader:
    return torch.utils.data.DataLoader(
        PackedText(paths), batch_size=TEXT_BATCH, num_workers=workers
    )


def packed_loader(
    paths: Sequence[str], workers: int, batch: int = TEXT_BATCH
) -> torch.utils.data.DataLoader:
    """``PackedDocuments`` in ``workers`` processes, default collate: batches of
    dicts of ``[batch, 512]`` tensors."""
    return torch.utils.data.DataLoader(
        PackedDocuments(paths), batch_size=batch, num_workers=workers
    )
