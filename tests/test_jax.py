"""The JAX adapter ``zmqdata.jax``: global batches, prefetch, orbax checkpoints.

In one process (this one, one CPU device): local pipelines, errors, save and
restore, the orbax handler on its own. Then JAX processes on CPU
(``jax.distributed.initialize`` on loopback, gloo collectives, two devices
each) read one ``distributed_epoch`` job from two in-process workers: every
process makes the same number of steps, a ``psum`` over the global batch
completes at every step, and an orbax checkpoint of killed processes resumes
on another number of processes with every element exactly once. Each process
writes its steps to a file; the test compares them (``tests/ranks.py`` forks
the processes of a run from one interpreter).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import poll_for, run_python
from tests.ranks import Ranks
from tests.service.cluster import Cluster, free_port
from zmqdata import service
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

jax = pytest.importorskip("jax")
pytest.importorskip("orbax.checkpoint")

from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import zmqdata.jax as zj  # after the skips: needs JAX

NUM_ELEMENTS, BATCH, SEED = 240, 4, 5
"""240 elements in local batches of 4: 30 steps on 2 processes, 15 on 4."""
DEVICES_PER_PROCESS = 2
PROCESS_TIMEOUT_S = 60
RUNNING: list[Ranks] = []
"""Every run started: killed after each test, whatever happened."""


def pipeline(target: str, job_name: str) -> zd.Dataset:
    """Elements with unique ids; no num_consumers (global_batches fills it in)."""
    return (
        zd.Dataset.range(NUM_ELEMENTS)
        .map(lambda i: {"id": i, "x": np.array([i, i / 2], np.float32)})
        .apply(
            service.distribute(
                "distributed_epoch", target, job_name=job_name, seed=SEED
            )
        )
        .batch(BATCH)
    )


def data_sharding() -> Any:
    """The batch split over every device of every process."""
    return NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))


# ------------------------------------------------------------ without JAX


def test_missing_jax_gives_a_clear_import_error() -> None:
    result = run_python(
        """
        import sys
        sys.modules["jax"] = None  # as if JAX were not installed
        import zmqdata as zd
        import zmqdata.jax  # importable, so doctest collection still works
        for use in (
            lambda: zmqdata.jax.global_batches(zd.Dataset.range(2), None),
            lambda: zmqdata.jax.GlobalBatches(zd.Dataset.range(2), None),
            lambda: zmqdata.jax.CheckpointHandler,
        ):
            try:
                use()
            except ImportError as error:
                print("ImportError:", error)
        print("jax" in sys.modules and sys.modules["jax"] is not None)
        """
    )
    assert result.returncode == 0, result.stderr
    message = "zmqdata.jax needs JAX and orbax: pip install zmqdata[jax]"
    assert result.stdout.splitlines() == [f"ImportError: {message}"] * 3 + ["False"]


def test_zmqdata_imports_neither_jax_nor_orbax_and_zmqdata_jax_not_orbax() -> None:
    result = run_python(
        """
        import sys
        import zmqdata, zmqdata.service
        print("jax" in sys.modules, "orbax" in sys.modules)
        import zmqdata.jax
        print("jax" in sys.modules, "orbax" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False False", "True False"]


# ------------------------------------------------------------ one process


def test_local_batches_become_global_arrays_leaf_by_leaf() -> None:
    ds = zd.Dataset.range(8).map(
        lambda i: (i, {"x": np.full((3,), i, np.float32), "y": i % 2 == 0})
    )
    sharding = data_sharding()
    with zj.global_batches(ds.batch(4), sharding, prefetch=1) as batches:
        got = list(batches)
    assert len(got) == 2
    ids, rest = got[1]
    assert set(rest) == {"x", "y"}
    for leaf, shape, dtype in [
        (ids, (4,), jax.dtypes.canonicalize_dtype(np.int64)),  # int32 without x64
        (rest["x"], (4, 3), np.float32),
        (rest["y"], (4,), np.bool_),
    ]:
        assert isinstance(leaf, jax.Array)
        assert leaf.shape == shape
        assert leaf.dtype == dtype
        assert leaf.sharding == sharding
    assert np.asarray(ids).tolist() == [4, 5, 6, 7]
    assert np.asarray(rest["x"])[:, 0].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert np.asarray(rest["y"]).tolist() == [True, False, True, False]


def test_bad_arguments_are_named() -> None:
    ds = zd.Dataset.range(8).batch(4)
    sharding = data_sharding()
    with pytest.raises(ValueError, match="prefetch must be >= 1, got 0"):
        zj.global_batches(ds, sharding, prefetch=0)
    with pytest.raises(TypeError, match="prefetch must be an int, got '2'"):
        zj.global_batches(ds, sharding, prefetch="2")
    spec = P("data")
    named = re.escape(f"NamedSharding (a mesh and a PartitionSpec), got {spec!r}")
    with pytest.raises(TypeError, match=named):
        zj.global_batches(ds, spec)
    with pytest.raises(TypeError, match=r"zmqdata\.Dataset, got list"):
        zj.global_batches([1, 2], sharding)
    with (
        zj.global_batches(zd.Dataset.range(3), sharding) as scalars,
        pytest.raises(
            InvalidArgumentError,
            match=r"batch dimension, got the batch = (np.int64\(0\)|0)$",
        ),
    ):
        next(scalars)
    strings = zd.Dataset.from_tensor_slices(np.array(["a", "b"])).batch(2)
    with (
        zj.global_batches(strings, sharding) as batches,
        pytest.raises(InvalidArgumentError, match="no arrays of dtype <U1"),
    ):
        next(batches)


class _FakeSharding:
    """What ``_global_shape`` reads of a NamedSharding: a 2 x 4 mesh, 4 processes."""

    def __init__(self, spec: Any, held: list[int]) -> None:
        self.spec = spec
        self.mesh = type("Mesh", (), {"shape": {"data": 4, "model": 2}})()
        self._held = held  # the row starts of this process's devices

    def addressable_devices_indices_map(self, shape: Any) -> dict[Any, Any]:
        return {d: (slice(start, None),) for d, start in enumerate(self._held)}

    def __repr__(self) -> str:
        return f"Fake({self.spec})"


def test_global_shapes_and_the_errors_naming_the_batch_axis() -> None:
    split = _FakeSharding(P("data"), held=[0])  # 4 processes, one row block each
    assert zj._global_shape("['x']", (2, 3), split, 4) == (8, 3)
    with pytest.raises(InvalidArgumentError) as caught:
        zj._global_shape("['x']", (3, 3), _FakeSharding(P(("data", "model")), []), 2)
    assert str(caught.value).startswith(
        "['x']: a local batch of 3 on 2 processes is a global batch of 6, which "
        "the sharding's batch axis ('data', 'model') of size 8 cannot split evenly"
    )
    replicated = _FakeSharding(P(), held=[0])  # every process holds every row
    with pytest.raises(InvalidArgumentError, match="gives this process's devices 8"):
        zj._global_shape("the batch", (2,), replicated, 4)


def test_save_counts_only_the_batches_yielded_not_those_built_ahead() -> None:
    ds = zd.Dataset.range(40).batch(4)
    sharding = data_sharding()
    batches = zj.global_batches(ds, sharding, prefetch=3)
    assert np.asarray(next(batches)).tolist() == [0, 1, 2, 3]
    background = batches._background
    assert background is not None
    poll_for(lambda: background._buffer.full(), timeout=10)  # 3 built ahead
    state = batches.save()
    assert np.asarray(next(batches)).tolist() == [4, 5, 6, 7]
    with pytest.raises(ValueError, match="before its first batch"):
        batches.restore(state)
    batches.close()
    assert next(batches, None) is None  # closed: ended

    resumed = zj.global_batches(ds, sharding)
    with pytest.raises(TypeError, match="bytes of a position, got 'x'"):
        resumed.restore("x")
    resumed.restore(state)
    with resumed:
        assert [np.asarray(b)[0] for b in resumed] == list(range(4, 40, 4))


def test_close_stops_the_prefetch_thread_mid_read() -> None:
    batches = zj.global_batches(zd.Dataset.range(10**6).batch(2), data_sharding())
    next(batches)
    assert any(t.name == "zmqdata-jax-prefetch" for t in threading.enumerate())
    batches.close()
    assert not any(t.name == "zmqdata-jax-prefetch" for t in threading.enumerate())


def test_a_service_read_is_dealt_to_the_one_process_and_each_call_reads_an_epoch(
    cluster: Callable[..., Cluster],
) -> None:
    ds = pipeline(cluster(num_workers=2).target, "one-process")
    sharding = data_sharding()
    epochs = []
    for _ in range(2):
        with zj.global_batches(ds, sharding) as batches:
            (read,) = [
                n for n in batches.dataset._node.walk() if n.op == "data_service"
            ]
            options = read.args["options"]
            assert (options.num_consumers, options.consumer_index) == (1, 0)
            assert batches.multi_rank
            epochs.append([i for b in batches for i in np.asarray(b["id"]).tolist()])
    (user_read,) = [n for n in ds._node.walk() if n.op == "data_service"]
    assert (
        user_read.args["options"].num_consumers is None
    )  # the user's dataset untouched
    for epoch in epochs:
        assert sorted(epoch) == list(range(NUM_ELEMENTS))
    assert epochs[0] != epochs[1]  # the seed draws a new split order each epoch


def test_a_read_that_cannot_save_says_why_when_asked(
    cluster: Callable[..., Cluster],
) -> None:
    mode = service.distribute("parallel_epochs", cluster().target)
    ds = zd.Dataset.range(8).apply(mode).batch(4)
    with zj.global_batches(ds, data_sharding()) as batches:
        assert not batches.multi_rank
        next(batches)
        with pytest.raises(FailedPreconditionError, match="parallel_epochs"):
            batches.save()
        assert sorted(np.asarray(next(batches)).tolist()) == [4, 5, 6, 7]


def test_the_handler_saves_and_restores_a_position_on_its_own(tmp_path: Path) -> None:
    handler = zj.CheckpointHandler()
    ds = zd.Dataset.range(20).batch(5)
    sharding = data_sharding()
    with zj.global_batches(ds, sharding) as batches:
        next(batches)
        handler.save(tmp_path, args=zj.CheckpointSave(batches))
    assert [p.name for p in tmp_path.iterdir()] == ["process_0.bin"]
    resumed = zj.global_batches(ds, sharding)
    assert handler.restore(tmp_path, args=zj.CheckpointRestore(resumed)) is resumed
    with resumed:
        assert [int(np.asarray(b)[0]) for b in resumed] == [5, 10, 15]

    with pytest.raises(TypeError, match="GlobalBatches, got list"):
        handler.save(tmp_path, args=zj.CheckpointSave([]))
    (tmp_path / "process_2.bin").write_bytes(b"")
    fresh = zj.global_batches(ds, sharding)
    with pytest.raises(
        InvalidArgumentError, match=r"lacks the positions of processes \[1\]"
    ):
        handler.restore(tmp_path, args=zj.CheckpointRestore(fresh))
    (tmp_path / "process_1.bin").write_bytes(b"")
    with pytest.raises(InvalidArgumentError, match="positions of 3 processes, and 1"):
        handler.restore(tmp_path, args=zj.CheckpointRestore(fresh))
    fresh.close()


# ------------------------------------------------------------ JAX processes


def process_main(config: dict[str, Any]) -> None:
    """One JAX process of a run (``tests/ranks.py`` forks it).

    ``config``: rank, world_size, coordinator, target, job_name, out (a
    folder), errors (check bad input first), save_at (orbax checkpoint at
    that step), park_at (stop there and wait to be killed), resume (the
    checkpoint folder to restore from). Writes ``rank{r}.stream`` (per step:
    the psum over the global batch, the global shape, this process's ids)
    and ``rank{r}.json`` (steps, errors) at the end.
    """
    rank, count = config["rank"], config["world_size"]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        config["coordinator"], count, rank, initialization_timeout=30
    )
    assert (jax.process_index(), jax.process_count()) == (rank, count)
    sharding = data_sharding()
    out = Path(config["out"])
    result: dict[str, Any] = {}
    if config.get("errors"):
        result["errors"] = _bad_input_errors(sharding)
    total = jax.jit(
        jax.shard_map(
            lambda x: jax.lax.psum(x.sum(), "data"),
            mesh=sharding.mesh,
            in_specs=P("data"),
            out_specs=P(),
        )
    )
    batches = zj.global_batches(
        pipeline(config["target"], config["job_name"]), sharding
    )
    manager, start = _checkpoints(config, batches)
    step = start
    with batches, open(out / f"rank{rank}.stream", "w") as stream:
        for step, batch in enumerate(batches, start=start + 1):
            ids = batch["id"]
            assert ids.sharding == sharding
            assert batch["x"].sharding == sharding
            shards = sorted(ids.addressable_shards, key=lambda s: s.index[0].start)
            local = np.concatenate([np.asarray(s.data) for s in shards])
            xs = np.concatenate(
                [np.asarray(s.data) for s in batch["x"].addressable_shards]
            )
            assert sorted(xs[:, 0].tolist()) == sorted(local.tolist())
            stream.write(f"{step} {int(total(ids))} {ids.shape[0]} {local.tolist()}\n")
            stream.flush()
            if step == config.get("save_at"):
                params = {
                    "w": jax.device_put(np.full(3, step, np.float32), _replicated())
                }
                args = _ocp().args
                manager.save(
                    step,
                    args=args.Composite(
                        model=args.StandardSave(params), data=zj.CheckpointSave(batches)
                    ),
                )
                manager.wait_until_finished()
            if step == config.get("park_at"):
                (out / f"rank{rank}.parked").touch()
                # Killed while waiting for a go-ahead the test never gives.
                poll_for(lambda: (out / "go-on").exists(), PROCESS_TIMEOUT_S, 0.1)
    manager.close()
    (out / f"rank{rank}.json").write_text(json.dumps({**result, "steps": step}))
    jax.distributed.shutdown()


