"""PyTorch adapter: a ``zmqdata.Dataset`` as a ``torch.utils.data.IterableDataset``.

Needs PyTorch (``pip install zmqdata[torch]``); nothing else in zmqdata imports
it. Without PyTorch this module still imports (so tools that import every
module keep working), but using ``IterableDataset`` or ``to_torch`` raises an
``ImportError`` that says how to install it.

``IterableDataset(dataset)`` yields the dataset's elements with every numpy
array turned into a ``torch.Tensor`` that shares its memory (read-only arrays,
such as those received from the service, are copied once). Structures
(tuples, lists, dicts) keep their shape; numpy scalars become 0-d tensors;
``str``/``bytes`` and Python scalars are left alone.

Who reads what:

* a *local* pipeline (no ``service.distribute`` in it) is sharded by the
  adapter: each of the ``world_size * num_workers`` readers (DDP ranks times
  ``DataLoader`` workers) keeps every n-th element, so each element is read
  exactly once across all of them;
* a *service* pipeline (``distribute`` / ``from_dataset_id``) is not sharded
  here: the service does it. Each ``DataLoader`` worker (in each rank) is one
  consumer of the job. A read that names no ``job_name`` gets one from the
  adapter (``IterableDataset.job_name``, new for each adapter) when it has
  several ``DataLoader`` workers, so they share one job and read every
  element once per epoch; several ranks cannot share a name made in each,
  so there the read must name a ``job_name`` shared by every rank and new
  for each run (else ``__iter__`` refuses). On a finite
  dataset, when there are several readers and the read names no
  ``num_consumers``, the adapter fills in ``num_consumers=world_size *
  num_workers`` and ``consumer_index=rank * num_workers + worker_id``: a
  multi-rank read, where every reader gets the same number of elements (so
  every rank takes the same number of steps) and, with a ``seed``, the same
  elements in every run (``IterableDataset.consumers_of``).

Checkpoints: ``state_dict()`` / ``load_state_dict()`` (the stateful data
loader convention) save and restore the position of the read running in this
process, so a training loop checkpoints its input with its model and resumes
mid-epoch (``examples/resume_training.py``). Read with ``num_workers=0``
(the service does the parallel work), or with torchdata's
``StatefulDataLoader``, which asks each ``DataLoader`` worker.

Under DDP, ``gather_state_dict(source)`` all-gathers every rank's position
of a multi-rank read and merges them into the job's position: load it on any
number of ranks, with a fresh ``job_name``, to resume
(``examples/ddp_resume.py``).

A full example is ``IterableDataset``'s docstring and ``docs/frameworks.md``.
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from zmqdata._adapters import takes_consumers as _takes_consumers
from zmqdata._adapters import unnamed as _unnamed
from zmqdata._adapters import uses_service as _uses_service
from zmqdata._adapters import with_consumers as _with_consumers
from zmqdata._adapters import with_job_name as _with_job_name
from zmqdata._client import advance
from zmqdata._dataset.dataset import Dataset
from zmqdata.errors import InvalidArgumentError

_MISSING = "zmqdata.torch needs PyTorch: pip install zmqdata[torch]"

__all__ = ["IterableDataset", "gather_state_dict", "skip_steps", "to_torch"]

try:
    import torch
    import torch.utils.data
except ImportError as _error:  # PyTorch absent (or broken): fail on use
    _IMPORT_ERROR: ImportError | None = _error
else:
    _IMPORT_ERROR = None

# numpy dtype kinds torch has no tensor type for: left as numpy arrays.
_NO_TENSOR_KINDS = frozenset("OSUVMm")


def _needs_torch() -> None:
    if _IMPORT_ERROR is not None:
        raise ImportError(_MISSING) from _IMPORT_ERROR


def _array_to_tensor(array: np.ndarray[Any, Any]) -> Any:
    if array.dtype.kind in _NO_TENSOR_KINDS:
        return array
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    elif not array.flags.writeable or any(s < 0 for s in array.strides):
        # from_numpy warns on read-only arrays and rejects negative strides.
        array = np.array(array, copy=True)
    return torch.from_numpy(array)


def to_torch(structure: Any) -> Any:
    """``structure`` with numpy arrays and numpy scalars as torch tensors.

    Arrays share memory with the tensors unless they are read-only (copied).
    Tuples (named ones too), lists and dicts keep their structure; ``str``,
    ``bytes``, Python scalars and arrays of strings/objects are left as they are.
    """
    _needs_torch()
    return _convert(structure)


def _convert(value: Any) -> Any:
    """``value`` with its numpy arrays and scalars as tensors, its structure kept."""
    if isinstance(value, np.ndarray):
        return _array_to_tensor(value)
    if isinstance(value, str | bytes):
        return value
    if isinstance(value, np.generic):
        return _array_to_tensor(np.array(value))
    if isinstance(value, tuple | list | dict):
        return _convert_container(value)
    return value


def _convert_container(value: tuple[Any, ...] | list[Any] | dict[Any, Any]) -> Any:
    """A tuple (named too), list or dict of ``_convert``'s values: its own kind."""
    if isinstance(value, tuple):
        items = [_convert(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if isinstance(value, list):
        return [_convert(v) for v in value]
    return {k: _convert(v) for k, v in value.items()}


def _start_at_epoch(dataset: Dataset, epoch: int) -> None:
    """Makes ``dataset`` read iteration ``epoch`` of its named jobs.

    The k-th ``iter()`` of a dataset joins iteration k of a named job; a
    factory returns a fresh dataset every epoch, and a ``DataLoader`` without
    persistent workers starts fresh copies every epoch: both would join
    iteration 0 (drained already) every time.
    """
    for node in dataset._node.walk():
        if node.reads_named_job():
            for _ in range(epoch - node.passes_started()):
                node.next_pass()


def _default_rank_and_world_size() -> tuple[int, int]:
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return distributed.get_rank(), distributed.get_world_size()
    return 0, 1


def _dump(source: Dataset | Callable[[], Dataset]) -> tuple[str, bytes]:
    """``source`` as bytes, for spawned ``DataLoader`` workers (lambdas included)."""
    from zmqdata._dataset import graph

    if isinstance(source, Dataset):
        return "dataset", graph.serialize(source._node)
    import cloudpickle

    return "factory", cloudpickle.dumps(source)


def _load(kind: str, data: bytes) -> Dataset | Callable[[], Dataset]:
    from zmqdata._dataset import graph

    if kind == "dataset":
        return Dataset(graph.deserialize(data))
    import cloudpickle

    factory: Callable[[], Dataset] = cloudpickle.loads(data)
    return factory


def _make_class() -> type:
    class IterableDataset(torch.utils.data.IterableDataset[Any]):  # type: ignore[misc,unused-ignore]
        """A ``zmqdata.Dataset`` as a ``torch.utils.data.IterableDataset``.

        Args:
            dataset: a ``zmqdata.Dataset``, or a zero-argument function returning
                one (called in each reader, e.g. each ``DataLoader`` worker).
            rank: this process's rank; default ``torch.distributed``'s when it
                is initialized, else 0.
            world_size: the number of ranks; default ``torch.distributed``'s
                when it is initialized, else 1.
            shard: whether to shard the pipeline between ranks and workers.
                ``None`` (default): yes for a local pipeline; for one that
                reads from the service, the service shards it, and a finite
                ``distributed_epoch`` read of a named job without
                ``num_consumers`` gets ``num_consumers`` and
                ``consumer_index`` filled in (``consumers_of``), and a read
                with no ``job_name`` gets ``job_name`` under several
                ``DataLoader`` workers (refused under several ranks).
                ``False``: none of these (a first-come-first-served read stays
                one; an unnamed read gives each reader a job of its own).

        Batch in zmqdata and pass ``batch_size=None`` to the ``DataLoader``:

        >>> import numpy as np
        >>> import torch
        >>> import zmqdata as zd
        >>> from zmqdata.torch import IterableDataset
        >>> ds = zd.Dataset.from_tensor_slices(
        ...     (np.arange(8, dtype=np.float32), np.arange(8))).batch(4)
        >>> loader = torch.utils.data.DataLoader(IterableDataset(ds), batch_size=None)
        >>> for x, y in loader:
        ...     print(x, y)
        tensor([0., 1., 2., 3.]) tensor([0, 1, 2, 3])
        tensor([4., 5., 6., 7.]) tensor([4, 5, 6, 7])
        """

        def __init__(
            self,
            dataset: Dataset | Callable[[], Dataset],
            *,
            rank: int | None = None,
            world_size: int | None = None,
            shard: bool | None = None,
        ) -> None:
            super().__init__()
            if not isinstance(dataset, Dataset) and not callable(dataset):
                raise TypeError(
                    "IterableDataset needs a zmqdata.Dataset or a function "
                    f"returning one, got {type(dataset).__name__}"
                )
            if rank is None or world_size is None:
                default_rank, default_world_size = _default_rank_and_world_size()
                rank = default_rank if rank is None else rank
                world_size = default_world_size if world_size is None else world_size
            if world_size < 1 or not 0 <= rank < world_size:
                raise ValueError(
                    f"need 0 <= rank < world_size, got rank={rank}, "
                    f"world_size={world_size}"
                )
            self.source = dataset
            self.rank = rank
            self.world_size = world_size
            self.shard = shard
            self.job_name = f"zmqdata.torch-{uuid.uuid4().hex}"
            """The ``job_name`` of the service reads that name none, when this
            process's ``DataLoader`` workers read them: made here, so every
            worker (spawned or forked from this object) shares it, and new for
            each adapter, so a new run never joins an old run's job."""
            # A spawn-context value also works in forked workers (nothing is
            # pickled there), while a fork-context one cannot reach spawned ones.
            self._live: Any = None
            """The iterator of the pass running in this process (its position)."""
            self._resume_from: bytes | None = None
            """A position from ``load_state_dict`` the next pass starts at."""
            context = multiprocessing.get_context("spawn")
            self.passes = context.Value("q", 0)
            """Passes started by every reader of this adapter, shared across the
            ``DataLoader``'s worker processes (also when fresh ones start each
            epoch): ``passes // readers`` is the epoch, and a named job's
            iteration k is read on epoch k."""
            self.running = context.Value("q", 0, lock=False)
            """Passes running now in any process (``gather_state_dict`` tells a
            read in ``DataLoader`` workers from no read); under ``passes``'s
            lock (one semaphore per adapter is enough)."""
            self._dealt: tuple[tuple[int, int], Dataset] | None = None
            """The source with ``num_consumers`` filled in, and for which
            ``(num_consumers, consumer_index)``: kept, so a dataset read again
            next epoch keeps its pass counts."""

        def _dataset(self) -> Dataset:
            if isinstance(self.source, Dataset):
                return self.source
            dataset = self.source()
            if not isinstance(dataset, Dataset):
                raise TypeError(
                    "the IterableDataset factory must return a zmqdata.Dataset, "
                    f"got {type(dataset).__name__}"
                )
            return dataset

        def shard_of(self, dataset: Dataset) -> tuple[int, int] | None:
            """``(num_shards, index)`` this reader keeps of ``dataset``, or None."""
            shard = self.shard
            if shard is None:
                shard = not _uses_service(dataset._node)
            if not shard:
                return None
            info = torch.utils.data.get_worker_info()
            workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
            num_shards = self.world_size * workers
            return (
                (num_shards, self.rank * workers + worker) if num_shards > 1 else None
            )

        def consumers_of(self, dataset: Dataset) -> tuple[int, int] | None:
            """``(num_consumers, consumer_index)`` this reader fills in, or None.

            Filled in on a finite ``distributed_epoch`` read of a named job
            that names no ``num_consumers`` (nor a cross-trainer cache, nor
            ``target_workers="LOCAL"``), when there are several readers
            (``world_size * num_workers > 1``) and ``shard`` is None:
            ``(world_size * num_workers, rank * num_workers + worker_id)``.
            """
            if self.shard is not None:
                return None
            if not any(_takes_consumers(n) for n in dataset._node.walk()):
                return None
            info = torch.utils.data.get_worker_info()
            workers, worker = (1, 0) if info is None else (info.num_workers, info.id)
            readers = self.world_size * workers
            return (readers, self.rank * workers + worker) if readers > 1 else None

        def _named(self, dataset: Dataset) -> Dataset:
            """``dataset`` with ``job_name`` on its unnamed reads, if several read it.

            Raises ``InvalidArgumentError`` for an unnamed read under several
            ranks: they would each read every element.
            """
            if self.shard is not None or not any(
                _unnamed(n) for n in dataset._node.walk()
            ):
                return dataset
            if self.world_size > 1:
                raise InvalidArgumentError(
                    f"zmqdata.torch.IterableDataset: rank {self.rank} of "
                    f"world_size={self.world_size} reads a service pipeline whose "
                    "read names no job_name, so every rank would read every "
                    "element: pass distribute(..., job_name=run_id), the same on "
                    "every rank and new for each run, or shard=False to give each "
                    "reader a job of its own"
                )
            info = torch.utils.data.get_worker_info()
            if info is None or info.num_workers == 1:
                return dataset
            return Dataset(_with_job_name(dataset._node, self.job_name))

        def _with_consumers(self, dataset: Dataset) -> Dataset:
            consumers = self.consumers_of(dataset)
            if consumers is None:
                return dataset
            if (
                self._dealt is not None
                and self._dealt[0] == consumers
                and isinstance(self.source, Dataset)
            ):
                return self._dealt[1]
            dealt = Dataset(_with_consumers(dataset._node, *consumers))
            if isinstance(self.source, Dataset):
                self._dealt = (consumers, dealt)
            return dealt

        def _epoch(self) -> int:
            """This reader's epoch: every reader starts one pass per epoch."""
            info = torch.utils.data.get_worker_info()
            readers = 1 if info is None else info.num_workers
            with self.passes.get_lock():
                started = self.passes.value
                self.passes.value += 1
            return int(started // readers)

        def __iter__(self) -> Iterator[Any]:
            dataset = self._named(self._dataset())
            consumers = self.consumers_of(dataset)
            dataset = self._with_consumers(dataset)
            _start_at_epoch(dataset, self._epoch())
            shard = self.shard_of(dataset)
            if shard is not None:
                dataset = dataset.shard(*shard)
            try:
                iterator = iter(dataset)
            except InvalidArgumentError as error:
                if consumers is None:
                    raise
                raise InvalidArgumentError(
                    f"{error} (zmqdata.torch.IterableDataset reads this job as "
                    f"consumer_index={consumers[1]} of num_consumers={consumers[0]}: "
                    "world_size * DataLoader workers; pass shard=False to read "
                    "it first come first served, with distribute(..., "
                    "exactly_once=False) if an exactly-once read refuses it too)"
                ) from error
            with iterator:
                if self._resume_from is not None:
                    iterator.restore(self._resume_from)
                    self._resume_from = None
                with self.passes.get_lock():
                    self.running.value += 1
                self._live = iterator
                try:
                    for element in iterator:
                        yield _convert(element)
                finally:
                    self._live = None
                    with self.passes.get_lock():
                        self.running.value -= 1

        def state_dict(self) -> dict[str, Any]:
            """The position of the pass running in this process, to checkpoint.

            ``{"position": bytes}`` (``None`` between passes: the next starts
            afresh). A service read can save its position under
            ``distributed_epoch`` without ``job_name`` (docs/modes.md); ops
            that run ahead on threads (``prefetch``) cannot.
            """
            if self._live is not None:
                return {"position": self._live.save()}
            return {"position": self._resume_from}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            """The next pass resumes from ``state_dict`` (from ``state_dict()``)."""
            position = state_dict.get("position") if isinstance(state_dict, dict) else 0
            if position is not None and not isinstance(position, bytes):
                raise TypeError(
                    "load_state_dict needs the dict state_dict() returned, got "
                    f"{state_dict!r:.80}"
                )
            self._resume_from = position

        def __getstate__(self) -> dict[str, Any]:
            state = dict(self.__dict__)
            state["source"] = _dump(self.source)
            state["_live"] = None
            state["_dealt"] = None
            return state

        def __setstate__(self, state: dict[str, Any]) -> None:
            state = dict(state)
            state["source"] = _load(*state["source"])
            self.__dict__.update(state)

        def __repr__(self) -> str:
            return (
                f"<zmqdata.torch.IterableDataset rank={self.rank} "
                f"world_size={self.world_size} source={self.source!r}>"
            )

    IterableDataset.__module__ = __name__
    IterableDataset.__qualname__ = "IterableDataset"
    return IterableDataset


def _local_entry(source: Any) -> dict[str, Any]:
    """What this rank contributes to ``gather_state_dict``: its position, or why not."""
    if not isinstance(source, IterableDataset):
        return {
            "error": "TypeError",
            "message": "gather_state_dict needs the zmqdata.torch.IterableDataset "
            f"the loop reads, got {type(source).__name__}",
        }
    position = source.state_dict()["position"]
    if position is None and source.running.value > 0:
        return {
            "error": "ValueError",
            "message": "the read runs in DataLoader worker processes, where "
            "its position is: read with num_workers=0 (the service runs the "
            "pipeline in parallel) to checkpoint with gather_state_dict",
        }
    return {"position": position, "pending": source._live is None}


def gather_state_dict(source: Any, group: Any = None) -> dict[str, Any]:
    """The position of a DDP run's multi-rank read, merged from every rank.

    Call it on every rank at the same step (it is a collective: it
    all-gathers each rank's ``source.state_dict()`` over ``group``, by default
    torch.distributed's default process group) and save what it returns with
    the model. Every rank gets the same ``{"position": bytes}``:
    ``service.merge_positions`` of the ranks' positions, the job's position.
    To resume, any number of ranks each build the same pipeline with a
    **fresh** ``job_name`` and call ``load_state_dict`` with it before
    iterating: together they read exactly the elements no rank had consumed,
    dealt equally, and with a ``seed`` in the order the saved run would have
    gone on with.

    ``source`` is the ``IterableDataset`` the loop reads, with
    ``num_workers=0``, over a multi-rank read: ``distribute("distributed_epoch",
    job_name=..., num_consumers=world_size, consumer_index=rank)``, which the
    adapter fills in when ``num_consumers`` is not given. Between passes
    (every rank's pass ended, or none started) the result is ``{"position":
    None}``: the next pass starts afresh.

    Raises ``ValueError`` when torch.distributed is not initialized or when
    the ranks cannot be merged (a rank has no position while others have one,
    some ranks have started after a ``load_state_dict`` and others not), and
    ``TypeError`` when ``source`` is not an ``IterableDataset``; every rank
    raises, naming the rank at fault. A position that is not a multi-rank
    read's raises ``zmqdata.errors.InvalidArgumentError`` (a ``ValueError``).

    Example (on each of the ranks, after ``init_process_group``)::

        ds = (
            zd.Dataset.range(10_000)
            .apply(service.distribute(
                "distributed_epoch", dispatcher, job_name=run_id, seed=0))
            .batch(32)
        )
        source = zmqdata.torch.IterableDataset(ds)  # num_consumers filled in
        loader = torch.utils.data.DataLoader(source, batch_size=None)
        for step, batch in enumerate(loader, start=1):
            ...
            if step % 100 == 0:
                state = {"model": model.state_dict(),
                         "input": zmqdata.torch.gather_state_dict(source)}
                if torch.distributed.get_rank() == 0:
                    torch.save(state, "checkpoint.pt")

        # resuming, on any number of ranks, with a new run_id:
        source.load_state_dict(torch.load("checkpoint.pt")["input"])
    """
    _needs_torch()
    distributed = torch.distributed
    if not (distributed.is_available() and distributed.is_initialized()):
        raise ValueError(
            "gather_state_dict all-gathers over torch.distributed, which is not "
            "initialized (torch.distributed.is_initialized() is False): call "
            "torch.distributed.init_process_group first, or save "
            "source.state_dict() in a single-process run"
        )
    entry = _local_entry(source)
    entries: list[Any] = [None] * distributed.get_world_size(group)
    distributed.all_gather_object(entries, entry, group=group)
    # Every rank holds every entry now: each raises the same error (no hang).
    _raise_errors(entry, entries)
    return {"position": _merged_position(entries)}


def skip_steps(
    state_dict: dict[str, Any],
    steps: int,
    elements_per_step: int = 1,
    dataset: Dataset | None = None,
) -> dict[str, Any]:
    """``gather_state_dict``'s result with the next ``steps`` steps skipped.

    The loss-spike recipe (docs/accountable.md): load a checkpoint taken
    before the spike, skip the steps that made it, resume on any number of
    ranks. A step takes ``elements_per_step`` elements of the service read on
    every rank: 1 where batches are made before ``distribute``, the batch
    size where the pipeline batches after it. ``dataset`` (the pipeline
    before ``distribute``): as ``service.advance_position``'s.

    Example::

        state = torch.load("checkpoint.pt")["input"]  # 100 steps before the spike
        source.load_state_dict(zmqdata.torch.skip_steps(state, 300))
    """
    position = state_dict.get("position") if isinstance(state_dict, dict) else None
    if not isinstance(position, bytes):
        raise TypeError(
            "skip_steps needs the dict gather_state_dict() returned, with its "
            f"position, got {state_dict!r:.80}"
        )
    skipped = advance.skip_steps(position, steps, elements_per_step, dataset)
    return {**state_dict, "position": skipped}


def _raise_errors(entry: dict[str, Any], entries: list[Any]) -> None:
    """Raises this rank's error (``entry``'s), else the first rank's, if any."""
    if "error" in entry:
        error_type = TypeError if entry["error"] == "TypeError" else ValueError
        raise error_type(entry["message"])
    for rank, other in enumerate(entries):
        if "error" in other:
            raise ValueError(
                f"gather_state_dict failed on rank {rank}: {other['message']}"
            )


def _merged_position(entries: list[Any]) -> bytes | None:
    """The ranks' positions merged (None between passes); raises where they can't be."""
    positions = [other["position"] for other in entries]
    missing = [rank for rank, position in enumerate(positions) if position is None]
    if len(missing) == len(positions):
        return None
    if missing:
        raise ValueError(
            f"ranks {missing} have no position (no pass running, position=None) "
            f"while ranks {sorted(set(range(len(positions))) - set(missing))} have "
            "one: call gather_state_dict on every rank at the same step of a pass"
        )
    pending = [rank for rank, other in enumerate(entries) if other["pending"]]
    if pending:
        return _loaded_position(pending, positions)
    return _merge(positions)


def _loaded_position(pending: list[int], positions: list[bytes]) -> bytes:
    """The position every rank loaded and none started from; else raises."""
    if len(pending) == len(positions) and len(set(positions)) == 1:
        return positions[0]  # loaded, not started: as loaded
    raise ValueError(
        f"ranks {pending} hold a position from load_state_dict they have not "
        "started from, while the others are reading: call gather_state_dict "
        "on every rank at the same step"
    )


def _merge(positions: list[bytes]) -> bytes:
    """``merge_positions`` of the ranks' positions, its refusal explained."""
    from zmqdata._client.position import merge_positions

    try:
        return merge_positions(positions)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(
            f"gather_state_dict cannot merge the {len(positions)} ranks' positions: "
            f"{error}; it needs a multi-rank read (distributed_epoch, a job_name, "
            "num_consumers=world_size and consumer_index=rank, which "
            "IterableDataset fills in) read with num_workers=0"
        ) from error


if TYPE_CHECKING:
    IterableDataset: Any
elif _IMPORT_ERROR is None:
    IterableDataset = _make_class()
else:

    def __getattr__(name: str) -> Any:
        if name == "IterableDataset":
            raise ImportError(_MISSING) from _IMPORT_ERROR
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
