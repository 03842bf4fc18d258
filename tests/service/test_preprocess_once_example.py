"""``examples/preprocess_once.py``: save once with the workers, load, every element once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_preprocess_once_example_saves_and_loads(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "examples/preprocess_once.py",
            "--path",
            str(tmp_path / "save"),
            "--count",
            "96",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "saved 96 elements" in done.stdout, done.stdout
    assert "every element once: OK" in done.stdout, done.stdout
    assert (tmp_path / "save" / "manifest.json").exists()
