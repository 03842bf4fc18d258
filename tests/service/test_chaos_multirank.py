"""Multi-rank reads killed -9 and resumed on another number of ranks: all processes.

A fault-tolerant ``zmqdata dispatcher`` and ``zmqdata worker`` daemons serve a
seeded ``distributed_epoch`` read dealt to ``R = 4`` rank processes
(``tests/service/multirank_rank.py``). Each rank logs every element it
consumes and saves ``it.save()`` every ``SAVE_EVERY`` steps, at the same steps
on every rank. Each trial, with faults by turn (``FAULTS``):

1. the ranks read to random steps past a common save and are killed -9;
   before the save a worker is killed -9 mid-read (and replaced), or the
   dispatcher is killed -9 and restarted on its work dir and port;
2. the states of the last step every rank saved are merged
   (``service.merge_positions``) and ``R'`` new ranks (3 or 5, by turn) with
   a fresh ``job_name`` restore them and read to the end, while a worker is
   killed -9 (and replaced), the dispatcher is killed -9 and restarted, or
   both at once.

Checks: the elements consumed up to the merged save plus the resumed run are
every element exactly once, but for at most ``R' - 1`` left out at the very
end; every rank of a run reads as many steps and elements as the others; and
the global order (rank streams interleaved element by element, round by
round) of the saved prefix followed by the resumed run is the uninterrupted
read's order with the same seed. Every trial must end within a deadline.

``ZMQDATA_CHAOS_TRIALS`` sets the number of trials (default 4, one of each
fault; 8 give each fault with 3 and with 5 resumed ranks);
``ZMQDATA_CHAOS_SEED`` the seeds, steps and workers drawn;
``ZMQDATA_CHAOS_FAULTS`` (comma separated) the faults taken by turn.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.cli.procs import Proc, zmqdata
from tests.helpers import poll_for
from tests.service.cluster import free_port
from tests.service.multirank_rank import pipeline
from tests.service.test_dispatcher_kill import num_workers, start_dispatcher
from tests.service.validated import assert_records_valid
from zmqdata import service

pytestmark = pytest.mark.slow
TRIALS = int(os.environ.get("ZMQDATA_CHAOS_TRIALS", "4"))
ROOT = Path(__file__).resolve().parents[2]
N = 10_000  # 8,000 elements pass the filter
BATCH = 10  # elements per step, batched in the rank
RANKS = 4  # R of the first run
RESUMED = (3, 5)  # R' of the resumed run, alternately
SAVE_EVERY = 10  # steps
WORKERS = 3
FAULTS = tuple(
    os.environ.get(
        "ZMQDATA_CHAOS_FAULTS", "worker+dispatcher,none,worker,dispatcher"
    ).split(",")
)
DELAY_S = 0.002  # per step in a rank: faults land mid-read
TRIAL_DEADLINE_S = 60.0
READ_DEADLINE_S = 40.0


@functools.cache
def expected(n: int) -> Counter[int]:
    return Counter(int(v) for v in pipeline(n))


def flat(steps: list[list[int]]) -> list[int]:
    return [value for step in steps for value in step]


def first_difference(got: list[int], want: list[int]) -> int:
    return next(
        (i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
        min(len(got), len(want)),
    )


def interleave(streams: list[list[int]]) -> list[int]:
    """The global order: element ``i`` of rank ``r`` is global element ``i*R + r``."""
    lengths = {len(stream) for stream in streams}
    assert len(lengths) == 1, f"ranks read unequal counts: {sorted(lengths)}"
    return [value for round_ in zip(*streams, strict=True) for value in round_]


def read_ranks(target: str, job_name: str, ranks: int, seed: int) -> list[list[int]]:
    """An uninterrupted read by ``ranks`` consumer threads: each rank's elements."""
    got: list[list[int]] = [[] for _ in range(ranks)]
    errors: list[BaseException] = []

    def rank(index: int) -> None:
        try:
            got[index] = read_rank(index)
        except BaseException as error:
            errors.append(error)

    def read_rank(index: int) -> list[int]:
        ds = pipeline(N).apply(
            service.distribute(
                "distributed_epoch",
                target,
                job_name=job_name,
                num_consumers=ranks,
                consumer_index=index,
                seed=seed,
            )
        )
        with iter(ds) as iterator:
            return [int(v) for v in iterator]

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(READ_DEADLINE_S)
    assert not any(t.is_alive() for t in threads), "the reference read did not end"
    if errors:
        raise errors[0]
    return got


