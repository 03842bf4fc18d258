"""bench/packing.py: the plain packer is ``Dataset.pack``'s algorithm, the check
catches a bad packing, every system reads a tiny corpus, and the tables.

The figures of a tiny corpus are not compared (the bench section measures).
"""

from __future__ import annotations

import doctest
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import zmqdata as zd
from bench import packing, peers, pipelines
from bench.common import QUICK, Bench, Stat
from tests.helpers import run_tiny_bench

pytestmark = pytest.mark.timeout(150)


def test_the_module_examples_hold():
    assert doctest.testmod(packing).failed == 0


@pytest.mark.parametrize(("length", "open_rows"), [(16, 1), (16, 3), (64, 8)])
def test_first_fit_pack_makes_the_rows_of_dataset_pack(length, open_rows):
    rng = np.random.default_rng(length + open_rows)
    sizes = [*rng.integers(0, length + 1, size=200), length, 0, 1]
    sequences = [rng.integers(2, 100, size=n).astype(np.int32) for n in sizes]

    plain = list(pipelines.first_fit_pack(sequences, length, open_rows))
    ours = zd.Dataset.from_generator(lambda: iter(sequences)).pack(
        length, num_open_rows=open_rows
    )
    rows = list(ours)
    assert len(plain) == len(rows) > 1
    for mine, theirs in zip(plain, rows, strict=True):
        assert set(mine) == set(theirs) == set(pipelines.PACKED_KEYS)
        for key in pipelines.PACKED_KEYS:
            assert mine[key].dtype == np.int32
            assert np.array_equal(mine[key], theirs[key]), key
    found = Counter(s for row in plain for s in packing.segments(*_stacked([row])))
    assert found == Counter(s.tobytes() for s in sequences if len(s))


def test_first_fit_pack_refuses_a_sequence_longer_than_a_row():
    with pytest.raises(ValueError, match="a sequence of 6 tokens is longer than 5"):
        list(pipelines.first_fit_pack([np.ones(6, np.int32)], 5))


def _stacked(rows: list[dict[str, np.ndarray]]) -> tuple[np.ndarray, ...]:
    return packing.columns(next(iter(pipelines.stack_batches(rows, len(rows)))))


def test_the_check_wants_every_document_once_and_whole_in_batches_of_512():
    documents = [np.arange(2, 2 + n, dtype=np.int32) for n in (300, 200, 500, 12, 400)]
    expected = Counter(d.tobytes() for d in documents)
    rows = list(pipelines.first_fit_pack(documents))
    good = list(pipelines.stack_batches(rows, 2))
    check = packing.check_epoch("made", lambda: good, expected, 2)
    assert check == {"rows": len(rows), "batches": 2, "shape": [2, 512]}

    twice = Counter(expected)
    twice[documents[0].tobytes()] += 1
    with pytest.raises(RuntimeError, match=r"made: .* 1 of 6 missing, 0 segments"):
        packing.check_epoch("made", lambda: good, twice, 2)
    with pytest.raises(RuntimeError, match=r"a batch of shapes \[\(3, 512\)"):
        packing.check_epoch(
            "made", lambda: list(pipelines.stack_batches(rows, 3)), expected, 2
        )

    cut = {key: value.copy() for key, value in good[0].items()}
    cut["segment_ids"][0, 5] = 2  # a document split in two segments
    with pytest.raises(ValueError, match="row 0 is not a packing"):
        packing.check_epoch("made", lambda: [cut], expected, 2)


def run_tiny(folder: str, out: str) -> None:
    """Every system on a tiny corpus, one round (in a process of its own:
    grain keeps a thread pool for the process's life); the results as JSON."""
    from bench.run import jsonable

    peers.CACHE = Path(folder)
    paths = peers.text_pipeline(3, 8).paths
    result = packing.measure(Bench(QUICK, 1, quick=True), packing.SYSTEMS, paths, 4)
    Path(out).write_text(json.dumps(jsonable(result)))


def test_every_system_reads_a_packing_of_a_tiny_corpus(tmp_path):
    result = run_tiny_bench("test_bench_packing", str(tmp_path))
    assert result["documents"] == 24
    assert result["tokens"] > 24
    systems = result["systems"]
    assert list(systems) == list(packing.SYSTEMS)
    for name, figures in systems.items():
        if name in packing.PEERS and peers.missing(name):
            assert "skipped" in figures
            continue
        assert "skipped" not in figures, (name, figures)
        assert figures["check"]["shape"] == [4, pipelines.SEQUENCE]
        assert figures["check"]["rows"] > figures["check"]["batches"] >= 1
        for key in ("tokens_s", "rows_s", "cpu_s_per_1m"):
            assert len(figures[key]["samples"]) == 1
            assert figures[key]["median"] > 0, (name, key)
        assert 0.5 < figures["efficiency"]["median"] <= 1
    if "best_peer" in result:
        assert result["ratio"] > 0


def _system(rate: float, efficiency: float) -> dict[str, object]:
    return {
        "label": f"system at {rate}",
        "tokens_s": Stat([rate, rate * 1.2]),
        "rows_s": Stat([rate / 500, rate / 400]),
        "efficiency": Stat([efficiency, efficiency]),
        "cpu_s_per_1m": Stat([0.05, 0.07]),
    }


def test_the_tables_give_zmqdata_against_the_best_peer():
    result = {
        "files": 64,
        "documents": 4096,
        "tokens": 1_600_000,
        "length": 512,
        "open_rows": 8,
        "batch": 32,
        "workers": 2,
        "repeats": 2,
        "load_average": 0.31,
        "systems": {
            "local": _system(1_000_000, 0.9),
            "torch": _system(1_500_000, 0.9),
            "grain": {"label": "grain", "skipped": "`import grain` fails"},
            "zmqdata": _system(1_800_000, 0.88),
        },
        "best_peer": "torch",
        "ratio": 1.2,
        "round_ratios": Stat([1.1, 1.3]),
    }
    table = packing.details(result)
    assert "4,096 documents (1,600,000 tokens" in table
    assert "load average 0.31 at the start" in table
    assert (
        "| system at 1800000 | 1,980,000 (1,800,000-2,160,000) | 1.20x"
        " | 4,050 (3,600-4,500) | 88.0% (88.0%-88.0%) | 0.060 (0.050-0.070) |"
    ) in table
    assert "| grain | skipped: `import grain` fails |" in table
    assert "1.20x (per round 1.20x (1.10x-1.30x)), target ≥ 1.0x ✔" in table
    (row,) = packing.rows(result)
    assert row[3] == "1.20x"
    assert row[-1] == "≥ 1.0x ✔"
    assert packing.rows({"systems": {}}) == []
    with pytest.raises(ValueError, match="unknown systems"):
        packing.packing(Bench(QUICK, 1), ["ray"])
