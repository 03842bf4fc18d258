"""bench/pipelines.py: the real pipelines every system runs are seeded and well shaped.

No timing here (bench/peers.py measures); the peers' tables render from figures.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench import peers, pipelines
from bench.common import ROOT, Stat, subprocess_env


def _contents(paths: list[str], mode: str = "r") -> list[str | bytes]:
    contents = []
    for path in paths:
        with open(path, mode) as file:
            contents.append(file.read())
    return contents


def test_the_module_examples_hold():
    assert doctest.testmod(pipelines).failed == 0


def test_images_are_made_once_the_same_and_augmented_by_their_name(tmp_path):
    first = pipelines.make_images(tmp_path / "a", 4, seed=3)
    again = pipelines.make_images(tmp_path / "b", 4, seed=3)
    assert _contents(first, "rb") == _contents(again, "rb")
    assert pipelines.make_images(tmp_path / "a", 4, seed=99) == first  # cached

    elements = [pipelines.image_element(path) for path in first]
    for element, twin in zip(
        elements, map(pipelines.image_element, again), strict=True
    ):
        assert element.shape == (3, pipelines.CROP, pipelines.CROP)
        assert element.dtype == np.float32
        assert np.array_equal(element, twin)
    assert not np.array_equal(elements[0], elements[1])
    assert abs(float(np.mean(elements[0]))) < 3  # normalized, not 0..255

    batch = pipelines.image_batch({"path": np.array(first)})["image"]
    assert batch.shape == (4, 3, pipelines.CROP, pipelines.CROP)
    assert np.array_equal(batch, np.stack(elements))


def test_text_is_tokenized_and_packed_the_same_every_time(tmp_path):
    paths = pipelines.make_corpus(tmp_path / "a", 2, 8, seed=5, vocabulary=500)
    again = pipelines.make_corpus(tmp_path / "b", 2, 8, seed=5, vocabulary=500)
    assert _contents(paths) == _contents(again)
    assert len(_contents(paths)[0].splitlines()) == 8

    rows = pipelines.text_sequences(paths[0])
    assert rows.dtype == np.int32
    assert rows.shape == (len(rows), pipelines.SEQUENCE)
    assert len(rows) >= 1
    assert np.array_equal(rows, pipelines.text_sequences(again[0]))
    assert rows.min() >= pipelines.EOS
    assert rows.max() < pipelines.VOCAB_SIZE
    assert np.count_nonzero(rows == pipelines.EOS) >= 1  # documents end in EOS

    batch = pipelines.text_batch({"path": np.array(paths)})["tokens"]
    both = [pipelines.text_sequences(path) for path in paths]
    assert np.array_equal(batch, np.concatenate(both))


def test_tokens_are_hashed_pieces_and_packing_drops_only_the_last_row():
    long = pipelines.tokenize("internationalization")
    assert len(long) == 4  # 20 characters: pieces of 6, 6, 6, 2
    assert np.array_equal(pipelines.tokenize("A, b."), pipelines.tokenize("a , B ."))
    docs = [np.arange(10, 15), np.arange(20, 27)]  # 5 + 1 + 7 + 1 = 14 tokens
    packed = pipelines.pack(docs, length=4)
    assert packed.shape == (3, 4)
    assert packed.ravel().tolist() == [10, 11, 12, 13, 14, 1, 20, 21, 22, 23, 24, 25]
    assert pipelines.pack([], length=4).shape == (0, 4)


def _figures(rate: float, cpu: float) -> dict[str, object]:
    return {
        "label": f"system at {rate}",
        "elements": 640,
        "el_s": Stat([rate, rate]),
        "cpu_s_per_1k": Stat([cpu]),
        "setup_s": 0.5,
        "first_epoch_s": 1.25,
    }


def test_the_tables_give_ratios_against_torch_and_local_and_mark_targets():
    result = {
        "unit": "images",
        "elements": 640,
        "files": 640,
        "batch": 64,
        "workers": 2,
        "repeats": 3,
        "systems": {
            "local": _figures(1000, 0.5),
            "torch": _figures(2000, 0.05),
            "zmqdata": _figures(3000, 0.05),
            "ray": {"label": "Ray Data", "skipped": "`import ray` fails"},
        },
    }
    table = peers.details(result)
    assert (
        "| system at 3000 | 3,000 | 1.50x | 3.00x | 0.050 | 1.00x | 0.5 + 1.2 |"
        in table
    )
    assert "skipped: `import ray` fails" in table
    rows = peers.rows("images", result)
    assert [row[3] for row in rows] == ["1.50x", "3.00x", "1.00x"]  # torch, local, CPU
    assert all(row[-1].endswith("✔") for row in rows)


def _batches(read: peers.Reader) -> list[np.ndarray]:
    return [np.asarray(batch) for batch in read()]


def _sorted_rows(batches: list[np.ndarray]) -> np.ndarray:
    """Every element of ``batches``, in one order whatever order they came in."""
    rows = np.concatenate(batches)
    flat = rows.reshape(len(rows), -1)
    return flat[np.lexsort(flat.T[::-1])]


def read_like_local(folder: str) -> None:
    """grain's and SPDL's systems read the local loop's elements, batched alike
    (run in a process of its own: grain keeps a thread pool for the process's life)."""
    peers.CACHE = Path(folder)
    pipelines.IMAGE_BATCH, pipelines.TEXT_BATCH = 3, 5
    for pipeline in (peers.image_pipeline(7), peers.text_pipeline(3, 8)):
        with peers.SYSTEMS["local"](pipeline) as local:
            expected = _batches(local)
        for name in ("grain", "spdl", "spdl_processes"):
            with peers.SYSTEMS[name](pipeline) as read:
                batches = _batches(read)
            assert sum(map(len, batches)) == sum(map(len, expected)), name
            assert max(map(len, batches)) == pipeline.batch, name
            assert np.array_equal(_sorted_rows(batches), _sorted_rows(expected)), name


def test_grain_and_spdl_read_what_the_local_loop_reads(tmp_path):
    for module in ("grain", "spdl"):
        if peers.missing(module):
            pytest.skip(peers.missing(module))
    code = f"from tests import test_bench_pipelines as t; t.read_like_local({str(tmp_path)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
