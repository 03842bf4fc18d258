"""DDP over a multi-rank read: equal steps, same streams per seed, resume on 3 ranks.

The process tests run the real thing: a ``zmqdata dispatcher`` and two
``zmqdata worker`` daemons started by the CLI, and rank processes with
``torch.distributed`` (gloo, CPU) that read their share through
``zmqdata.torch.IterableDataset`` (which fills in ``num_consumers`` /
``consumer_index``) and ``all_reduce`` every step. Each rank writes its
stream, one line per step, to a file; the parent compares the files. The
ranks of a run are forked by one ``python -c`` process (``tests/ranks.py``),
so torch is imported once per run, not once per rank.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import types
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import zmqdata as zd
from tests.cli.procs import Proc, zmqdata
from tests.helpers import poll_for
from tests.ranks import Ranks as ForkedRanks
from tests.service.cluster import Cluster, free_port
from zmqdata import service
from zmqdata._dataset import saved
from zmqdata._dataset.constants import INFINITE_CARDINALITY
from zmqdata._dataset.node import Node
from zmqdata._wire import deal
from zmqdata._wire.modes import ShardingPolicy
from zmqdata.errors import InvalidArgumentError

torch = pytest.importorskip("torch")

import zmqdata.torch as zt  # after the skip: needs torch

NUM_SOURCE, BATCH, SEED = 2_000, 10, 3
"""``range(2000)`` less multiples of 5: 1,600 elements, 160 batches of 10: 40
steps on 4 ranks, and after 10 steps on 4 ranks 40 steps on 3 (no element of
an incomplete last round to drop)."""
ELEMENTS = [x for x in range(NUM_SOURCE) if x % 5 != 0]
SAVE_AT, PARK_AT = 10, 13
"""The killed run saves at step 10, reads on to step 13 (those come again),
then waits to be killed."""
RANK_TIMEOUT_S = 60
RUNNING: list[Ranks] = []
"""Every run started: killed after each test, whatever happened."""
READY = r"(dispatcher|worker) ready: (\S+?),?( |$)"


def pipeline(target: str, job_name: str, seed: int | None = SEED) -> zd.Dataset:
    """Filtered on the workers, batched in the trainer; no num_consumers (filled in)."""
    return (
        zd.Dataset.range(NUM_SOURCE)
        .filter(lambda x: x % 5 != 0)
        .apply(
            service.distribute(
                "distributed_epoch", target, job_name=job_name, seed=seed
            )
        )
        .batch(BATCH)
    )


# ------------------------------------------------------------ the rank program


def rank_main(config: dict[str, Any]) -> None:
    """One DDP rank.

    ``config``: target, job_name, rank, world_size, out (a folder), save_at
    (gather_state_dict at that step; rank 0 writes ``checkpoint.pt``),
    park_at (stop reading there and wait to be killed), resume (a checkpoint
    to load_state_dict from). Writes ``rank{r}.stream`` (``step: ints`` per
    step) and ``rank{r}.json`` (steps taken, equal or not) at the end.
    """
    rank, world_size = config["rank"], config["world_size"]
    out = Path(config["out"])
    distributed = torch.distributed
    distributed.init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=30)
    )
    source = zt.IterableDataset(pipeline(config["target"], config["job_name"]))
    assert source.consumers_of(source.source) == (world_size, rank)
    if config.get("resume"):
        saved = torch.load(config["resume"])
        source.load_state_dict(saved["input"])
        # Loaded and not started: gathering gives the loaded position back.
        assert zt.gather_state_dict(source) == saved["input"]
    else:
        assert zt.gather_state_dict(source) == {"position": None}
    loader = iter(torch.utils.data.DataLoader(source, batch_size=None))
    step, equal = 0, True
    with open(out / f"rank{rank}.stream", "w") as stream:
        while True:
            batch = next(loader, None)
            # One all_reduce per step: how many ranks have a batch, and a sum
            # (the gradient all_reduce of a real step). No rank waits forever
            # on the others: all stop at the first step one of them lacks.
            has = 0 if batch is None else 1
            total = 0 if batch is None else int(batch.sum())
            reduced = torch.tensor([has, total], dtype=torch.int64)
            distributed.all_reduce(reduced)
            if reduced[0].item() != world_size:
                equal = reduced[0].item() == 0
                break
            assert batch is not None
            step += 1
            stream.write(f"{step}: {','.join(map(str, batch.tolist()))}\n")
            stream.flush()
            if step == config.get("save_at"):
                state = {"input": zt.gather_state_dict(source), "step": step}
                if rank == 0:
                    torch.save(state, out / "checkpoint.tmp")
                    os.replace(out / "checkpoint.tmp", out / "checkpoint.pt")
                distributed.barrier()
            if step == config.get("park_at"):
                (out / f"rank{rank}.parked").touch()
                # Killed while waiting for a go-ahead the test never gives.
                poll_for(lambda: (out / "go-on").exists(), RANK_TIMEOUT_S, 0.1)
    (out / f"rank{rank}.json").write_text(json.dumps({"steps": step, "equal": equal}))
    distributed.destroy_process_group()


# ------------------------------------------------------------ the parent side


class Ranks(ForkedRanks):
    """The ``world_size`` ranks of one run (``rank_main``), always cleaned up."""

    def __init__(self, out: Path, world_size: int, **config: Any) -> None:
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        entry = "tests.test_torch_ddp:rank_main"
        super().__init__(out, world_size, entry, env, **config)
        RUNNING.append(self)

    def streams(self) -> list[list[tuple[int, list[int]]]]:
        """Each rank's ``(step, batch)`` lines."""
        return [
            _read_stream(self.out / f"rank{r}.stream") for r in range(self.world_size)
        ]

    def hashes(self) -> list[str]:
        return [
            hashlib.sha256((self.out / f"rank{r}.stream").read_bytes()).hexdigest()
            for r in range(self.world_size)
        ]

    def results(self) -> list[dict[str, Any]]:
        return [
            json.loads((self.out / f"rank{r}.json").read_text())
            for r in range(self.world_size)
        ]


