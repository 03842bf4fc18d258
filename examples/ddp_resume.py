"""DDP on a multi-rank read: checkpoint on 4 ranks, get killed, resume on 3.

A dispatcher and two workers run in this process. Four DDP ranks (gloo, CPU)
each read their share of one ``distributed_epoch`` job through
``zmqdata.torch.IterableDataset``, which fills in ``num_consumers=4`` and
``consumer_index=rank``: the service deals the elements round-robin, so
every rank takes the same number of steps (no rank waits forever in an
``all_reduce``) and, with a ``seed``, reads the same elements in every run.

At step ``SAVE_AT`` the ranks checkpoint the model, the optimizer and the
input: ``gather_state_dict`` all-gathers every rank's position and merges
them. At step ``KILL_AT`` every rank is killed (SIGKILL). Three new ranks
load the checkpoint, read the job with a fresh ``job_name`` and train on:
together they read exactly the examples no rank had trained on at the save
(those read after it, lost with the kill, come again), dealt equally, in the
order the killed run would have gone on with. The script checks it: every
example exactly once over the steps up to the checkpoint and the resumed
run, and the same number of steps on every rank; it prints ``OK`` and exits 0,
or exits 1 saying what went wrong.

Run with ``python examples/ddp_resume.py`` (needs ``pip install zmqdata[torch]``).
"""

from __future__ import annotations

import faulthandler
import json
import multiprocessing
import os
import queue
import socket
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from zmqdata.torch import IterableDataset, gather_state_dict
except ImportError:
    sys.exit("this example needs PyTorch: pip install zmqdata[torch]")

NUM_EXAMPLES, NUM_FEATURES, BATCH, SEED = 4800, 8, 16, 0
"""4,800 examples in batches of 16: 75 steps on 4 ranks; after 15 steps on 4
ranks (960 examples), 80 steps on 3 ranks. Sizes that make every round
complete; otherwise the at most R-1 examples of a last incomplete round go
to nobody (counted in ``service.get_status``)."""
SAVE_AT, KILL_AT = 15, 18
TIMEOUT_S = 100.0


