"""A PyTorch training loop that checkpoints its input with its model, and resumes.

The pipeline runs on two service workers (``distributed_epoch``) and reaches
the loop through ``zmqdata.torch.IterableDataset``. Every ``SAVE_EVERY`` steps
the loop saves the model, the optimizer and the input's position
(``state_dict()``: the source elements consumed, a few hundred bytes) in one
checkpoint file. Then the trainer "crashes" mid-epoch; a new loop loads the
checkpoint and goes on: it reads exactly the examples the saved run had not
consumed, the ones buffered or in flight at the save included, and none twice.
Run with ``python examples/resume_training.py`` (needs ``pip install zmqdata[torch]``).
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

import zmqdata as zd
from zmqdata import service

try:
    import torch

    from zmqdata.torch import IterableDataset
except ImportError:
    sys.exit("this example needs PyTorch: pip install zmqdata[torch]")

NUM_EXAMPLES, NUM_FEATURES, BATCH = 4096, 8, 64
SAVE_EVERY, CRASH_AT = 10, 25


class Crash(Exception):
    """Stands for the trainer process dying (kill -9, a lost node)."""


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=NUM_FEATURES).astype(np.float32)
    features = rng.normal(size=(NUM_EXAMPLES, NUM_FEATURES)).astype(np.float32)
    return features, (features @ true_w > 0).astype(np.float32)


def train(
    loader_input: IterableDataset, checkpoint: Path, seen: list[int], crash_at: int
) -> None:
    """Trains on ``loader_input``; resumes from ``checkpoint`` if it exists."""
    model = torch.nn.Linear(NUM_FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if checkpoint.exists():
        saved = torch.load(checkpoint)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        loader_input.load_state_dict(saved["input"])
        del seen[saved["seen"] :]  # what the crashed run read after its save
    loader = torch.utils.data.DataLoader(loader_input, batch_size=None)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    for step, (index, x, y) in enumerate(loader, start=1):
        optimizer.zero_grad()
        loss_fn(model(x).squeeze(1), y).backward()
        optimizer.step()
        seen.extend(index.tolist())
        if step % SAVE_EVERY == 0:
            state = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "input": loader_input.state_dict(),
                "seen": len(seen),
            }
            torch.save(state, checkpoint)
        if step == crash_at:
            raise Crash


def main() -> None:
    features, labels = make_data()
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        tempfile.TemporaryDirectory() as folder,
    ):
        ds = (
            zd.Dataset.from_tensor_slices((np.arange(NUM_EXAMPLES), features, labels))
            .batch(BATCH)
            .apply(service.distribute("distributed_epoch", dispatcher.target))
        )
        checkpoint, seen = Path(folder) / "checkpoint.pt", []
        try:
            train(IterableDataset(ds), checkpoint, seen, crash_at=CRASH_AT)
        except Crash:
            print(f"crashed after {len(seen)} examples; resuming from the checkpoint")
        train(IterableDataset(ds), checkpoint, seen, crash_at=-1)
        counts = Counter(seen)
        assert counts == {i: 1 for i in range(NUM_EXAMPLES)}, "not exactly once"
        print(f"{len(seen)} examples, each exactly once across the crash")


if __name__ == "__main__":
    main()