def _read_stream(path: Path) -> list[tuple[int, list[int]]]:
    lines = []
    for line in path.read_text().splitlines():
        step, _, values = line.partition(": ")
        lines.append((int(step), [int(v) for v in values.split(",")]))
    return lines


@pytest.fixture(autouse=True)
def _no_run_left() -> Iterator[None]:
    """Whatever a test did, no rank of it runs after it."""
    yield
    while RUNNING:
        RUNNING.pop().kill()


@pytest.fixture(scope="module")
def daemons() -> Iterator[str]:
    """A ``zmqdata dispatcher`` and two ``zmqdata worker`` processes: the target."""
    with ExitStack() as stack:
        dispatcher: Proc = stack.enter_context(zmqdata("dispatcher", "--port", "0"))
        target = dispatcher.wait_for_line(READY).group(2)
        for _ in range(2):
            worker = stack.enter_context(
                zmqdata(
                    "worker", "--dispatcher", target, "--heartbeat-interval-ms", "100"
                )
            )
            worker.wait_for_line(READY)
        poll_for(lambda: len(service.get_status(target)["workers"]) == 2, timeout=20)
        yield target


@pytest.fixture(scope="module")
def first_run(daemons: str, tmp_path_factory: pytest.TempPathFactory) -> Ranks:
    """A whole epoch on 4 ranks that also gathers (and saves) the input at step 10."""
    ranks = Ranks(
        tmp_path_factory.mktemp("ddp") / "first",
        4,
        target=daemons,
        job_name="first",
        save_at=SAVE_AT,
    )
    ranks.wait()
    return ranks


# ------------------------------------------------------------ process tests


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ranks_take_equal_steps_and_a_seed_gives_the_same_streams(
    daemons: str, first_run: Ranks, tmp_path: Path
) -> None:
    second = Ranks(tmp_path / "second", 4, target=daemons, job_name="second")
    second.wait()
    for ranks in (first_run, second):
        assert ranks.results() == [{"steps": 40, "equal": True}] * 4
        everything = [x for s in ranks.streams() for _, batch in s for x in batch]
        assert sorted(everything) == ELEMENTS  # each exactly once
    assert second.hashes() == first_run.hashes()  # byte-identical, rank by rank
    rank0 = [x for _, batch in first_run.streams()[0] for x in batch]
    assert rank0 != sorted(rank0)  # the seed shuffled the splits


