"""Multi-process JAX training on global batches, checkpointed with orbax.

A dispatcher and two workers run in this process. Two JAX processes (CPU,
``jax.distributed`` on loopback) each read their share of one
``distributed_epoch`` job through ``zmqdata.jax.global_batches``, which fills
in ``num_consumers=2`` and ``consumer_index=jax.process_index()`` and
assembles every step's local batches into global ``jax.Array`` s sharded
over all the processes' devices. They train a logistic regression with
plain ``jax.grad`` SGD: the gradient of the mean loss over the global batch
is reduced across the processes by XLA.

At step ``SAVE_AT`` the processes checkpoint the parameters and the input
with one orbax ``CheckpointManager`` (``CheckpointSave``: each process writes
its position). At step ``KILL_AT`` both are killed (SIGKILL). One new process
restores the checkpoint (``CheckpointRestore`` merges the two positions),
reads the job with a fresh ``job_name`` and trains to the end of the epoch:
it reads exactly the examples no process had trained on at the save (those
read after it, lost with the kill, come again). The script checks it: every
example exactly once over the steps up to the checkpoint and the resumed
run, the same number of steps on every process, and a lower loss at the end;
it prints ``OK`` and exits 0, or exits 1 saying what went wrong.

Run with ``python examples/train_jax.py`` (needs ``pip install zmqdata[jax]``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

import zmqdata as zd
from zmqdata import service

try:
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec

    from zmqdata.jax import CheckpointRestore, CheckpointSave, global_batches
except ImportError:
    sys.exit("this example needs JAX and orbax: pip install zmqdata[jax]")

NUM_EXAMPLES, NUM_FEATURES, BATCH, SEED = 2048, 8, 32, 0
"""2,048 examples in local batches of 32: 32 steps on 2 processes; after 10
steps on 2 processes (640 examples), 44 steps on 1."""
SAVE_AT, KILL_AT = 10, 13
LEARNING_RATE = 0.5
TIMEOUT_S = 120.0


def make_dataset(target: str, run_name: str) -> zd.Dataset:
    """The same pipeline in every process; ``job_name``: one per run."""
    rng = np.random.default_rng(0)
    true_w = rng.normal(size=NUM_FEATURES).astype(np.float32)
    features = rng.normal(size=(NUM_EXAMPLES, NUM_FEATURES)).astype(np.float32)
    labels = (features @ true_w > 0).astype(np.float32)
    return (
        zd.Dataset.from_tensor_slices(
            {"id": np.arange(NUM_EXAMPLES), "x": features, "y": labels}
        )
        .map(lambda e: {**e, "x": e["x"] * 2.0})  # on the service workers
        .apply(
            service.distribute(
                "distributed_epoch", target, job_name=run_name, seed=SEED
            )
        )  # no num_consumers: global_batches fills in the process count and index
        .batch(BATCH, drop_remainder=True)  # per process: the global batch is 32 * P
    )


def loss_fn(params: dict[str, Any], x: Any, y: Any) -> Any:
    logits = x @ params["w"] + params["b"]
    return jnp.mean(jnp.logaddexp(0.0, logits) - y * logits)  # logistic loss


@jax.jit
def train_step(params: dict[str, Any], x: Any, y: Any) -> tuple[Any, Any]:
    """One SGD step on a global batch (XLA reduces over the processes)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss


