"""LM pre-training input: tokenize -> pack -> mix, on the service, resumable.

Three corpora (web text, code, books) are tokenized and packed into rows of
``--length`` token slots on the workers (``pack``: segment ids and positions,
no padding where it can be avoided), each corpus read exactly once
(``distributed_epoch``). The trainer mixes the three reads by weight
(``sample_from_datasets``, seeded) and batches the rows. Half-way it saves
the input's position (``it.save()``), and a new iterator restored from it
reads exactly the rows the uninterrupted run would have read next.

    python examples/lm_pretraining.py [--documents 600] [--length 256]
"""

from __future__ import annotations

import argparse
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

WEIGHTS = {"web": 0.6, "code": 0.25, "books": 0.15}
VOCAB = 32_000
BATCH = 8


def corpus(name: str, documents: int) -> list[str]:
    """``documents`` synthetic documents of ``name`` (seeded; lengths vary a lot)."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    words = [f"{name}{i}" for i in range(2_000)]
    lengths = rng.lognormal(np.log(60), 0.8, size=documents).astype(int) + 1
    return [" ".join(rng.choice(words, size=n)) for n in lengths]


def tokenize(document: str) -> np.ndarray:
    """Hashed word ids, and an end-of-document token (1)."""
    ids = [2 + zlib.crc32(word.encode()) % (VOCAB - 2) for word in document.split()]
    return np.array([*ids, 1], dtype=np.int32)


def packed_reads(target: str, documents: int, length: int) -> list[zd.Dataset]:
    """One exactly-once read per corpus: documents tokenized and packed on the workers.

    Each token carries its corpus's index (``"corpus"``), so rows say where
    they come from; a document longer than a row is cut.
    """

    def tokens(index: int) -> Callable[[Any], dict[str, np.ndarray]]:
        def tokenized(doc: Any) -> dict[str, np.ndarray]:
            ids = tokenize(str(doc))[:length]
            return {"tokens": ids, "corpus": np.full(len(ids), index, np.int8)}

        return tokenized

    return [
        zd.Dataset.from_tensor_slices(corpus(name, documents))
        .map(tokens(index))
        .pack(length)
        .apply(service.distribute("distributed_epoch", target))
        for index, name in enumerate(WEIGHTS)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=600, help="per corpus")
    parser.add_argument("--length", type=int, default=256, help="slots per row")
    args = parser.parse_args()
    dispatcher = service.DispatchServer()
    workers = [
        service.WorkerServer(service.WorkerConfig(dispatcher.target)) for _ in range(2)
    ]
    try:
        reads = packed_reads(dispatcher.target, args.documents, args.length)
        mixed = zd.Dataset.sample_from_datasets(
            reads, weights=list(WEIGHTS.values()), seed=0
        )
        batches = mixed.batch(BATCH)
        whole = list(batches)  # the uninterrupted run
        half = len(whole) // 2
        segments = np.concatenate([b["segment_ids"] for b in whole])
        efficiency = zd.packing_efficiency({"segment_ids": segments})
        print(f"{len(whole)} batches of {BATCH} rows x {args.length} slots")
        print(f"packing efficiency: {efficiency:.1%}")
        corpora = np.concatenate([b["corpus"][:, 0] for b in whole[:half]])
        for index, (name, weight) in enumerate(WEIGHTS.items()):  # all still read
            share = np.mean(corpora == index)
            print(f"{name}: {share:.0%} of the first half's rows (weight {weight:.0%})")

        with iter(batches) as it:  # a run that saves half-way...
            before = [next(it) for _ in range(half)]
            state = it.save()
        with iter(batches) as resumed:  # ...and one restored from its save
            resumed.restore(state)
            after = list(resumed)
        # Which documents share a row follows which worker packed them, so
        # compare tokens: every token of every corpus, once, in both runs.
        same = np.array_equal(_tokens(before + after), _tokens(whole))
        verdict = "OK, every token once" if same else "MISMATCH"
        print(f"saved at batch {half} and resumed: {verdict}")
    finally:
        for worker in workers:
            worker.stop()
        dispatcher.stop()


def _tokens(batches: list[dict[str, np.ndarray]]) -> np.ndarray:
    """The real tokens of ``batches`` (padding left out), sorted with their corpus."""
    tokens = np.concatenate([b["tokens"].ravel() for b in batches])
    corpus = np.concatenate([b["corpus"].ravel() for b in batches])
    real = np.concatenate([b["segment_ids"].ravel() for b in batches]) > 0
    keys = tokens[real].astype(np.int64) * 4 + corpus[real]
    return np.sort(keys)


if __name__ == "__main__":
    main()