def _without_job(state: dict[str, Any]) -> Any:
    """A gathered position with the name of its job left out."""

    def strip(value: Any) -> Any:
        if deal.is_position(value):
            return {k: v for k, v in value.items() if k != "job"}
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        return value

    return repr(strip(saved.decode(state["position"])))


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_checkpoint_of_4_killed_ranks_resumes_on_3_exactly_once(
    daemons: str, first_run: Ranks, tmp_path: Path
) -> None:
    killed = Ranks(
        tmp_path / "killed",
        4,
        target=daemons,
        job_name="killed",
        save_at=SAVE_AT,
        park_at=PARK_AT,
    )
    killed.wait_for_files("rank{rank}.parked")
    killed.kill()  # every rank, -9, three steps past the save
    checkpoint = killed.out / "checkpoint.pt"
    assert torch.load(checkpoint)["step"] == SAVE_AT
    # The gathered position does not depend on the run (same seed, same step),
    # only the job it names.
    assert _without_job(torch.load(checkpoint)["input"]) == _without_job(
        torch.load(first_run.out / "checkpoint.pt")["input"]
    )

    resumed = Ranks(
        tmp_path / "resumed",
        3,
        target=daemons,
        job_name="resumed",
        resume=str(checkpoint),
    )
    resumed.wait()
    assert resumed.results() == [{"steps": 40, "equal": True}] * 3

    prefix = [
        x
        for s in killed.streams()
        for step, batch in s
        if step <= SAVE_AT
        for x in batch
    ]
    after = [x for s in resumed.streams() for _, batch in s for x in batch]
    counts = Counter(prefix + after)
    assert counts == Counter(ELEMENTS), "not exactly once over prefix + resumed"

    # ... and in the order the uninterrupted run went on with: its elements in
    # dealing order (element n went to rank n % 4), past the 4 * 10 * 10
    # consumed, dealt again to 3 ranks (element n to rank n % 3).
    first = [[x for _, batch in s for x in batch] for s in first_run.streams()]
    dealt = [first[n % 4][n // 4] for n in range(4 * len(first[0]))]
    rest = dealt[4 * SAVE_AT * BATCH :]
    for rank, stream in enumerate(resumed.streams()):
        assert [x for _, batch in stream for x in batch] == rest[rank::3]


# ------------------------------------------------------------ in one process


def _reader(
    target: str, job_name: str, rank: int, world_size: int, **options: Any
) -> Any:
    return zt.IterableDataset(
        pipeline(target, job_name), rank=rank, world_size=world_size, **options
    )


def _read_together(
    sources: list[Any], steps: int | None = None
) -> list[list[list[int]]]:
    """Each source read in a thread of its own (the ranks), ``steps`` batches or all."""
    got: list[list[list[int]]] = [[] for _ in sources]
    errors: list[BaseException] = []

    def read(index: int) -> None:
        try:
            for batch in sources[index]:
                got[index].append(batch.tolist())
                if len(got[index]) == steps:
                    break
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(sources))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(t.is_alive() for t in threads), "a reader hangs"
    assert not errors, errors
    return got


def test_ranks_in_threads_resume_from_merged_state_dicts_on_fewer_ranks(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster(num_workers=2).target
    sources = [_reader(target, "threads", r, 4) for r in range(4)]
    iterators = [iter(s) for s in sources]
    consumed: list[list[list[int]]] = [[] for _ in sources]
    for _ in range(SAVE_AT):  # step by step, as ranks in lockstep
        for rank, it in enumerate(iterators):
            consumed[rank].append(next(it).tolist())
    merged = service.merge_positions([s.state_dict()["position"] for s in sources])
    for it in iterators:
        it.close()

    resumed = [_reader(target, "threads-resumed", r, 2) for r in range(2)]
    for source in resumed:
        source.load_state_dict({"position": merged})
    after = _read_together(resumed)
    assert [len(part) for part in after] == [60, 60]
    flat = [x for part in consumed + after for batch in part for x in batch]
    assert sorted(flat) == ELEMENTS


def test_num_consumers_is_filled_in_on_a_copy_only_when_missing(
    cluster: Callable[..., Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = pipeline(cluster().target, "j")
    (read,) = [n for n in ds._node.walk() if n.op == "data_service"]

    def variant(cardinality: int | None = None, **options: Any) -> zd.Dataset:
        args = {**read.args, "options": replace(read.args["options"], **options)}
        if cardinality is not None:
            args["cardinality"] = cardinality
        return zd.Dataset(Node("data_service", args, read.inputs))

    info = types.SimpleNamespace(id=1, num_workers=2)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: info)
    adapter = zt.IterableDataset(ds, rank=2, world_size=3)
    assert adapter.consumers_of(ds) == (6, 5)  # 3 ranks * 2 workers; 2 * 2 + 1
    filled = adapter._with_consumers(ds)
    (filled_read,) = [n for n in filled._node.walk() if n.op == "data_service"]
    assert filled_read.args["options"].num_consumers == 6
    assert filled_read.args["options"].consumer_index == 5
    assert read.args["options"].num_consumers is None  # the user's dataset untouched
    assert filled_read.inputs == read.inputs  # below the read: shared, not copied
    assert adapter._with_consumers(ds) is filled  # kept: pass counts carry on

    left_alone = [
        variant(num_consumers=2, consumer_index=0),  # given: kept as given
        variant(job_name=None),  # unnamed: one job per reader
        variant(processing_mode=int(ShardingPolicy.OFF)),  # parallel_epochs
        variant(cardinality=INFINITE_CARDINALITY),  # endless: coordinated rounds
        variant(trainer_id="t"),  # cross-trainer cache
        variant(target_workers="LOCAL"),  # a multi-rank read reads every worker
    ]
    assert adapter.consumers_of(variant(exactly_once=False)) == (6, 5)  # dealt anyway
    for each in left_alone:
        assert adapter.consumers_of(each) is None
    opted_out = zt.IterableDataset(ds, rank=2, world_size=3, shard=False)
    assert opted_out.consumers_of(ds) is None
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: None)
    assert zt.IterableDataset(ds, rank=0, world_size=1).consumers_of(ds) is None
    assert zt.IterableDataset(ds, rank=0, world_size=2).consumers_of(ds) == (2, 0)


def test_a_pipeline_a_multi_rank_read_refuses_names_the_fill_in_and_the_way_out(
    cluster: Callable[..., Cluster],
) -> None:
    target = cluster().target
    mode = service.distribute("distributed_epoch", target, job_name="unseeded")
    ds = zd.Dataset.range(10).shuffle(4).apply(mode)  # no seed: not deterministic
    with pytest.raises(InvalidArgumentError) as caught:
        list(zt.IterableDataset(ds, rank=0, world_size=2))
    assert "shuffle(seed=None)" in str(caught.value)
    assert "consumer_index=0 of num_consumers=2" in str(caught.value)
    assert "shard=False" in str(caught.value)
    first_come = zt.IterableDataset(ds, rank=0, world_size=2, shard=False)
    assert sorted(int(x) for x in first_come) == list(range(10))  # the only reader


# ------------------------------------------------------------ gather_state_dict errors


def test_gather_state_dict_needs_torch_distributed() -> None:
    assert not torch.distributed.is_initialized()
    source = zt.IterableDataset(zd.Dataset.range(3))
    with pytest.raises(ValueError, match="not initialized"):
        zt.gather_state_dict(source)


def _fake_group(monkeypatch: pytest.MonkeyPatch, others: list[dict[str, Any]]) -> None:
    """torch.distributed as rank 0 of ``1 + len(others)`` ranks sending ``others``."""
    distributed = torch.distributed
    monkeypatch.setattr(distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(
        distributed, "get_world_size", lambda group=None: 1 + len(others)
    )

    def all_gather_object(out: list[Any], mine: Any, group: Any = None) -> None:
        out[:] = [mine, *others]

    monkeypatch.setattr(distributed, "all_gather_object", all_gather_object)


def test_gather_state_dict_names_the_rank_at_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = zt.IterableDataset(zd.Dataset.range(3))
    live = zt.IterableDataset(zd.Dataset.range(3))
    _fake_group(monkeypatch, [{"position": None, "pending": True}])
    assert zt.gather_state_dict(source) == {"position": None}  # between passes

    with pytest.raises(TypeError, match=r"IterableDataset.*got list"):
        zt.gather_state_dict([1, 2])

    _fake_group(monkeypatch, [{"error": "TypeError", "message": "got int"}])
    with pytest.raises(ValueError, match="rank 1: got int"):
        zt.gather_state_dict(source)

    _fake_group(monkeypatch, [{"position": b"p", "pending": False}] * 2)
    with pytest.raises(ValueError, match=r"ranks \[0\] have no position"):
        zt.gather_state_dict(source)

    source.load_state_dict({"position": b"loaded"})
    _fake_group(monkeypatch, [{"position": b"loaded", "pending": True}])
    assert zt.gather_state_dict(source) == {"position": b"loaded"}
    _fake_group(monkeypatch, [{"position": b"x", "pending": False}])
    with pytest.raises(ValueError, match=r"ranks \[0\] hold a position from load"):
        zt.gather_state_dict(source)

    iterator = iter(live)
    next(iterator)
    _fake_group(
        monkeypatch, [{"position": live.state_dict()["position"], "pending": False}]
    )
    with pytest.raises(InvalidArgumentError, match="cannot merge the 2 ranks"):
        zt.gather_state_dict(live)
    iterator.close()