class Cluster:
    """A fault-tolerant dispatcher process and ``WORKERS`` worker processes."""

    def __init__(self, stack: ExitStack, tmp_path: Path) -> None:
        self.stack, self.port = stack, free_port()
        self.target = f"tcp://127.0.0.1:{self.port}"
        self.config = tmp_path / "dispatcher.yaml"
        self.config.write_text(
            "dispatcher:\n  worker_timeout_ms: 500\n  client_timeout_ms: 5000\n"
        )
        self.work_dir = str(tmp_path / "journal")
        self.dispatcher = self._dispatcher()
        self.workers: list[Proc] = []
        self.replace_workers()
        self.settled()

    def _dispatcher(self) -> Proc:
        return start_dispatcher(
            self.stack, self.port, self.work_dir, "--config", str(self.config)
        )

    def settled(self) -> None:
        """All workers back, and the dispatcher's records valid (every trial's end)."""
        poll_for(lambda: num_workers(self.target) == WORKERS, timeout=20)
        assert_records_valid(self.dispatcher)

    def kill_worker(self, rng: random.Random) -> None:
        """Kills a random worker -9 (``replace_workers`` starts a new one)."""
        victim = self.workers.pop(rng.randrange(len(self.workers)))
        victim.stop(signal.SIGKILL)

    def replace_workers(self) -> None:
        """Starts workers (at once) until there are ``WORKERS``; waits until ready."""
        args = ("worker", "--dispatcher", self.target, "--heartbeat-interval-ms", "50")
        new = [
            self.stack.enter_context(zmqdata(*args))
            for _ in range(WORKERS - len(self.workers))
        ]
        for worker in new:
            worker.wait_for_line(r"worker ready: ")
        self.workers += new

    def report(self, run: Run) -> str:
        """What the processes said, and how far each rank of ``run`` read."""
        tails = [f"rank steps: {[len(run.steps(r)) for r in range(run.ranks)]}"]
        try:
            status = service.get_status(self.target, timeout_s=5)
            tails += [
                f"job: {json.dumps(job, default=str)}"
                for job in status["jobs"]
                if job["job_name"] == run.job_name
            ]
            tails += [
                f"worker {w['address']}: buffer fill {w['stats'].get('buffer_fill')}"
                for w in status["workers"]
            ]
        except Exception as error:  # the report must not hide the failure
            tails.append(f"no status: {error!r}")
        for name, proc in [
            ("ranks", run.launcher),
            ("dispatcher", self.dispatcher),
            *((f"worker {i}", w) for i, w in enumerate(self.workers)),
        ]:
            tails.append(f"--- {name}:\n" + "\n".join(proc.lines[-40:]))
        return "\n".join(tails)

    def restart_dispatcher(self) -> None:
        """Kills the dispatcher -9 and starts it again on its work dir and port."""
        assert_records_valid(self.dispatcher)
        self.dispatcher.stop(signal.SIGKILL)
        self.dispatcher = self._dispatcher()


class References:
    """Uninterrupted reads' global orders, one per seed (read once)."""

    def __init__(self, target: str) -> None:
        self.target, self._jobs = target, 0
        self._orders: dict[int, list[int]] = {}

    def order(self, seed: int) -> list[int]:
        """The whole global order: one consumer, so nothing left out at the end."""
        if seed not in self._orders:
            self._orders[seed] = self.read(1, seed)
        return self._orders[seed]

    def read(self, ranks: int, seed: int) -> list[int]:
        self._jobs += 1
        job = f"reference-{self._jobs}"
        return interleave(read_ranks(self.target, job, ranks, seed))


