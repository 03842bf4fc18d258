"""bench/snapshots.py: the check catches a lost or changed image and re-cut
batches, every system reads a tiny save, and the tables.

The figures of a tiny save are not compared (the bench section measures).
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest

from bench import peers, snapshots
from bench.common import QUICK, Bench, Stat
from tests.helpers import run_tiny_bench

pytestmark = pytest.mark.timeout(150)

TINY_IMAGES = 70
"""Two batches: 64 images and 6."""


def test_the_module_examples_hold():
    assert doctest.testmod(snapshots).failed == 0


def test_the_check_wants_the_reference_images_and_batches(tmp_path):
    rng = np.random.default_rng(0)
    batches = [rng.random((4, 3), np.float32), rng.random((2, 3), np.float32)]
    reference = snapshots.write_npy(batches, tmp_path)
    files = sorted(tmp_path.glob("*.npy"))
    assert len(files) == 2
    check = snapshots.check_epoch(
        "npy", lambda: snapshots.npy_batches(files), reference, whole_batches=True
    )
    assert check == {"images": 6, "batches": 2}

    recut = np.concatenate(batches)
    halves = [recut[:3], recut[3:]]
    assert (
        snapshots.check_epoch("recut", lambda: halves, reference, False)["images"] == 6
    )
    with pytest.raises(RuntimeError, match="recut: 2 batches, not the reference's 2"):
        snapshots.check_epoch("recut", lambda: halves, reference, True)

    changed = [batches[0], batches[1].copy()]
    changed[1][0, 0] += 1
    with pytest.raises(RuntimeError, match=r"changed: 6 images, .* 1 missing, 1 not"):
        snapshots.check_epoch("changed", lambda: changed, reference, True)
    with pytest.raises(RuntimeError, match=r"lost: 4 images, .* 2 missing, 0 not"):
        snapshots.check_epoch("lost", lambda: batches[:1], reference, False)


def run_tiny(folder: str, out: str) -> None:
    """Every system on a save of a few images, one round (a process of its
    own, as the bench runs: a `zmqdata up` deployment and its clients); the
    results as JSON."""
    from bench.run import jsonable

    peers.CACHE = Path(folder)
    pipeline = peers.image_pipeline(TINY_IMAGES)
    result = snapshots.measure(Bench(QUICK, 1, quick=True), snapshots.SYSTEMS, pipeline)
    Path(out).write_text(json.dumps(jsonable(result)))


def test_every_system_reads_a_tiny_save(tmp_path):
    pytest.importorskip("PIL")
    result = run_tiny_bench("test_bench_snapshots", str(tmp_path))
    assert (result["images"], result["batches"]) == (TINY_IMAGES, 2)
    assert result["raw_bytes"] == TINY_IMAGES * 3 * 112 * 112 * 4
    for label, compression in (("AUTO", None), ("zstd", "zstd")):
        save = result["saves"][label]
        assert save["compression"] == compression
        assert save["elements"] == 2
        assert save["seconds"] > 0
        assert save["images_s"] > 0
        assert save["bytes"] > 0
    assert result["saves"]["AUTO"]["of_raw"] >= 1
    assert result["saves"]["zstd"]["bytes"] < result["saves"]["AUTO"]["bytes"]
    assert result["npy"]["files"] == 2
    assert result["npy"]["bytes"] > result["raw_bytes"]
    systems = result["systems"]
    assert list(systems) == list(snapshots.SYSTEMS)
    for name, figures in systems.items():
        assert figures["check"]["images"] == TINY_IMAGES, name
        for key in ("images_s", "cpu_s_per_1k"):
            assert len(figures[key]["samples"]) == 1
            assert figures[key]["median"] > 0, (name, key)
    for name in snapshots.LOADS:
        for base in ("recompute", "numpy"):
            ratio = result["ratios"][name][base]
            assert ratio["ratio"] > 0
            assert len(ratio["rounds"]["samples"]) == 1


def _system(rate: float) -> dict[str, object]:
    return {
        "label": f"system at {rate}",
        "images_s": Stat([rate, rate * 1.2]),
        "cpu_s_per_1k": Stat([0.02, 0.04]),
    }


def _save(seconds: float, size: int) -> dict[str, object]:
    return {
        "seconds": seconds,
        "call_s": seconds + 0.1,
        "images_s": 2048 / seconds,
        "bytes": size,
        "of_raw": size / 308_281_344,
        "chunks": 32,
    }


def test_the_tables_give_load_against_recompute_and_numpy():
    result = {
        "images": 2048,
        "batches": 32,
        "batch": 64,
        "raw_bytes": 308_281_344,
        "workers": 2,
        "repeats": 2,
        "load_average": 0.31,
        "mem_available": 20 * 2**30,
        "files_bytes": 700_000_000,
        "npy": {"files": 32, "bytes": 308_286_000},
        "saves": {"zstd": _save(2.0, 86_000_000), "AUTO": _save(1.0, 308_300_000)},
        "systems": {
            "recompute": _system(2_000),
            "load": _system(7_000),
            "numpy": _system(6_000),
        },
        "ratios": {
            "load": {
                "recompute": {"ratio": 3.5, "rounds": Stat([3.4, 3.6])},
                "numpy": {"ratio": 0.9, "rounds": Stat([0.8, 1.1])},
            }
        },
    }
    table = snapshots.details(result)
    assert "2,048 images in 32 batches of 64, 308.3 MB of float32 (32 .npy" in table
    assert "load average 0.31 at the start. Page cache: hot" in table
    assert "20.0 GiB available" in table
    assert (
        "| compression=zstd | 2.00 s (2.10 s) | 1,024 | 86.0 MB (28%) | 32 |" in table
    )
    assert (
        "| system at 7000 | 7,700 (7,000-8,400) | 3.50x | 0.030 (0.020-0.040) |"
    ) in table
    for line in (
        "load over recompute: 3.50x (per round 3.50x (3.40x-3.60x)), target ≥ 3.0x ✔",
        "load over numpy: 0.90x (per round 0.95x (0.80x-1.10x)), target ≥ 1.0x ✘",
    ):
        assert line in table
    first, second = snapshots.rows(result)
    assert first[0] == "snapshots: images/s, load vs recompute (2,048 JPEGs, batch 64)"
    assert (first[3], first[-1]) == ("3.50x", "≥ 3.0x ✔")
    assert (second[3], second[-1]) == ("0.90x", "≥ 1.0x ✘")
    assert snapshots.rows({"skipped": "no PIL"}) == []
    assert snapshots.details({"skipped": "no PIL"}) == "skipped: no PIL"
    with pytest.raises(ValueError, match="unknown systems"):
        snapshots.snapshots(Bench(QUICK, 1), ["torch"])
