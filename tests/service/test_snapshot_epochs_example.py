"""``examples/snapshot_epochs.py``: epoch 1 writes the snapshot, epoch 2 reads it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import run_example


def test_the_snapshot_epochs_example_writes_then_reads(tmp_path: Path) -> None:
    snapshots = tmp_path / "snapshots"
    out = run_example("snapshot_epochs.py", "--path", str(snapshots), "--count", "48")
    lines = out.splitlines()
    assert re.fullmatch(r"the map costs [\d.]+ ms of CPU per element here", lines[0])
    assert re.fullmatch(
        r"epoch 1: 48 elements, [\d,]+/s \(snapshot writing\)", lines[1]
    )
    [folder] = snapshots.iterdir()
    assert lines[2].startswith(f"snapshot {folder}: finished "), out
    assert lines[2].endswith(" s after epoch 1, 48 elements in 48 chunks (5.1 MiB)")
    assert re.fullmatch(
        r"epoch 2: 48 elements, [\d,]+/s \(snapshot reading, 48/48 chunks written\)",
        lines[3],
    )
    assert re.fullmatch(r"epoch 2 / epoch 1: [\d.]+x", lines[4])
    assert lines[5:] == [
        "every element once in each epoch: OK",
        "epoch 2 read from the snapshot: OK",
    ]
    assert (folder / "manifest.json").exists()
