"""bench/inline_snapshots.py: every system reads a tiny pipeline (checked
against the local one, each job's snapshot state too), and the tables.

The figures of a tiny run are not compared (the bench section measures).
"""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

from bench import inline_snapshots
from bench.common import QUICK, Bench, Stat
from tests.helpers import run_tiny_bench

pytestmark = pytest.mark.timeout(60)

TINY_COUNT = 24
TINY_ROUNDS = 2


def test_the_module_examples_hold():
    assert doctest.testmod(inline_snapshots).failed == 0


def run_tiny(folder: str, out: str) -> None:
    """Every system over a few cheap elements, one round (a process of its
    own, as the bench runs: a `zmqdata up` deployment and its clients); the
    results as JSON."""
    from bench.run import jsonable

    result = inline_snapshots.measure(
        Bench(QUICK, 1, quick=True), inline_snapshots.SYSTEMS, TINY_COUNT, TINY_ROUNDS
    )
    Path(out).write_text(json.dumps(jsonable(result)))


def test_every_system_reads_a_tiny_pipeline(tmp_path):
    result = run_tiny_bench("test_bench_inline_snapshots", str(tmp_path), timeout=50)
    assert (result["elements"], result["element_bytes"]) == (TINY_COUNT, 64 * 64 * 12)
    assert result["map_cpu_ms"] > 0
    systems = result["systems"]
    assert list(systems) == list(inline_snapshots.SYSTEMS)
    checks = {name: figures["check"] for name, figures in systems.items()}
    assert checks == {
        "plain": {"elements": TINY_COUNT, "state": None},
        "writing": {"elements": TINY_COUNT, "state": "writing"},
        "second_job": {"elements": TINY_COUNT, "state": "reading"},
        "repeat": {"elements": 2 * TINY_COUNT, "state": "writing"},
        "load": {"elements": TINY_COUNT, "state": None},
    }
    for name, figures in systems.items():
        for key in ("rate", "first_ms", "cpu_s_per_1k"):
            assert len(figures[key]["samples"]) == 1
            assert figures[key]["median"] > 0, (name, key)
    assert systems["repeat"]["epoch2_rate"]["median"] > 0
    for name in ("writing", "repeat"):
        assert systems[name]["finished_s"]["median"] > 0
        assert "finish_lag_s" in systems[name]
    assert list(result["ratios"]) == [
        "second_job/writing",
        "second_job/load",
        "repeat epoch 2/repeat epoch 1",
        "writing/plain",
    ]
    for ratio in result["ratios"].values():
        assert ratio["ratio"] > 0
        assert len(ratio["rounds"]["samples"]) == 1


def _system(label: str, rate: float, **more: Stat) -> dict[str, object]:
    return {
        "label": label,
        "rate": Stat([rate, rate * 1.2]),
        "first_ms": Stat([30, 50]),
        "cpu_s_per_1k": Stat([0.02, 0.04]),
        **more,
    }


def test_the_tables_give_every_system_and_the_targets():
    writing = {"finished_s": Stat([7.0, 7.2]), "finish_lag_s": Stat([-0.01, 0.03])}
    systems = {
        "plain": _system("plain", 200),
        "writing": _system("writing", 190, **writing),
        "second_job": _system("second_job", 5_000),
        "repeat": _system("repeat", 180, epoch2_rate=Stat([4_000, 4_000]), **writing),
    }
    figures = {
        name: {key: value for key, value in system.items() if key != "label"}
        for name, system in systems.items()
    }
    result = {
        "elements": 1200,
        "element_bytes": 49_152,
        "rounds": 480,
        "map_cpu_ms": 5.46,
        "workers": 2,
        "repeats": 2,
        "load_average": 0.8,
        "systems": systems,
        "ratios": inline_snapshots.ratios(figures),  # type: ignore[arg-type]
    }
    table = inline_snapshots.details(result)
    assert "1,200 elements of 49,152 bytes (float32 64x64x3), map 5.5 ms" in table
    assert "load average 0.80 at the start" in table
    assert (
        "| writing | 209 (190-228) | 0.95x | 40.0 (30.0-50.0) | 0.030 (0.020-0.040) |"
        in table
    )
    assert "| repeat: epoch 2 | 4,000 (4,000-4,000) | 18.18x | — | — |" in table
    assert (
        "* writing: the snapshot finished +7.10 s (+7.00 to +7.20) after the pass"
        " started, +0.01 s (-0.01 to +0.03) after epoch 1's last element" in table
    )
    for line in (
        "* second_job/writing: 26.32x (per round 26.32x (26.32x-26.32x)), target",
        "* repeat epoch 2/repeat epoch 1: 20.20x (per round 20.37x (18.52x-22.22x))",
        "* writing/plain: 0.95x (per round 0.95x (0.95x-0.95x)), target ≥ 0.9x ✔",
    ):
        assert line in table
    assert "second_job/load" not in table  # no load system: no such ratio
    rows = inline_snapshots.rows(result)
    assert [row[0] for row in rows] == [
        f"inline snapshots: elements/s, {name} (1,200 x 5.5 ms map)"
        for name in (
            "second_job/writing",
            "repeat epoch 2/repeat epoch 1",
            "writing/plain",
        )
    ]
    assert (rows[0][3], rows[0][-1]) == ("26.32x", "≥ 5.0x ✔")
    with pytest.raises(ValueError, match="unknown systems"):
        inline_snapshots.inline_snapshots(Bench(QUICK, 1), ["torch"])