def _ocp() -> Any:
    import orbax.checkpoint as ocp

    return ocp


def _replicated() -> Any:
    return NamedSharding(data_sharding().mesh, P())


def _checkpoints(config: dict[str, Any], batches: zj.GlobalBatches) -> tuple[Any, int]:
    """The run's orbax manager, and the step it resumes after (0: from the start)."""
    ocp = _ocp()
    folder = Path(config.get("resume") or Path(config["out"]) / "checkpoints")
    manager = ocp.CheckpointManager(folder)
    if not config.get("resume"):
        return manager, 0
    step = manager.latest_step()
    abstract = {"w": jax.ShapeDtypeStruct((3,), np.float32, sharding=_replicated())}
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            model=ocp.args.StandardRestore(abstract), data=zj.CheckpointRestore(batches)
        ),
    )
    assert np.asarray(restored["model"]["w"]).tolist() == [step] * 3
    assert restored["data"] is batches
    return manager, step


def _bad_input_errors(sharding: Any) -> list[str]:
    """The errors global_batches raises on this process for bad input."""
    rank = jax.process_index()
    cases = [
        (zd.Dataset.range(24).batch(3), sharding),  # 3 * 2 processes, 4 devices
        (zd.Dataset.range(32).batch(4 if rank == 0 else 2), sharding),  # specs differ
        (zd.Dataset.range(32).batch(4), _replicated()),  # no rows of its own
        (
            zd.Dataset.range(8).map(lambda x: {}["boom"] if rank else x).batch(4),
            sharding,
        ),
    ]
    errors = []
    for ds, each in cases:
        with zj.global_batches(ds, each) as batches:
            try:
                next(batches)
            except Exception as error:  # the test compares them
                errors.append(f"{type(error).__name__}: {error}")
    return errors


