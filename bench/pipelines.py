"""The real pipelines that bench/peers.py runs on every system: their data and code.

Not a script. Every system (torch DataLoader, zmqdata, Ray Data, one local
process) calls the same functions of this module, so they all do the same
work; worker processes import it by reference (``bench`` on ``PYTHONPATH``).

* images: a JPEG file -> decoded (Pillow) -> random 112x112 crop -> random
  horizontal flip -> float32 CHW normalized (``image_element(path)``), batch 64.
  The randomness is seeded by the file's name, so every system produces the
  same elements.
* text: a file of documents, one a line -> a word-piece-like hashed tokenizer
  (``tokenize``) -> packed into 512-token int32 sequences
  (``text_sequences(path)``, the remainder of each file dropped), batch 32.
* packed text (bench/packing.py): a file's documents (``file_documents``),
  each tokenized with an ``EOS`` and trimmed to 512 tokens
  (``document_tokens``), packed first fit into rows of 512 slots with segment
  ids and positions (``first_fit_pack``: the algorithm of zmqdata's
  ``Dataset.pack``, in plain numpy, as a torch user writes it), batch 32.

The data is generated once, seeded, into a cache folder (``make_images``,
``make_corpus``); a folder that is complete is reused.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as folder:
...     paths = make_images(folder, 2)
...     image_element(paths[0]).shape
(3, 112, 112)
>>> tokenize("Hello, world").tolist() == tokenize("hello , WORLD").tolist()
True
"""

from __future__ import annotations

import io
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_SIDE = 160
CROP = 112
IMAGE_BATCH = 64
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)

SEQUENCE = 512
TEXT_BATCH = 32
VOCAB_SIZE = 32_000
PAD, EOS, RESERVED = 0, 1, 2
"""Token ids: padding, end of document; hashed pieces take ids from RESERVED up."""
PIECE = 6
"""Characters per word piece: a longer word becomes several pieces."""
PACK_OPEN_ROWS = 8
"""Rows a first-fit packer keeps open: ``Dataset.pack``'s default."""
PACKED_KEYS = ("tokens", "segment_ids", "positions")
"""The arrays of a packed row (``Dataset.pack``'s names)."""

_COMPLETE = "complete"
"""The file written last into a cache folder: the data before it is whole."""


def _seed(path: str) -> int:
    """A per-file seed: the CRC-32 of the file's name (not of its folder)."""
    return zlib.crc32(os.path.basename(path).encode())


# ------------------------------------------------------------------ images


