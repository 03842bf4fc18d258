"""Rank processes of a multi-process training run in tests, always cleaned up.

The ranks of a run are forked by one ``python -c`` process (``launch_main``),
which imports the framework once: importing torch or JAX in every rank costs
seconds of CPU on a small machine. Each rank runs ``entry(config)`` (a
``module:function`` name) and logs to ``rank{r}.log`` in the run's folder;
the parent (``Ranks``) waits for them, or kills the whole run at once.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import poll_for

TIMEOUT_S = 60.0
"""How long a run may take by default."""


def launch_main() -> None:
    """Forks the ranks of a run: ``python -c '...; launch_main()' CONFIG``.

    ``CONFIG`` (JSON) names ``entry``, ``world_size`` and ``out`` (a folder);
    each rank gets it with its ``rank`` added. Exits 0 when every rank did;
    kills the others as soon as one fails (no rank waits on a dead peer's
    collective).
    """
    config = json.loads(sys.argv[1])
    module, _, name = config["entry"].partition(":")
    entry = getattr(importlib.import_module(module), name)
    out = Path(config["out"])
    children: dict[int, int] = {}
    for rank in range(config["world_size"]):
        pid = os.fork()
        if pid == 0:  # the rank: no thread runs yet (nothing started one)
            code = 1
            try:
                log = os.open(out / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT, 0o644)
                os.dup2(log, 1)
                os.dup2(log, 2)
                entry({**config, "rank": rank})
                code = 0
            except BaseException:  # the log and the exit code tell
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children[pid] = rank
    failed = False
    while children:
        pid, status = os.wait()
        del children[pid]
        if os.waitstatus_to_exitcode(status) != 0 and not failed:
            failed = True
            for other in children:
                with suppress(ProcessLookupError):
                    os.kill(other, signal.SIGKILL)
    sys.exit(1 if failed else 0)


class Ranks:
    """The ``world_size`` ranks of one run of ``entry`` (``launch_main``).

    Add each to a list that a fixture kills after the test (``kill``), so no
    rank outlives its test whatever happened.
    """

    def __init__(
        self,
        out: Path,
        world_size: int,
        entry: str,
        env: dict[str, str] | None = None,
        **config: Any,
    ) -> None:
        self.out = out
        self.world_size = world_size
        out.mkdir(parents=True)
        code = "from tests.ranks import launch_main; launch_main()"
        args = {**config, "entry": entry, "world_size": world_size, "out": str(out)}
        with open(out / "launcher.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code, json.dumps(args)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
                start_new_session=True,  # its group: the ranks, killed together
            )

    def logs(self) -> str:
        paths = [self.out / "launcher.log"]
        paths += [self.out / f"rank{r}.log" for r in range(self.world_size)]
        return "\n".join(
            f"--- {path.name}:\n" + path.read_text(errors="replace")[-3000:]
            for path in paths
            if path.exists()
        )

    def wait(self, timeout: float = TIMEOUT_S) -> None:
        """Waits for every rank to exit 0 (fails, with their output, otherwise)."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"ranks still running after {timeout} s:\n{self.logs()}")
        if code != 0:
            pytest.fail(f"a rank failed (exit {code}):\n{self.logs()}")

    def wait_for_files(self, pattern: str, timeout: float = TIMEOUT_S) -> None:
        """Waits until every rank wrote ``pattern.format(rank=r)`` (no rank exited)."""

        def ready() -> bool:
            if self.proc.poll() is not None:
                pytest.fail(f"the ranks exited early:\n{self.logs()}")
            names = (pattern.format(rank=r) for r in range(self.world_size))
            return all((self.out / name).exists() for name in names)

        try:
            poll_for(ready, timeout=timeout, interval=0.05)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        """SIGKILL to the launcher and every rank (one process group)."""
        if self.proc.poll() is not None:
            return  # exited: it had waited for its ranks
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def ddp_steps(
    source: Any, config: dict[str, Any], line: Callable[[int, Any], str]
) -> tuple[int, bool]:
    """Reads ``source`` (a ``zmqdata.torch.IterableDataset``) in DDP steps, on one rank.

    Every step is a collective (an ``all_reduce`` of whether the rank has a
    batch: all ranks take one, or none). Each step's ``line(step, batch)`` goes
    to ``rank{r}.stream``; at ``config["save_at"]`` the ranks checkpoint
    (``gather_state_dict``; rank 0 writes ``checkpoint.pt``); at
    ``config["stop_at"]`` they stop. Returns the steps taken and whether every
    rank ran out at the same step.
    """
    import torch

    import zmqdata.torch as zt

    rank, world_size = config["rank"], config["world_size"]
    out = Path(config["out"])
    distributed = torch.distributed
    loader = iter(torch.utils.data.DataLoader(source, batch_size=None))
    step, equal = 0, True
    with open(out / f"rank{rank}.stream", "w") as stream:
        while step != config.get("stop_at"):
            batch = next(loader, None)
            has = torch.tensor([0 if batch is None else 1])
            distributed.all_reduce(has)  # a step's collective: all ranks or none
            if has.item() != world_size:
                equal = has.item() == 0
                break
            step += 1
            stream.write(line(step, batch) + "\n")
            if step == config.get("save_at"):
                state = zt.gather_state_dict(source)
                if rank == 0:
                    torch.save(state, out / "checkpoint.tmp")
                    os.replace(out / "checkpoint.tmp", out / "checkpoint.pt")
                distributed.barrier()
    return step, equal