def train(args: argparse.Namespace) -> None:
    """One JAX process: trains, checkpoints at ``SAVE_AT`` (unless resuming)."""
    # Collectives between processes on CPU (the default in recent JAX releases).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        args.coordinator, args.processes, args.process, initialization_timeout=60
    )
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())
    params = {
        "w": jax.device_put(np.zeros(NUM_FEATURES, np.float32), replicated),
        "b": jax.device_put(np.zeros((), np.float32), replicated),
    }
    batches = global_batches(make_dataset(args.dispatcher, args.run), batch_sharding)
    manager = ocp.CheckpointManager(Path(args.folder) / "checkpoints")
    start = 0
    if args.resume:
        start = manager.latest_step()
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, params)
        restored = manager.restore(
            start,
            args=ocp.args.Composite(
                model=ocp.args.StandardRestore(abstract),
                data=CheckpointRestore(batches),  # merges every process's position
            ),
        )
        params = restored["model"]
    seen = Path(args.folder) / f"{args.run}-process{args.process}.txt"
    losses = []
    step = start
    with batches, open(seen, "w") as out:
        for step, batch in enumerate(batches, start=start + 1):
            params, loss = train_step(params, batch["x"], batch["y"])
            losses.append(float(loss))
            ids = [np.asarray(s.data) for s in batch["id"].addressable_shards]
            out.write(f"{step} {' '.join(map(str, np.concatenate(ids)))}\n")
            out.flush()
            if step == SAVE_AT and not args.resume:
                manager.save(
                    step,
                    args=ocp.args.Composite(
                        model=ocp.args.StandardSave(params),
                        data=CheckpointSave(batches),  # this process's position
                    ),
                )
                manager.wait_until_finished()
            if step == KILL_AT and not args.resume:
                (Path(args.folder) / f"killme-{args.process}").touch()
                time.sleep(TIMEOUT_S)  # the main process kills it
                raise SystemExit("not killed")
    manager.close()
    result = {"steps": step, "first_loss": losses[0], "last_loss": losses[-1]}
    (Path(args.folder) / f"{args.run}-process{args.process}.json").write_text(
        json.dumps(result)
    )
    jax.distributed.shutdown()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Processes:
    """``count`` JAX processes running this script's ``train``."""

    def __init__(self, count: int, target: str, folder: str, run: str) -> None:
        self.folder = Path(folder)
        coordinator = f"127.0.0.1:{free_port()}"
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--process", str(index),
                    "--processes", str(count),
                    "--coordinator", coordinator,
                    "--dispatcher", target,
                    "--folder", folder,
                    "--run", run,
                    *(["--resume"] if run != "run-1" else []),
                ],
                env=env,
                start_new_session=True,
            )
            for index in range(count)
        ]  # fmt: skip

    def wait_for(self, names: list[str]) -> None:
        """Until every file of ``names`` exists in the folder; exits on a failure."""
        deadline = time.monotonic() + TIMEOUT_S
        while not all((self.folder / name).exists() for name in names):
            failed = [p.returncode for p in self.procs if p.poll()]
            if failed or time.monotonic() > deadline:
                self.kill()
                sys.exit(f"FAILED: a process exited with {failed} or timed out")
            time.sleep(0.05)

    def kill(self) -> None:
        """kill -9 on every process."""
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def read_seen(folder: Path, run: str, count: int) -> list[list[tuple[int, list[int]]]]:
    """Each process's ``(step, example ids)`` lines."""
    processes = []
    for index in range(count):
        lines = (folder / f"{run}-process{index}.txt").read_text().splitlines()
        steps = [(int(s), [int(i) for i in rest]) for s, *rest in map(str.split, lines)]
        processes.append(steps)
    return processes


def main() -> None:
    with (
        service.DispatchServer() as dispatcher,
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        service.WorkerServer(service.WorkerConfig(dispatcher.target)),
        tempfile.TemporaryDirectory() as name,
    ):
        folder, target = Path(name), dispatcher.target

        first = Processes(2, target, name, "run-1")
        first.wait_for(["killme-0", "killme-1"])  # both at KILL_AT
        first.kill()  # the whole job dies
        print(f"2 processes killed at step {KILL_AT}; checkpoint at step {SAVE_AT}")

        resumed = Processes(1, target, name, "run-2")
        resumed.wait_for(["run-2-process0.json"])
        if resumed.procs[0].wait(TIMEOUT_S) != 0:
            sys.exit("FAILED: the resumed process failed")

        before = read_seen(folder, "run-1", 2)
        after = read_seen(folder, "run-2", 1)
        steps_before = {len(lines) for lines in before}
        trained = [
            i for lines in before for step, ids in lines if step <= SAVE_AT for i in ids
        ]
        trained += [i for lines in after for _, ids in lines for i in ids]
        counts = Counter(trained)
        twice = sorted(i for i, n in counts.items() if n > 1)
        never = sorted(set(range(NUM_EXAMPLES)) - set(counts))
        result = json.loads((folder / "run-2-process0.json").read_text())
        if twice or never or steps_before != {KILL_AT}:
            sys.exit(
                f"FAILED: {len(twice)} examples twice {twice[:10]}, {len(never)} "
                f"never {never[:10]}, steps of the killed processes {steps_before}"
            )
        if not result["last_loss"] < 0.5:
            sys.exit(f"FAILED: the loss did not go down: {result}")
        print(
            f"OK: {NUM_EXAMPLES} examples, each exactly once: steps 1-{SAVE_AT} on 2 "
            f"processes, then steps {SAVE_AT + 1}-{result['steps']} on 1 process; "
            f"loss {result['last_loss']:.3f} at the end"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--process", type=int)
    parser.add_argument("--processes", type=int)
    parser.add_argument("--coordinator")
    parser.add_argument("--dispatcher")
    parser.add_argument("--folder")
    parser.add_argument("--run")
    parser.add_argument("--resume", action="store_true")
    arguments = parser.parse_args()
    if arguments.process is None:
        main()
    else:
        train(arguments)
