"""The PyTorch adapter ``zmqdata.torch`` (skipped without PyTorch, but one test)."""

from __future__ import annotations

import subprocess
import sys
import types
from collections import namedtuple
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import zmqdata as zd
from tests.helpers import run_python
from tests.service.cluster import Cluster
from zmqdata import service

# DataLoader workers are spawned, not forked: a fork of a process running
# server and client threads (zmq I/O threads included) may deadlock.
MP_CONTEXT = "spawn"
LOADER_TIMEOUT_S = 60

Pair = namedtuple("Pair", ["left", "right"])


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture
def fast_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients (spawned DataLoader workers inherit it) beat fast, as in tests/service."""
    monkeypatch.setenv("ZMQDATA_CLIENT_HEARTBEAT_MS", "20")


def _ints(loader: Any) -> list[int]:
    return sorted(int(x) for x in loader)


def _loader(
    torch: Any, dataset: Any, num_workers: int = 0, persistent: bool = False
) -> Any:
    options: dict[str, Any] = {}
    if num_workers:
        options = {
            "multiprocessing_context": MP_CONTEXT,
            "timeout": LOADER_TIMEOUT_S,
            "persistent_workers": persistent,
        }
    return torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=num_workers, **options
    )


# ------------------------------------------------------------ without torch


def test_missing_torch_gives_a_clear_import_error() -> None:
    result = run_python(
        """
        import sys
        sys.modules["torch"] = None  # as if PyTorch were not installed
        import zmqdata.torch  # importable, so doctest collection still works
        for use in (
            lambda: zmqdata.torch.IterableDataset,
            lambda: zmqdata.torch.to_torch(1),
        ):
            try:
                use()
            except ImportError as error:
                print("ImportError:", error)
        try:
            from zmqdata.torch import IterableDataset
        except ImportError as error:
            print("ImportError:", error)
        """
    )
    assert result.returncode == 0, result.stderr
    message = "zmqdata.torch needs PyTorch: pip install zmqdata[torch]"
    assert result.stdout.splitlines() == [f"ImportError: {message}"] * 3


def test_zmqdata_does_not_import_torch() -> None:
    result = run_python(
        """
        import sys
        import zmqdata, zmqdata.service
        print("torch" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# ------------------------------------------------------------ conversion


def test_tensors_share_memory_with_writeable_arrays(torch: Any) -> None:
    from zmqdata.torch import to_torch

    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = to_torch(array)
    assert isinstance(tensor, torch.Tensor)
    assert tensor.dtype == torch.float32
    assert tensor.shape == (2, 3)
    array[0, 0] = 42.0
    assert tensor[0, 0].item() == 42.0  # no copy


def test_read_only_and_odd_arrays_are_copied_without_warnings(torch: Any) -> None:
    from zmqdata.torch import to_torch

    frozen = np.arange(4, dtype=np.int32)
    frozen.flags.writeable = False
    reversed_ = np.arange(4, dtype=np.int64)[::-1]
    big_endian = np.arange(4, dtype=">i4")
    for array in (frozen, reversed_, big_endian):
        tensor = to_torch(array)  # filterwarnings=error: no from_numpy warning
        assert tensor.tolist() == array.tolist()
        assert not np.shares_memory(tensor.numpy(), array)
    tensor = to_torch(frozen)
    tensor[0] = 7  # a private copy: the read-only array is untouched
    assert frozen[0] == 0


def test_structures_keep_their_shape(torch: Any) -> None:
    from zmqdata.torch import to_torch

    element = {
        "image": np.ones((2, 2), np.uint8),
        "label": np.int64(3),
        "pair": Pair(np.float32(0.5), [np.zeros(1), "text"]),
        "raw": (b"bytes", np.str_("numpy str"), 7, 2.5, True),
        "names": np.array(["a", "b"]),
    }
    out = to_torch(element)
    assert set(out) == set(element)
    assert out["image"].dtype == torch.uint8
    assert out["label"].shape == ()
    assert out["label"].dtype == torch.int64
    assert out["label"].item() == 3
    assert isinstance(out["pair"], Pair)
    assert out["pair"].left.shape == ()
    assert out["pair"].left.dtype == torch.float32
    assert isinstance(out["pair"].right, list)
    assert isinstance(out["pair"].right[0], torch.Tensor)
    assert out["pair"].right[1] == "text"
    assert out["raw"] == (b"bytes", "numpy str", 7, 2.5, True)
    assert isinstance(out["raw"], tuple)
    assert isinstance(out["names"], np.ndarray)  # no string tensors in torch


def test_elements_come_through_as_tensors(torch: Any) -> None:
    from zmqdata.torch import IterableDataset

    images = np.arange(12, dtype=np.float32).reshape(6, 2)
    ds = zd.Dataset.from_tensor_slices({"x": images, "y": np.arange(6)}).batch(3)
    batches = list(_loader(torch, IterableDataset(ds)))
    assert len(batches) == 2
    assert torch.equal(batches[0]["x"], torch.from_numpy(images[:3]))
    assert batches[1]["y"].tolist() == [3, 4, 5]

    array = np.zeros(4, np.float32)
    shared = IterableDataset(zd.Dataset.from_generator(lambda: iter([array])))
    (tensor,) = list(shared)
    assert np.shares_memory(tensor.numpy(), array)


# ------------------------------------------------------------ sharding


def test_local_pipeline_under_two_workers_reads_each_element_once(
    torch: Any,
) -> None:
    from zmqdata.torch import IterableDataset

    ds = IterableDataset(zd.Dataset.range(40).map(lambda x: x * 3))
    assert _ints(_loader(torch, ds, num_workers=2)) == list(range(0, 120, 3))


def test_factory_under_two_workers(torch: Any) -> None:
    from zmqdata.torch import IterableDataset

    ds = IterableDataset(lambda: zd.Dataset.range(10).batch(2).unbatch())
    assert _ints(_loader(torch, ds, num_workers=2)) == list(range(10))


def test_ranks_times_workers_read_each_element_once(
    torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zmqdata.torch import IterableDataset

    seen: list[int] = []
    for rank in range(3):
        for worker in range(2):
            info = types.SimpleNamespace(id=worker, num_workers=2)
            monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda i=info: i)
            ds = IterableDataset(zd.Dataset.range(30), rank=rank, world_size=3)
            part = [int(x) for x in ds]
            assert len(part) == 5
            seen += part
    assert sorted(seen) == list(range(30))


def test_rank_defaults_and_validation(torch: Any) -> None:
    from zmqdata.torch import IterableDataset

    ds = IterableDataset(zd.Dataset.range(6))
    assert (ds.rank, ds.world_size) == (0, 1)  # torch.distributed not initialized
    assert _ints(IterableDataset(zd.Dataset.range(6), rank=1, world_size=2)) == [
        1,
        3,
        5,
    ]
    unsharded = IterableDataset(zd.Dataset.range(6), rank=1, world_size=2, shard=False)
    assert _ints(unsharded) == list(range(6))
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        IterableDataset(zd.Dataset.range(6), rank=2, world_size=2)
    with pytest.raises(TypeError, match=r"zmqdata\.Dataset"):
        IterableDataset([1, 2, 3])
    with pytest.raises(TypeError, match="factory must return"):
        list(IterableDataset(lambda: [1, 2]))


# ------------------------------------------------------------ the service


def test_service_dataset_is_not_sharded_by_the_adapter(
    torch: Any, cluster: Callable[..., Cluster], fast_heartbeats: None
) -> None:
    from zmqdata.torch import IterableDataset

    target = cluster(num_workers=2).target
    ds = zd.Dataset.range(20).apply(service.distribute("distributed_epoch", target))
    adapter = IterableDataset(ds.batch(4), rank=1, world_size=2, shard=False)
    assert IterableDataset(ds.batch(4)).shard_of(ds.batch(4)) is None
    batches = list(_loader(torch, adapter))
    assert all(isinstance(b, torch.Tensor) for b in batches)
    assert sorted(torch.cat(batches).tolist()) == list(range(20))


def test_an_unnamed_service_read_under_several_ranks_is_refused(
    cluster: Callable[..., Cluster],
) -> None:
    from zmqdata.errors import InvalidArgumentError
    from zmqdata.torch import IterableDataset

    mode = service.distribute("distributed_epoch", cluster().target)
    adapter = IterableDataset(zd.Dataset.range(4).apply(mode), rank=1, world_size=2)
    with pytest.raises(InvalidArgumentError) as caught:
        next(iter(adapter))
    for words in ("rank 1 of world_size=2", "job_name=run_id", "shard=False"):
        assert words in str(caught.value)


def test_an_unnamed_service_read_under_two_workers_reads_each_element_once(
    torch: Any, cluster: Callable[..., Cluster], fast_heartbeats: None
) -> None:
    """docs/frameworks.md's first loader, copied as shown: no job_name."""
    from zmqdata.torch import IterableDataset

    target = cluster(num_workers=2).target
    ds = zd.Dataset.range(40).apply(service.distribute("distributed_epoch", target))
    adapter = IterableDataset(ds)
    loader = _loader(torch, adapter, num_workers=2)
    for _ in range(2):  # fresh worker processes each epoch: one job still
        assert _ints(loader) == list(range(40))
    assert IterableDataset(ds).job_name != adapter.job_name  # a new run: a new job


def test_service_job_shared_by_two_workers_reads_each_element_once(
    torch: Any, cluster: Callable[..., Cluster], fast_heartbeats: None
) -> None:
    from zmqdata.torch import IterableDataset

    target = cluster(num_workers=2).target
    ds = zd.Dataset.range(50).apply(
        service.distribute("distributed_epoch", target, job_name="torch-loader")
    )
    loader = _loader(torch, IterableDataset(ds), num_workers=2)
    assert _ints(loader) == list(range(50))


@pytest.mark.parametrize(
    ("form", "num_workers", "persistent"),
    [
        ("factory", 0, False),
        ("factory", 2, True),
        ("factory", 2, False),
        ("dataset", 0, False),
        ("dataset", 2, True),
        ("dataset", 2, False),
    ],
)
def test_every_epoch_of_a_named_job_reads_a_full_pass(
    torch: Any,
    cluster: Callable[..., Cluster],
    fast_heartbeats: None,
    form: str,
    num_workers: int,
    persistent: bool,
) -> None:
    from zmqdata.torch import IterableDataset

    target = cluster(num_workers=2).target

    def make() -> zd.Dataset:
        mode = service.distribute("distributed_epoch", target, job_name="epochs")
        return zd.Dataset.range(30).apply(mode)

    adapter = IterableDataset(make if form == "factory" else make())
    loader = _loader(torch, adapter, num_workers=num_workers, persistent=persistent)
    for _ in range(3):  # the k-th epoch reads iteration k of the job
        assert _ints(loader) == list(range(30))


def test_a_loop_checkpoints_its_input_with_state_dict_and_resumes_it(
    torch: Any, cluster: Callable[..., Cluster], fast_heartbeats: None
) -> None:
    target = cluster(num_workers=2).target
    ds = zd.Dataset.range(3_000).apply(service.distribute("distributed_epoch", target))
    source = zmqdata_torch().IterableDataset(ds)
    assert source.state_dict() == {"position": None}  # not started
    loader = iter(_loader(torch, source))
    before = [int(next(loader)) for _ in range(700)]
    saved = source.state_dict()
    for _ in range(50):  # read after the save: comes again
        next(loader)
    del loader
    resumed = zmqdata_torch().IterableDataset(ds)
    resumed.load_state_dict(saved)
    after = _ints(_loader(torch, resumed))
    assert sorted(before + after) == list(range(3_000))


def test_a_local_pipeline_resumes_from_state_dict_too(torch: Any) -> None:
    source = zmqdata_torch().IterableDataset(zd.Dataset.range(10).batch(3))
    loader = iter(_loader(torch, source))
    next(loader)
    saved = source.state_dict()
    resumed = zmqdata_torch().IterableDataset(zd.Dataset.range(10).batch(3))
    resumed.load_state_dict(saved)
    assert [b.tolist() for b in _loader(torch, resumed)] == [[3, 4, 5], [6, 7, 8], [9]]
    with pytest.raises(TypeError, match="state_dict"):
        resumed.load_state_dict({"position": "not bytes"})


def test_the_resume_training_example_reads_every_example_once_across_a_crash(
    torch: Any,
) -> None:
    done = subprocess.run(
        [sys.executable, "examples/resume_training.py"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "each exactly once across the crash" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_the_ddp_resume_example_reads_every_example_once_across_4_then_3_ranks(
    torch: Any,
) -> None:
    done = subprocess.run(
        [sys.executable, "examples/ddp_resume.py"],
        capture_output=True,
        text=True,
        timeout=140,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-20000:]
    assert "OK: 4800 examples, each exactly once" in done.stdout
    assert "every rank the same number of steps" in done.stdout


def zmqdata_torch() -> Any:
    import zmqdata.torch

    return zmqdata.torch