class Run:
    """One run of rank processes; rank ``r`` logs to ``directory/rank-<r>.txt``.

    ``spec``: what every rank reads; ``each``: more keys for each rank.
    """

    def __init__(
        self,
        stack: ExitStack,
        directory: Path,
        spec: dict[str, Any],
        each: list[dict[str, Any]],
    ) -> None:
        self.ranks, self.directory = len(each), directory
        self.job_name: str = spec["job_name"]
        directory.mkdir(parents=True)
        specs = [
            {
                **spec,
                **more,
                "num_consumers": self.ranks,
                "consumer_index": r,
                "out": str(self.out(r)),
                "states": str(self.states(r)),
            }
            for r, more in enumerate(each)
        ]
        self.launcher = stack.enter_context(
            zmqdata(
                json.dumps(specs),
                prefix=["env", f"PYTHONPATH={ROOT}"],
                module="tests.service.multirank_rank",
            )
        )
        self.pids = [
            int(self.launcher.wait_for_line(rf"^rank {r} pid (\d+)$").group(1))
            for r in range(self.ranks)
        ]

    def out(self, rank: int) -> Path:
        return self.directory / f"rank-{rank}.txt"

    def states(self, rank: int) -> Path:
        return self.directory / f"states-{rank}"

    def steps(self, rank: int) -> list[list[int]]:
        """The complete lines of a rank's log (a kill may cut the last one)."""
        try:
            text = self.out(rank).read_text()
        except FileNotFoundError:
            return []
        return [[int(v) for v in line.split()] for line in text.split("\n")[:-1]]

    def min_steps(self) -> int:
        """The fewest steps a rank has logged so far."""
        counts = []
        for rank in range(self.ranks):
            try:
                counts.append(self.out(rank).read_bytes().count(b"\n"))
            except FileNotFoundError:
                counts.append(0)
        return min(counts)

    def wait_for(self, what: str, deadline: float) -> list[str]:
        """``(.*)`` of each rank's first ``rank R: WHAT`` line (waits for all)."""
        return [
            self.launcher.wait_for_line(
                rf"^rank {r}: {what}$", timeout=max(0.1, deadline - time.monotonic())
            ).group(1)
            for r in range(self.ranks)
        ]

    def kill(self) -> None:
        """Kills every rank -9; the launcher reports each kill."""
        for pid in self.pids:
            os.kill(pid, signal.SIGKILL)
        for r in range(self.ranks):
            self.launcher.wait_for_line(rf"^rank {r} killed by signal 9$", timeout=10)

    def exit_code(self) -> int:
        """The launcher's: 0 when every rank's read ended well."""
        return self.launcher.popen.wait(10)