def image_element(path: str) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A JPEG file, decoded, randomly cropped and flipped, normalized: float32 CHW.

    The crop and flip are drawn from a generator seeded by the file's name.
    """
    from PIL import Image

    with Image.open(path) as image:
        pixels = np.asarray(image.convert("RGB"))
    rng = np.random.default_rng(_seed(path))
    top, left = rng.integers(0, pixels.shape[0] - CROP + 1, size=2)
    crop = pixels[top : top + CROP, left : left + CROP]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    chw = crop.transpose(2, 0, 1).astype(np.float32) * np.float32(1 / 255)
    return (chw - MEAN) / STD


def masked_batch(
    images: np.ndarray[Any, Any], size: int = IMAGE_BATCH
) -> dict[str, np.ndarray[Any, Any]]:
    """A batch of images padded with zero rows to ``size`` rows, with the mask
    of its real rows: a jitted step then sees one shape (bench/jax_steps.py).

    >>> batch = masked_batch(np.ones((3, 2), np.float32), 4)
    >>> batch["images"].tolist(), batch["mask"].tolist()
    ([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [0.0, 0.0]], [1.0, 1.0, 1.0, 0.0])
    """
    real = len(images)
    if real > size:
        raise ValueError(f"a batch of {real} images is larger than {size}")
    mask = np.zeros(size, np.float32)
    mask[:real] = 1
    if real < size:
        images = np.concatenate(
            [images, np.zeros((size - real, *images.shape[1:]), images.dtype)]
        )
    return {"images": images, "mask": mask}


def _synthetic_image(rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """A 160x160 RGB image: smooth colour gradients, a few blobs, sensor noise."""
    y, x = np.mgrid[0:IMAGE_SIDE, 0:IMAGE_SIDE].astype(np.float32) / IMAGE_SIDE
    channels = []
    for _ in range(3):
        a, b, c, d = rng.uniform(-1, 1, size=4)
        base = 128 + 80 * (a * x + b * y) + 40 * np.sin(6 * (c * x + d * y))
        channels.append(base)
    image = np.stack(channels, axis=-1)
    for _ in range(rng.integers(2, 6)):
        cy, cx, radius = (
            rng.uniform(0.1, 0.9),
            rng.uniform(0.1, 0.9),
            rng.uniform(0.05, 0.25),
        )
        blob = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * radius**2))
        image += blob[..., None] * rng.uniform(-90, 90, size=3)
    image += rng.normal(0, 6, size=image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def make_images(folder: str | os.PathLike[str], count: int, seed: int = 0) -> list[str]:
    """``count`` seeded 160x160 JPEG files in ``folder`` (made once); their paths."""
    from PIL import Image

    root = Path(folder)
    paths = [str(root / f"img_{index:05d}.jpg") for index in range(count)]
    if (root / _COMPLETE).exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for path in paths:
        buffer = io.BytesIO()
        Image.fromarray(_synthetic_image(rng)).save(buffer, "JPEG", quality=90)
        Path(path).write_bytes(buffer.getvalue())
    (root / _COMPLETE).write_text(f"{count} images, seed {seed}\n")
    return paths


# ------------------------------------------------------------------ text

_WORDS = re.compile(r"\w+|[^\w\s]")


def _piece_id(piece: str) -> int:
    return RESERVED + zlib.crc32(piece.encode()) % (VOCAB_SIZE - RESERVED)


def tokenize(text: str) -> np.ndarray[Any, np.dtype[np.int32]]:
    """Token ids of ``text``: lower-cased words and punctuation, words longer
    than ``PIECE`` characters cut into pieces (continuations marked ``##``),
    each piece hashed into a ``VOCAB_SIZE`` vocabulary.

    >>> tokenize("a tokenizer!").tolist() == [
    ...     _piece_id("a"), _piece_id("tokeni"), _piece_id("##zer"), _piece_id("!")
    ... ]
    True
    """
    ids = []
    for word in _WORDS.findall(text.lower()):
        if len(word) <= PIECE:
            ids.append(_piece_id(word))
            continue
        ids.append(_piece_id(word[:PIECE]))
        ids.extend(
            _piece_id("##" + word[start : start + PIECE])
            for start in range(PIECE, len(word), PIECE)
        )
    return np.array(ids, np.int32)


def pack(
    documents: Iterable[np.ndarray[Any, Any]], length: int = SEQUENCE
) -> np.ndarray[Any, np.dtype[np.int32]]:
    """Documents' token ids, each followed by ``EOS``, cut into ``length``-token
    rows (int32, shape ``(rows, length)``); the last partial row is dropped.

    >>> pack([np.array([5, 6, 7]), np.array([8])], length=3).tolist()
    [[5, 6, 7], [1, 8, 1]]
    """
    eos = np.array([EOS], np.int32)
    parts = [part for ids in documents for part in (ids.astype(np.int32), eos)]
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    rows = len(flat) // length
    return flat[: rows * length].reshape(rows, length)


def text_sequences(path: str) -> np.ndarray[Any, np.dtype[np.int32]]:
    """A file of documents (one a line), tokenized and packed: ``(rows, 512)`` int32."""
    with open(path, encoding="utf-8") as lines:
        return pack(tokenize(line) for line in lines)


def file_documents(path: str) -> np.ndarray[Any, np.dtype[np.str_]]:
    """The documents of a corpus file (one a line), as a ``str`` array."""
    with open(path, encoding="utf-8") as lines:
        return np.array(lines.read().splitlines())


def document_tokens(text: str) -> np.ndarray[Any, np.dtype[np.int32]]:
    """A document's token ids and an ``EOS``, trimmed to ``SEQUENCE`` tokens
    (packers take no sequence longer than a row: seqio's and grain's trim).

    >>> document_tokens("a b").tolist() == [_piece_id("a"), _piece_id("b"), EOS]
    True
    >>> len(document_tokens("word " * 600))
    512
    """
    return np.append(tokenize(text), np.int32(EOS))[:SEQUENCE]


def packed_row(
    sequences: list[np.ndarray[Any, Any]], length: int
) -> dict[str, np.ndarray[Any, np.dtype[np.int32]]]:
    """``sequences`` in one row of ``length`` slots: ``tokens`` (``PAD`` after
    them), ``segment_ids`` (1, 2, ... per sequence, 0 for padding) and
    ``positions`` (from 0 in each sequence, 0 for padding), int32."""
    sizes = [len(sequence) for sequence in sequences]
    used = sum(sizes)
    row = {key: np.zeros(length, np.int32) for key in PACKED_KEYS}
    row["tokens"][:used] = np.concatenate(sequences)
    row["segment_ids"][:used] = np.repeat(np.arange(1, len(sizes) + 1), sizes)
    row["positions"][:used] = np.concatenate([np.arange(size) for size in sizes])
    return row


def first_fit_pack(
    sequences: Iterable[np.ndarray[Any, Any]],
    length: int = SEQUENCE,
    num_open_rows: int = PACK_OPEN_ROWS,
) -> Iterator[dict[str, np.ndarray[Any, np.dtype[np.int32]]]]:
    """Sequences packed first fit into rows of ``length`` slots (``packed_row``).

    A sequence goes into the first open row with room for it, else into a new
    row; when more than ``num_open_rows`` are open, the fullest of the others
    goes out. A full row goes out at once, the open ones at the end, in the
    order they opened; empty sequences are dropped. zmqdata's ``Dataset.pack``
    does the same.

    >>> rows = first_fit_pack((np.arange(1, n + 1) for n in [3, 2, 4, 2]), 5)
    >>> [(row["tokens"].tolist(), row["segment_ids"].tolist()) for row in rows]
    ... # doctest: +NORMALIZE_WHITESPACE
    [([1, 2, 3, 1, 2], [1, 1, 1, 2, 2]), ([1, 2, 3, 4, 0], [1, 1, 1, 1, 0]),
     ([1, 2, 0, 0, 0], [1, 1, 0, 0, 0])]
    """
    rows: list[list[np.ndarray[Any, Any]]] = []
    used: list[int] = []
    for sequence in sequences:
        size = len(sequence)
        if size > length:
            raise ValueError(f"a sequence of {size} tokens is longer than {length}")
        if size == 0:
            continue
        index = next((i for i, n in enumerate(used) if n + size <= length), None)
        if index is None:
            rows.append([])
            used.append(0)
            index = len(rows) - 1
        rows[index].append(sequence)
        used[index] += size
        if used[index] == length:
            used.pop(index)
            yield packed_row(rows.pop(index), length)
        elif len(rows) > num_open_rows:
            fullest = max(range(len(rows) - 1), key=used.__getitem__)
            used.pop(fullest)
            yield packed_row(rows.pop(fullest), length)
    for row in rows:
        yield packed_row(row, length)


def _vocabulary(rng: np.random.Generator, size: int) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = np.clip(rng.poisson(5, size) + 1, 1, 14)
    return ["".join(rng.choice(letters, length)) for length in lengths]


def _document(
    rng: np.random.Generator, words: list[str], ranks: np.ndarray[Any, Any]
) -> str:
    """One document: lognormal length (median ~300 words), Zipf-drawn words,
    sentences of 5-25 words, commas now and then."""
    count = max(20, int(rng.lognormal(np.log(300), 0.6)))
    chosen = rng.choice(len(words), size=count, p=ranks)
    sentences, start = [], 0
    while start < count:
        stop = min(count, start + int(rng.integers(5, 26)))
        sentence = [words[index] for index in chosen[start:stop]]
        sentence[0] = sentence[0].capitalize()
        if len(sentence) > 6 and rng.random() < 0.5:
            sentence[len(sentence) // 2] += ","
        sentences.append(" ".join(sentence) + ".")
        start = stop
    return " ".join(sentences)


def make_corpus(
    folder: str | os.PathLike[str],
    files: int,
    documents: int,
    seed: int = 0,
    vocabulary: int = 50_000,
) -> list[str]:
    """``files`` text files of ``documents`` synthetic documents each (one a line;
    words from a Zipf(1.1) vocabulary), in ``folder`` (made once); their paths."""
    root = Path(folder)
    paths = [str(root / f"shard_{index:04d}.txt") for index in range(files)]
    if (root / _COMPLETE).exists():
        return paths
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = _vocabulary(rng, vocabulary)
    ranks = 1.0 / np.arange(1, vocabulary + 1) ** 1.1
    ranks /= ranks.sum()
    for path in paths:
        lines = [_document(rng, words, ranks) for _ in range(documents)]
        Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / _COMPLETE).write_text(
        f"{files} files x {documents} documents, seed {seed}\n"
    )
    return paths


# ------------------------------------------------------------------ batches


def stack_batches(elements: Iterable[Any], size: int) -> Iterable[Any]:
    """Elements (arrays, or dicts of them) stacked ``size`` at a time (the last
    batch may be smaller).

    >>> [b.shape for b in stack_batches((np.zeros(2) for _ in range(5)), 2)]
    [(2, 2), (2, 2), (1, 2)]
    >>> [b["a"].shape for b in stack_batches([{"a": np.zeros(2)}] * 3, 2)]
    [(2, 2), (1, 2)]
    """
    batch: list[Any] = []
    for element in elements:
        batch.append(element)
        if len(batch) == size:
            yield _stack(batch)
            batch = []
    if batch:
        yield _stack(batch)


def _stack(elements: list[Any]) -> Any:
    if isinstance(elements[0], dict):
        return {key: np.stack([e[key] for e in elements]) for key in elements[0]}
    return np.stack(elements)


def image_batch(
    batch: dict[str, np.ndarray[Any, Any]],
) -> dict[str, np.ndarray[Any, Any]]:
    """Ray Data's ``map_batches`` form of ``image_element``: paths -> images."""
    return {"image": np.stack([image_element(str(p)) for p in batch["path"]])}


def text_batch(
    batch: dict[str, np.ndarray[Any, Any]],
) -> dict[str, np.ndarray[Any, Any]]:
    """Ray Data's ``map_batches`` form of ``text_sequences``: paths -> sequences."""
    return {"tokens": np.concatenate([text_sequences(str(p)) for p in batch["path"]])}
