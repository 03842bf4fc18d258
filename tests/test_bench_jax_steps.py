"""bench/jax_steps.py: the masked batches, the check of global batches, every
system trains the model on a tiny epoch, and the tables.

The figures of a tiny epoch are not compared (the bench section measures).
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import numpy as np
import pytest

from bench import jax_steps, peers, pipelines
from bench.common import QUICK, Bench, Stat
from bench.snapshots import Reference, check_epoch
from tests.helpers import run_tiny_bench

pytest.importorskip("jax", reason="bench/jax_steps.py needs JAX: pip install jax")

pytestmark = pytest.mark.timeout(150)

TINY_IMAGES = 70
"""Two batches: 64 images and 6 (zmqdata's workers may cut them elsewhere)."""


def test_the_module_examples_hold():
    assert doctest.testmod(jax_steps).failed == 0


def test_a_masked_batch_pads_to_one_shape_and_refuses_a_larger_one():
    images = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    batch = pipelines.masked_batch(images, 5)
    assert batch["images"].shape == (5, 2, 2)
    assert np.array_equal(batch["images"][:3], images)
    assert not batch["images"][3:].any()
    assert batch["mask"].tolist() == [1, 1, 1, 0, 0]
    full = pipelines.masked_batch(images, 3)
    assert full["images"] is images
    assert full["mask"].tolist() == [1, 1, 1]
    with pytest.raises(ValueError, match="a batch of 3 images is larger than 2"):
        pipelines.masked_batch(images, 2)


def test_the_check_wants_global_arrays_of_the_sharding_and_the_images():
    import jax

    where = jax_steps.sharding()
    rng = np.random.default_rng(0)
    images = [rng.random((4, 3), np.float32), rng.random((1, 3), np.float32)]
    reference = Reference()
    for batch in images:
        reference.add(batch)
    padded = [pipelines.masked_batch(batch, 4) for batch in images]
    on_device = [jax.device_put(batch, where) for batch in padded]

    checked = jax_steps.host_images("good", lambda: on_device, where, 4)
    assert check_epoch("good", checked, reference, False) == {
        "images": 5,
        "batches": 2,
    }
    numpy = jax_steps.host_images("numpy", lambda: padded, where, 4)
    with pytest.raises(RuntimeError, match=r"numpy: a batch of \[\('ndarray'"):
        list(numpy())
    short = jax_steps.host_images("short", lambda: on_device, where, 8)
    with pytest.raises(RuntimeError, match="short: a batch of"):
        list(short())
    lost = jax_steps.host_images("lost", lambda: on_device[:1], where, 4)
    with pytest.raises(RuntimeError, match=r"lost: 4 images, .* 1 missing"):
        check_epoch("lost", lost, reference, False)


def test_the_model_learns_on_real_rows_only():
    model = jax_steps.Model(features=3 * 2 * 2, hidden=4)
    images = np.zeros((4, 3, 2, 2), np.float32)
    images[:, 1] = 1  # every image's brightest channel: 1
    mask = np.array([1, 1, 0, 0], np.float32)
    before = {k: np.asarray(v).copy() for k, v in model.params.items()}
    assert model.train([{"images": images, "mask": mask}] * 3) == (3, 6)
    assert any(not np.array_equal(before[k], model.params[k]) for k in before)
    none = {"images": images, "mask": np.zeros(4, np.float32)}
    after = {k: np.asarray(v).copy() for k, v in model.params.items()}
    assert model.train([none]) == (1, 0)
    assert all(np.array_equal(after[k], model.params[k]) for k in after)


def run_tiny(folder: str, out: str) -> None:
    """Every system on a few images, one round (a process of its own, as the
    bench runs: a `zmqdata up` deployment, grain's workers, JAX); the results
    as JSON."""
    from bench.run import jsonable

    peers.CACHE = Path(folder)
    pipeline = peers.image_pipeline(TINY_IMAGES)
    result = jax_steps.measure(Bench(QUICK, 1, quick=True), jax_steps.SYSTEMS, pipeline)
    Path(out).write_text(json.dumps(jsonable(result)))


def test_every_system_trains_the_model_on_a_tiny_epoch(tmp_path):
    pytest.importorskip("PIL")
    result = run_tiny_bench("test_bench_jax_steps", str(tmp_path))
    assert result["images"] == TINY_IMAGES
    assert result["parameters"] == 3 * 112 * 112 * 32 + 32 + 32 * 3 + 3
    systems = result["systems"]
    assert list(systems) == list(jax_steps.SYSTEMS)
    assert systems["model"]["steps"]["samples"] == [2]
    for name in jax_steps.READING:
        figures = systems[name]
        if name in jax_steps.PEERS and peers.missing("grain"):
            assert "skipped" in figures
            continue
        assert "skipped" not in figures, (name, figures)
        assert figures["check"]["images"] == TINY_IMAGES
        assert 2 <= figures["check"]["batches"] <= 3
        assert 2 <= figures["steps"]["median"] <= 3
    for figures in systems.values():
        if "skipped" not in figures:
            for key in ("steps_s", "images_s", "cpu_ms_per_step"):
                assert len(figures[key]["samples"]) == 1
                assert figures[key]["median"] > 0, key
    assert result["ratios"]["model"]["steps_s"]["ratio"] > 0
    for peer in jax_steps.PEERS:
        if "skipped" not in systems[peer]:
            assert set(result["ratios"][peer]) == {"images_s", "steps_s"}
            assert result["best_peer"] in jax_steps.PEERS


def _system(rate: float, steps: int = 32) -> dict[str, object]:
    return {
        "label": f"system at {rate}",
        "steps_s": Stat([rate, rate * 1.2]),
        "images_s": Stat([rate * 64, rate * 1.2 * 64]),
        "steps": Stat([steps, steps]),
        "cpu_ms_per_step": Stat([3.0, 4.0]),
    }


def _ratio(value: float) -> dict[str, object]:
    return {"ratio": value, "rounds": Stat([value * 0.9, value * 1.1])}


def test_the_tables_give_zmqdata_against_grain_and_the_model_alone():
    result = {
        "images": 2048,
        "batch": 64,
        "workers": 2,
        "hidden": 32,
        "parameters": 1_204_355,
        "jax": "0.10.2",
        "device": "TFRT_CPU_0",
        "repeats": 2,
        "load_average": 0.31,
        "systems": {
            "model": _system(250),
            "grain": _system(10),
            "grain_repeat": _system(20),
            "zmqdata": _system(30, 33),
        },
        "ratios": {
            "grain": {"images_s": _ratio(2.9), "steps_s": _ratio(3.0)},
            "grain_repeat": {"images_s": _ratio(1.45), "steps_s": _ratio(1.5)},
            "model": {"steps_s": _ratio(0.12)},
        },
        "best_peer": "grain_repeat",
    }
    table = jax_steps.details(result)
    assert "(1,204,355 parameters, 32 hidden units)" in table
    assert "JAX 0.10.2 on TFRT_CPU_0; 2,048 images an epoch" in table
    assert "load average 0.31 at the start" in table
    assert (
        "| system at 30 | 33.0 (30.0-36.0) | 0.12x | 2,112 (1,920-2,304) | 33 (33-33)"
        " | 3.5 (3.0-4.0) |"
    ) in table
    assert "* zmqdata over grain, images/s: 2.90x (per round 2.90x (2.61x-3.19x))" in (
        table
    )
    assert "* zmqdata over grain_repeat, steps/s: 1.50x" in table
    assert "* zmqdata over model, steps/s: 0.12x" in table
    assert "* the best grain setup (images/s): system at 20" in table
    (row,) = jax_steps.rows(result)
    assert row[0].endswith("zmqdata vs system at 20")
    assert row[1:4] == ("2,112 images/s", "1,408 images/s", "1.45x")
    for peer in jax_steps.PEERS:
        result["systems"][peer] = {"label": peer, "skipped": "`import grain` fails"}
        del result["ratios"][peer]
    del result["best_peer"]
    assert "| grain | skipped: `import grain` fails |" in jax_steps.details(result)
    assert jax_steps.rows(result) == []
    assert jax_steps.rows({"skipped": "no jax"}) == []
    with pytest.raises(ValueError, match="unknown systems"):
        jax_steps.jax_steps(Bench(QUICK, 1), ["ray"])
