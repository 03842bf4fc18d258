"""``examples/lm_pretraining.py``: tokenize -> pack -> mix, saved and resumed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_lm_pretraining_example_packs_mixes_and_resumes() -> None:
    done = subprocess.run(
        [sys.executable, "examples/lm_pretraining.py", "--documents", "300"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resumed: OK, every token once" in done.stdout, done.stdout
    efficiency = re.search(r"packing efficiency: ([\d.]+)%", done.stdout)
    assert efficiency is not None, done.stdout
    assert float(efficiency.group(1)) > 90.0
    shares = [int(s) for s in re.findall(r"(\d+)% of the first half", done.stdout)]
    assert len(shares) == 3, done.stdout
    assert shares[0] > shares[1] > shares[2]  # weights 60%, 25%, 15%