def _stream(path: Path) -> list[tuple[int, int, int, list[int]]]:
    """A process's ``(step, psum, global rows, its ids)`` lines."""
    lines = []
    for line in path.read_text().splitlines():
        step, psum, rows, ids = line.split(" ", 3)
        lines.append((int(step), int(psum), int(rows), json.loads(ids)))
    return lines


@pytest.fixture(autouse=True)
def _no_run_left() -> Iterator[None]:
    """Whatever a test did, no process of it runs after it."""
    yield
    while RUNNING:
        RUNNING.pop().kill()


def _start(out: Path, count: int, **config: Any) -> Ranks:
    ranks = Ranks(
        out,
        count,
        "tests.test_jax:process_main",
        env={
            "JAX_PLATFORMS": "cpu",
            "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES_PER_PROCESS}",
        },
        coordinator=f"127.0.0.1:{free_port()}",
        **config,
    )
    RUNNING.append(ranks)
    return ranks


def _check_steps(ranks: Ranks) -> list[list[tuple[int, int, int, list[int]]]]:
    """Every process's stream, checked: same steps, shapes, and a psum of them all."""
    streams = [_stream(ranks.out / f"rank{r}.stream") for r in range(ranks.world_size)]
    steps = {len(s) for s in streams}
    assert len(steps) == 1, f"processes took different numbers of steps: {steps}"
    for lines in zip(*streams, strict=True):
        assert len({(step, psum, rows) for step, psum, rows, _ in lines}) == 1
        step, psum, rows, _ = lines[0]
        ids = [i for *_, local in lines for i in local]
        assert rows == len(ids) <= BATCH * ranks.world_size, f"step {step}"
        assert psum == sum(ids), f"step {step}: the psum is not over every process"
    return streams


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.timeout(90)
def test_processes_read_one_job_in_step_with_a_psum_every_step(
    cluster: Callable[..., Cluster], tmp_path: Path, count: int
) -> None:
    target = cluster(num_workers=2).target
    ranks = _start(
        tmp_path / "run", count, target=target, job_name="run", errors=count == 2
    )
    ranks.wait(PROCESS_TIMEOUT_S)
    streams = _check_steps(ranks)
    assert len(streams[0]) == NUM_ELEMENTS // (BATCH * count)
    everything = [i for s in streams for *_, local in s for i in local]
    assert sorted(everything) == list(range(NUM_ELEMENTS))  # each exactly once
    results = [
        json.loads((ranks.out / f"rank{r}.json").read_text()) for r in range(count)
    ]
    assert {r["steps"] for r in results} == {NUM_ELEMENTS // (BATCH * count)}
    if count == 2:
        for rank, result in enumerate(results):
            divisible, differ, replicated, failed = result["errors"]
            assert divisible.startswith(
                "InvalidArgumentError: the batch: a local batch of 3 on 2 processes "
                "is a global batch of 6, which the sharding's batch axis ('data',) "
                "of size 4 cannot split"
            )
            assert "process 0: int64[4]; process 1: int64[2]" in differ
            assert "gives this process's devices 8 of the 8 rows" in replicated
            # An error on one process only: raised there, named on the others
            # (none waits forever for the first batch's all-gather).
            if rank == 0:
                assert "process 0: int64[4]; process 1: an error (KeyError" in failed
            else:
                assert failed.startswith("KeyError"), failed


@pytest.mark.timeout(120)
def test_an_orbax_checkpoint_of_killed_processes_resumes_on_4_exactly_once(
    cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    target = cluster(num_workers=2).target
    save_at = random.randint(3, 12)
    killed = _start(
        tmp_path / "killed",
        2,
        target=target,
        job_name="killed",
        save_at=save_at,
        park_at=save_at + 2,
    )
    killed.wait_for_files("rank{rank}.parked", PROCESS_TIMEOUT_S)
    killed.kill()  # every process, -9, two steps past the save

    resumed = _start(
        tmp_path / "resumed",
        4,
        target=target,
        job_name="resumed",
        resume=str(killed.out / "checkpoints"),
    )
    resumed.wait(PROCESS_TIMEOUT_S)
    before = [_stream(killed.out / f"rank{r}.stream") for r in range(2)]
    assert {len(s) for s in before} == {save_at + 2}, f"save_at={save_at}"
    after = _check_steps(resumed)
    assert after[0][0][0] == save_at + 1  # the resumed run numbers on
    trained = [i for s in before for step, *_, ids in s if step <= save_at for i in ids]
    trained += [i for s in after for *_, ids in s for i in ids]
    assert Counter(trained) == Counter(range(NUM_ELEMENTS)), f"save_at={save_at}"


@pytest.mark.timeout(90)
def test_the_train_jax_example_resumes_2_killed_processes_on_1() -> None:
    done = subprocess.run(
        [sys.executable, "examples/train_jax.py"],
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "OK: 2048 examples, each exactly once" in done.stdout