def trial(
    cluster: Cluster,
    references: References,
    rng: random.Random,
    directory: Path,
    number: int,
) -> str:
    """One trial (see the module docstring); returns a line describing it."""
    started = time.monotonic()
    deadline = started + TRIAL_DEADLINE_S
    seed = rng.randrange(1_000)
    fault = FAULTS[number % len(FAULTS)]
    resumed = RESUMED[(number + number // len(FAULTS)) % len(RESUMED)]  # 8: all
    order = references.order(seed)
    spec = {
        "target": cluster.target,
        "seed": seed,
        "n": N,
        "batch": BATCH,
        "save_every": SAVE_EVERY,
        "delay": DELAY_S,
    }

    # 1. R ranks read to steps of their own past a common save, then die (-9).
    saved_at = SAVE_EVERY * rng.randint(1, 15)
    stops = [saved_at + rng.randrange(2 * SAVE_EVERY) for _ in range(RANKS)]
    merged_at = min(stop // SAVE_EVERY * SAVE_EVERY for stop in stops)
    where = (
        f"trial {number} (seed {seed}, {fault}, {RANKS} ranks stopped at {stops}, "
        f"merged at {merged_at}, -> {resumed} ranks)"
    )
    with ExitStack() as stack:
        first = Run(
            stack,
            directory / "first",
            {**spec, "job_name": f"t{number}-first"},
            [{"stop_at": stop} for stop in stops],
        )
        if fault in ("worker", "dispatcher"):  # mid-read, before the save
            poll_for(lambda: first.min_steps() >= merged_at // 2, timeout=20)
            if fault == "worker":
                cluster.kill_worker(rng)
                cluster.replace_workers()
            else:
                cluster.restart_dispatcher()
        try:
            stopped = first.wait_for(r"stopped at (\d+)", deadline)
        except AssertionError as error:
            raise AssertionError(f"{where}: {error}\n{cluster.report(first)}") from None
        assert [int(s) for s in stopped] == stops, where
        first.kill()
    states = []
    for rank in range(RANKS):
        saved = sorted(int(p.stem) for p in first.states(rank).glob("*.bin"))
        assert saved == list(range(SAVE_EVERY, stops[rank] + 1, SAVE_EVERY)), where
        states.append((first.states(rank) / f"{merged_at}.bin").read_bytes())
    merged = directory / "merged.bin"
    merged.write_bytes(service.merge_positions(states))
    logged = [first.steps(rank) for rank in range(RANKS)]
    for rank, steps in enumerate(logged):
        assert len(steps) >= stops[rank], (where, rank, len(steps))
    prefix = interleave([flat(steps[:merged_at]) for steps in logged])
    assert len(prefix) == RANKS * BATCH * merged_at, where

    # 2. R' new ranks restore the merged position and read to the end.
    with ExitStack() as stack:
        second = Run(
            stack,
            directory / "second",
            {**spec, "job_name": f"t{number}-second", "restore": str(merged)},
            [{} for _ in range(resumed)],
        )
        if fault != "none":
            at = rng.randint(1, 30)
            poll_for(lambda: second.min_steps() >= at, timeout=20)
            # With both, both die at once, mid-read: the dispatcher is back
            # before the lost worker's elements can be handed out again.
            if "worker" in fault:
                cluster.kill_worker(rng)
            if "dispatcher" in fault:
                cluster.restart_dispatcher()
            cluster.replace_workers()
        try:
            done = [int(s) for s in second.wait_for(r"done (\d+)", deadline)]
        except AssertionError as error:
            raise AssertionError(
                f"{where}: {error}\n{cluster.report(second)}"
            ) from None
        assert second.exit_code() == 0, f"{where}:\n{second.launcher.stderr}"
    assert len(set(done)) == 1, f"{where}: unequal steps per rank: {done}"
    logged = [second.steps(rank) for rank in range(resumed)]
    assert [len(steps) for steps in logged] == done, where
    resumed_order = interleave([flat(steps) for steps in logged])  # equal counts

    # Exactly once, in the uninterrupted read's order; at most R'-1 left out.
    got = prefix + resumed_order
    counts, want = Counter(got), expected(N)
    left_out = want - counts
    assert not counts - want, f"{where}: repeated or foreign: {counts - want}"
    assert len(left_out) < resumed, f"{where}: {len(left_out)} missing"
    assert got == order[: len(got)], (
        f"{where}: the order differs from the uninterrupted read's from global "
        f"element {first_difference(got, order)} (the prefix has {len(prefix)})"
    )
    assert set(order[len(got) :]) == set(left_out), where
    took = time.monotonic() - started
    assert took < TRIAL_DEADLINE_S, (where, took)
    return (
        f"{where}: {len(prefix)} + {len(resumed_order)} elements, "
        f"left out {len(left_out)}, {took:.1f} s"
    )


@pytest.mark.timeout(120 + 45 * TRIALS)
def test_ranks_killed_after_a_save_resume_on_other_rank_counts_exactly_once_in_order(
    tmp_path,
):
    rng = random.Random(int(os.environ.get("ZMQDATA_CHAOS_SEED", "21")))
    with ExitStack() as stack:
        cluster = Cluster(stack, tmp_path)
        references = References(cluster.target)
        # The global order does not depend on R: R ranks' streams, interleaved,
        # are the one-consumer read's order (less at most R-1 at the end).
        seed = rng.randrange(1_000)
        of_r = references.read(RANKS, seed)
        whole = references.order(seed)
        assert of_r == whole[: len(of_r)]
        assert len(whole) - len(of_r) < RANKS
        assert Counter(whole) == expected(N)
        for number in range(TRIALS):
            line = trial(cluster, references, rng, tmp_path / f"trial-{number}", number)
            print(line, flush=True)  # shown with -s
            cluster.settled()