def make_dataset(target: str, run_name: str) -> zd.Dataset:
    """The same pipeline on every rank; ``job_name``: one per run."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=NUM_FEATURES).astype(np.float32)
    features = rng.normal(size=(NUM_EXAMPLES, NUM_FEATURES)).astype(np.float32)
    labels = (features @ true_w > 0).astype(np.float32)
    return (
        zd.Dataset.from_tensor_slices((np.arange(NUM_EXAMPLES), features, labels))
        .map(lambda i, x, y: (i, x * 2.0, y))  # on the service workers
        .apply(
            service.distribute(
                "distributed_epoch", target, job_name=run_name, seed=SEED
            )
        )  # no num_consumers: IterableDataset fills in world_size and rank
        .batch(BATCH)
    )


def train(*args: Any) -> None:
    """A rank's process: ``_train(*args)``, saying at once why it failed.

    A rank stuck for half the deadline prints where (every thread), and waits on.
    """
    faulthandler.dump_traceback_later(TIMEOUT_S / 2)
    try:
        _train(*args)
    except BaseException:
        traceback.print_exc()  # at once: tearing down may wait on the other ranks
        sys.stderr.flush()
        raise


def _train(
    rank: int,
    world_size: int,
    port: int,
    target: str,
    run_name: str,
    folder: str,
    reports: Any,
    go_on: Any,
    resume: bool,
) -> None:
    """One DDP rank: trains, checkpoints at ``SAVE_AT`` (unless resuming)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    checkpoint = Path(folder) / "checkpoint.pt"
    source = IterableDataset(make_dataset(target, run_name))
    model = DistributedDataParallel(torch.nn.Linear(NUM_FEATURES, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    first_step = 1
    if resume:
        saved = torch.load(checkpoint)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        source.load_state_dict(saved["input"])  # the merged position of 4 ranks
        first_step = saved["step"] + 1
    loader = torch.utils.data.DataLoader(source, batch_size=None)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    step = first_step - 1
    with open(Path(folder) / f"{run_name}-rank{rank}.txt", "w") as seen:
        for step, (index, x, y) in enumerate(loader, start=first_step):
            optimizer.zero_grad()
            loss_fn(model(x).squeeze(1), y).backward()  # all_reduce of gradients
            optimizer.step()
            seen.write(f"{step} {' '.join(map(str, index.tolist()))}\n")
            seen.flush()
            if step == SAVE_AT and not resume:
                state = {
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "input": gather_state_dict(source),  # collective: every rank
                    "step": step,
                }
                if rank == 0:
                    torch.save(state, checkpoint.with_suffix(".tmp"))
                    os.replace(checkpoint.with_suffix(".tmp"), checkpoint)
                dist.barrier()
            if step == KILL_AT and not resume:
                reports.put(("at KILL_AT", rank, step))
                go_on.wait(TIMEOUT_S)  # never set: the main process kills the ranks
                raise SystemExit("not killed")
    # Every rank at the end before any tears down: no collective is left in
    # flight when a rank's process group goes (a rank whose DDP module died
    # with a collective pending could wait forever, holding the GIL).
    dist.barrier()
    reports.put(("done", rank, step))
    del model, optimizer
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Ranks:
    """``world_size`` processes running ``train``, and what they report."""

    def __init__(self, world_size: int, *args: Any, resume: bool) -> None:
        # Not fork: this process runs servers (threads). A fork server imports
        # torch and zmqdata once and forks each rank from that clean process
        # (DistributedDataParallel imports torch._dynamo on first use: that too).
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(
            ["torch._dynamo", "torch.distributed", "zmqdata.torch"]
        )
        self.target, self.run_name = args[0], args[1]
        self.reports = context.Queue()
        self.go_on = context.Event()  # never set: ranks at KILL_AT get killed
        port = free_port()
        self.processes = [
            context.Process(
                target=train,
                args=(rank, world_size, port, *args, self.reports, self.go_on, resume),
                daemon=True,
            )
            for rank in range(world_size)
        ]
        for process in self.processes:
            process.start()

    def wait_for_reports(self) -> list[tuple[str, int, int]]:
        """One report from each rank; exits if a rank dies first or time runs out."""
        got: list[tuple[str, int, int]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(self.processes):
            try:
                got.append(self.reports.get(timeout=0.5))
            except queue.Empty:
                dead = [p.exitcode for p in self.processes if p.exitcode]
                if dead or time.monotonic() > deadline:
                    self.kill()
                    self.describe_job()
                    sys.exit(
                        f"FAILED: a rank exited with {dead} or timed out; "
                        f"reports: {got}"
                    )
        return got

    def describe_job(self) -> None:
        """What the dispatcher knows of this run's job (to stderr, for a failure)."""
        jobs = service.get_status(self.target)["jobs"]
        mine = [job for job in jobs if job.get("job_name") == self.run_name]
        print(json.dumps(mine, default=str)[:6000], file=sys.stderr)

    def kill(self) -> None:
        """kill -9 on every rank."""
        for process in self.processes:
            process.kill()
        for process in self.processes:
            process.join()

    def join(self) -> list[int | None]:
        """The exit codes, once every rank has exited."""
        for process in self.processes:
            process.join(TIMEOUT_S)
        return [process.exitcode for process in self.processes]


def read_seen(
    folder: Path, run_name: str, world_size: int
) -> list[list[tuple[int, list[int]]]]:
    """Each rank's ``(step, example indices)`` lines."""
    ranks = []
    for rank in range(world_size):
        lines = (folder / f"{run_name}-rank{rank}.txt").read_text().splitlines()
        steps = [(int(s), [int(i) for i in rest]) for s, *rest in map(str.split, lines)]
        ranks.append(steps)
    return ranks


def main() -> None:
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        tempfile.TemporaryDirectory() as name,
    ):
        folder, target = Path(name), dispatcher.target

        first = Ranks(4, target, "run-1", name, resume=False)
        first.wait_for_reports()  # every rank at KILL_AT
        first.kill()  # the whole job dies
        print(f"4 ranks killed at step {KILL_AT}; checkpoint at step {SAVE_AT}")

        resumed = Ranks(3, target, "run-2", name, resume=True)
        done = resumed.wait_for_reports()
        codes = resumed.join()
        if codes != [0, 0, 0]:
            sys.exit(f"FAILED: resumed ranks exited with {codes}")

        before = read_seen(folder, "run-1", 4)
        after = read_seen(folder, "run-2", 3)
        trained = [
            i for rank in before for step, ids in rank if step <= SAVE_AT for i in ids
        ]
        trained += [i for rank in after for _, ids in rank for i in ids]
        counts = Counter(trained)
        twice = sorted(i for i, n in counts.items() if n > 1)
        never = sorted(set(range(NUM_EXAMPLES)) - set(counts))
        last_steps = {step for _, _, step in done}
        if twice or never or len(last_steps) != 1:
            sys.exit(
                f"FAILED: {len(twice)} examples twice {twice[:10]}, {len(never)} "
                f"never {never[:10]}, last steps of the ranks {sorted(last_steps)}"
            )
        print(
            f"OK: {NUM_EXAMPLES} examples, each exactly once: steps 1-{SAVE_AT} on 4 "
            f"ranks, then steps {SAVE_AT + 1}-{last_steps.pop()} on 3 ranks, every "
            "rank the same number of steps"
        )


if __name__ == "__main__":
    main()
