"""``examples/loss_spike.py``: back to a checkpoint, the spike's steps skipped, resumed."""

from __future__ import annotations

from tests.helpers import run_example


def test_the_loss_spike_example_skips_exactly_the_steps_it_names() -> None:
    out = run_example("loss_spike.py")
    assert out.splitlines() == [
        "loss spike at step 47: back to the checkpoint of step 40",
        "skipped steps 41..52; resumed on 3 ranks",
        "the resumed run reads what the run would have read after them: OK",
        "24 batches skipped, 150 read after the resume",
    ]
