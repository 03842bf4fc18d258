"""JAX adapter: a ``zmqdata.Dataset`` as global ``jax.Array`` batches, checkpointed with orbax.

Needs JAX and orbax (``pip install zmqdata[jax]``); nothing else in zmqdata
imports them. Without JAX this module still imports (so tools that import
every module keep working), but using it raises an ``ImportError`` that says
how to install it.

``global_batches(dataset, sharding)`` runs in every JAX process of a
multi-process run. Each process reads its own *local* batches (the dataset's
elements: structures of numpy arrays with a leading batch dimension) and
yields them as *global* ``jax.Array`` s of ``sharding`` (a
``jax.sharding.NamedSharding``), leaf by leaf
(``jax.make_array_from_process_local_data``): a local batch of ``B`` rows
on each of ``P`` processes is a global batch of ``B * P`` rows, each
process's devices holding its own rows. Tuples, dicts and lists keep their
structure.

Who reads what:

* a *service* read (``distribute`` / ``from_dataset_id``) of a finite
  ``distributed_epoch`` job with a ``job_name`` and no ``num_consumers`` is
  made a multi-rank read: ``num_consumers=jax.process_count()``,
  ``consumer_index=jax.process_index()`` (docs/modes.md). The service deals
  the elements in turn, so every process makes the same number of steps (no
  process waits forever in a collective at the end of the epoch) and, with a
  ``seed``, reads the same elements in every run;
* a *local* pipeline (no service read) is sharded by the adapter:
  ``dataset.shard(process_count, process_index)``, cut to the same number of
  batches on every process when the dataset's cardinality is known.

Skipping steps (the loss-spike recipe, docs/accountable.md):
``skip_steps(position, steps)`` is the merged position with the next
``steps`` global batches skipped (one local batch of every process each).

Checkpoints: ``GlobalBatches.save()`` is this process's position (after the
last batch it yielded: batches built ahead are not counted), and
``service.merge_positions`` of every process's ``save()`` taken at one step is
the job's position, which ``restore`` resumes on any number of processes. With
orbax, ``CheckpointSave`` / ``CheckpointRestore`` do it next to the model
(``CheckpointHandler``). ``examples/train_jax.py`` and docs/frameworks.md
show a whole run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from zmqdata._adapters import takes_consumers, uses_service, with_consumers
from zmqdata._client.advance import skip_steps
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.iterator import DatasetIterator, UnaryIterator
from zmqdata._dataset.ops._threads import BackgroundIterator
from zmqdata._dataset.validate import check_int
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

_MISSING = "zmqdata.jax needs JAX and orbax: pip install zmqdata[jax]"

__all__ = [
    "CheckpointHandler",
    "CheckpointRestore",
    "CheckpointSave",
    "GlobalBatches",
    "global_batches",
    "skip_steps",
]

try:
    import jax
    from jax.experimental import multihost_utils
except ImportError as _error:  # JAX absent (or broken): fail on use
    _IMPORT_ERROR: ImportError | None = _error
else:
    _IMPORT_ERROR = None

_SPEC_BYTES = 1024
"""What each process sends of its first batch's spec (longer ones are cut)."""
_HASH_CHARS = 16
_END = object()
_NO_JAX_KINDS = frozenset("OSUVMm")
"""numpy dtype kinds (objects, strings, raw bytes, datetimes) JAX has no arrays of."""
_DEALT: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], Dataset]] = (
    weakref.WeakKeyDictionary()
)
"""A user's pipeline (its root node) with its reads dealt to this process (a
new tree that shares only what lies below the reads): kept, so the same
dataset read again reads the next epoch of its named jobs."""


def _needs_jax() -> None:
    if _IMPORT_ERROR is not None:
        raise ImportError(_MISSING) from _IMPORT_ERROR


def global_batches(
    dataset: Dataset, sharding: Any, *, prefetch: int = 2
) -> GlobalBatches:
    """The dataset's local batches as global ``jax.Array`` s of ``sharding``.

    Call it in every JAX process (after ``jax.distributed.initialize`` in a
    multi-process run) with the same pipeline and sharding.

    Args:
        dataset: a ``zmqdata.Dataset`` of per-process batches (structures of
            numpy arrays with a leading batch dimension, the same shapes on
            every process: batch with ``drop_remainder=True`` for one jit
            compilation). A finite ``distributed_epoch`` service read with a
            ``job_name`` and no ``num_consumers`` gets
            ``num_consumers=jax.process_count()`` and
            ``consumer_index=jax.process_index()``; a local pipeline is
            sharded between the processes.
        sharding: a ``jax.sharding.NamedSharding`` over a mesh of every
            process's devices; its first dimension (the batch axis) must
            split the batch between the processes. The global batch is
            ``local batch * jax.process_count()`` rows, which the batch
            axis's size must divide.
        prefetch: how many global batches are built (put on the devices)
            ahead, on a background thread; at least 1.

    The first batch checks that every process has the same element spec (a
    collective: every process must ask for its first batch). Close the
    iterator (or use it as a context manager) to stop the thread.

    >>> import jax
    >>> import zmqdata as zd
    >>> from zmqdata.jax import global_batches
    >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
    >>> sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    >>> ds = zd.Dataset.range(8).map(lambda i: {"x": i * 2, "id": i}).batch(4)
    >>> with global_batches(ds, sharding) as batches:
    ...     for batch in batches:
    ...         print(batch["x"].shape, batch["x"].sharding.spec, int(batch["x"].sum()))
    (4,) P('data',) 12
    (4,) P('data',) 44
    """
    _needs_jax()
    return GlobalBatches(dataset, sharding, prefetch=prefetch)


class GlobalBatches(Iterator[Any]):
    """An iterator of global batches (``global_batches`` makes one).

    ``save()`` / ``restore()`` checkpoint the read; ``close()`` stops it.

    >>> import jax
    >>> import zmqdata as zd
    >>> from zmqdata.jax import global_batches
    >>> mesh = jax.make_mesh((jax.device_count(),), ("data",))
    >>> sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    >>> ds = zd.Dataset.range(6).batch(2)
    >>> with global_batches(ds, sharding) as batches:
    ...     first, state = next(batches), batches.save()
    >>> resumed = global_batches(ds, sharding)
    >>> resumed.restore(state)
    >>> [batch.tolist() for batch in resumed]
    [[2, 3], [4, 5]]
    """

    def __init__(self, dataset: Dataset, sharding: Any, *, prefetch: int = 2) -> None:
        _needs_jax()
        if not isinstance(dataset, Dataset):
            raise TypeError(
                f"global_batches needs a zmqdata.Dataset, got {type(dataset).__name__}"
            )
        if not isinstance(sharding, jax.sharding.NamedSharding):
            raise TypeError(
                "global_batches needs a jax.sharding.NamedSharding (a mesh and a "
                f"PartitionSpec), got {sharding!r:.100}"
            )
        self.sharding = sharding
        self.prefetch = check_int("prefetch", prefetch, minimum=1)
        self.process_index = jax.process_index()
        self.process_count = jax.process_count()
        self.dataset = _prepare(dataset, self.process_count, self.process_index)
        """The pipeline as this process reads it (consumers filled in, or sharded)."""
        self.multi_rank = any(
            node.op == "data_service" and node.args["options"].num_consumers is not None
            for node in self.dataset._node.walk()
        )
        """Whether the positions of every process merge (``service.merge_positions``)."""
        self._iterator = self._open()
        self._background: BackgroundIterator | None = None
        self._position: bytes | FailedPreconditionError | None = None
        self._closed = False
        self._shapes: dict[tuple[int, ...], tuple[int, ...]] = {}
        """Global shapes checked, by local shape (prefetch thread only)."""

    def _open(self) -> DatasetIterator:
        try:
            return iter(self.dataset)
        except InvalidArgumentError as error:
            if not self.multi_rank:
                raise
            raise InvalidArgumentError(
                f"{error} (zmqdata.jax.global_batches reads this job as "
                f"consumer_index={self.process_index} of "
                f"num_consumers={self.process_count}: jax.process_index() of "
                "jax.process_count())"
            ) from error

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            if self._background is None:
                self._background = self._start()
            batch, self._position = next(self._background)
        except BaseException:  # the end, or an error: nothing more comes
            self.close()
            raise
        return batch

    def _start(self) -> BackgroundIterator:
        """Reads the first batch, checks it on every process, starts the thread."""
        builder = _Builder(self._iterator, self._to_global)
        failure: Exception | None = None
        try:
            first = builder.read_first()
        except Exception as error:  # raised after the others have heard of it
            failure, first = error, _END
        if failure is not None:
            spec = f"an error ({type(failure).__name__}: {failure})"
        else:
            spec = "no batch (the end)" if first is _END else _describe(first)
        specs = _gather(spec) if self.process_count > 1 else [spec]
        if failure is not None:
            raise failure
        if len(set(specs)) > 1:
            listed = "; ".join(f"process {i}: {s}" for i, s in enumerate(specs))
            raise InvalidArgumentError(
                f"the processes' first local batches differ: {listed}. Every "
                "process must read batches of one structure, dtypes and shape "
                "(the same per-process batch size)"
            )
        return BackgroundIterator(builder, self.prefetch, "jax-prefetch")

    def _to_global(self, element: Any) -> Any:
        """One local batch as global arrays (on the prefetch thread)."""
        leaves, treedef = jax.tree_util.tree_flatten_with_path(element)
        arrays = []
        for path, leaf in leaves:
            name = jax.tree_util.keystr(path) or "the batch"
            if not isinstance(leaf, np.ndarray) or leaf.ndim == 0:
                raise InvalidArgumentError(
                    f"global_batches needs numpy arrays with a leading batch "
                    f"dimension, got {name} = {leaf!r:.80}"
                )
            if leaf.dtype.kind in _NO_JAX_KINDS:
                raise InvalidArgumentError(
                    f"JAX has no arrays of dtype {leaf.dtype}: {name} = {leaf!r:.80}"
                    " (turn strings and objects into numbers in the pipeline)"
                )
            shape = self._shapes.get(leaf.shape)
            if shape is None:
                shape = _global_shape(
                    name, leaf.shape, self.sharding, self.process_count
                )
                self._shapes[leaf.shape] = shape
            make: Any = jax.make_array_from_process_local_data  # untyped in JAX
            arrays.append(make(self.sharding, leaf, shape))
        return jax.tree_util.tree_unflatten(treedef, arrays)

    def save(self) -> bytes:
        """This process's position: the read up to the last batch yielded.

        Batches built ahead (``prefetch``) are not counted: they come again
        after a ``restore``. Take it on every process at the same step and
        merge them with ``service.merge_positions`` (``CheckpointSave`` does
        it with orbax). Raises ``FailedPreconditionError`` for a read that
        cannot save its position (docs/modes.md).
        """
        if self._background is None or self._position is None:
            return self._iterator.save()
        if isinstance(self._position, FailedPreconditionError):
            raise self._position
        return self._position

    def restore(self, state: bytes) -> None:
        """Starts the read at ``state``, before the first batch.

        For a multi-rank service read, ``state`` is the job's position,
        ``service.merge_positions`` of every process's ``save()`` taken at one
        step, and this read names a **fresh** ``job_name`` (the same pipeline
        otherwise); any number of processes can resume it, together reading
        exactly the elements no process had consumed, dealt equally. For a
        local pipeline, ``state`` is this process's own ``save()``, on as
        many processes as saved.
        """
        if not isinstance(state, bytes):
            raise TypeError(f"restore needs the bytes of a position, got {state!r:.80}")
        if self._background is not None or self._closed:
            raise ValueError(
                "restore a GlobalBatches before its first batch (make a new one "
                "to resume)"
            )
        self._iterator.restore(state)

    def close(self) -> None:
        """Stops the prefetch thread and the read; the iterator ends."""
        self._closed = True
        if self._background is not None:
            self._background.close()  # closes the read under it
        else:
            self._iterator.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<zmqdata.jax.GlobalBatches process {self.process_index} of "
            f"{self.process_count} sharding={self.sharding}>"
        )


class _Builder(UnaryIterator):
    """Yields ``(global batch, position after it)`` of its input's local batches.

    A position is the input's ``save()``, or the ``FailedPreconditionError``
    saying why it cannot save (asked once).
    """

    def __init__(self, source: DatasetIterator, to_global: Any) -> None:
        super().__init__(source)
        self._to_global = to_global
        self._first: Any = None
        self._cannot_save: FailedPreconditionError | None = None

    def read_first(self) -> Any:
        """Reads the first local batch (``_END`` if none): the first ``next`` yields it."""
        first = next(self._input, _END)
        self._first = (first, self._position())
        return first

    def __next__(self) -> Any:
        if self._first is not None:
            element, position = self._first
            self._first = None
            if element is _END:
                raise StopIteration
        else:
            element = next(self._input)
            position = self._position()
        return self._to_global(element), position

    def _position(self) -> bytes | FailedPreconditionError:
        if self._cannot_save is None:
            try:
                return self._input.save()
            except FailedPreconditionError as error:
                self._cannot_save = error
        return self._cannot_save


def _prepare(dataset: Dataset, count: int, index: int) -> Dataset:
    """``dataset`` as process ``index`` of ``count`` reads it."""
    node = dataset._node
    if uses_service(node):
        if not any(takes_consumers(n) for n in node.walk()):
            return dataset
        kept = _DEALT.get(node)
        if kept is None or kept[0] != (count, index):
            kept = ((count, index), Dataset(with_consumers(node, count, index)))
            _DEALT[node] = kept
        return kept[1]
    if count == 1:
        return dataset
    sharded = dataset.shard(count, index)
    cardinality = dataset.cardinality()
    if cardinality < 0:
        return sharded
    return sharded.take(cardinality // count)  # every process as many batches


def _describe(element: Any) -> str:
    """The structure, dtypes and shapes of a batch, as text."""

    def leaf(value: Any) -> str:
        if isinstance(value, np.ndarray | np.generic):
            return f"{value.dtype}{list(value.shape)}"
        return f"{type(value).__name__} {value!r:.40}"

    return str(jax.tree_util.tree_map(leaf, element))


def _gather(text: str) -> list[str]:
    """Every process's ``text`` (a collective: every process calls it).

    Each is sent as its hash and its first bytes: texts that differ past
    them still compare different (the hash shows then).
    """
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]
    data = text.encode()[:_SPEC_BYTES]
    buffer = np.zeros(_HASH_CHARS + _SPEC_BYTES, np.uint8)
    buffer[:_HASH_CHARS] = np.frombuffer(digest.encode(), np.uint8)
    buffer[_HASH_CHARS : _HASH_CHARS + len(data)] = np.frombuffer(data, np.uint8)
    rows = np.asarray(multihost_utils.process_allgather(buffer))
    texts = [row.tobytes().rstrip(b"\0").decode(errors="replace") for row in rows]
    if len({t[:_HASH_CHARS] for t in texts}) == len({t[_HASH_CHARS:] for t in texts}):
        return [t[_HASH_CHARS:] for t in texts]
    return [f"{t[_HASH_CHARS:]}... (sha256 {t[:_HASH_CHARS]})" for t in texts]


def _batch_axes(sharding: Any) -> tuple[str, ...]:
    """The mesh axes the sharding splits dimension 0 over."""
    spec = tuple(sharding.spec)
    first = spec[0] if spec else None
    if first is None:
        return ()
    return (first,) if isinstance(first, str) else tuple(first)


def _global_shape(
    name: str, local: tuple[int, ...], sharding: Any, count: int
) -> tuple[int, ...]:
    """The global shape of ``count`` processes' local ``name`` arrays of shape ``local``.

    Raises ``InvalidArgumentError`` when the sharding's batch axis cannot
    split the global batch evenly, or does not give each process its own rows.
    """
    axes = _batch_axes(sharding)
    size = math.prod(sharding.mesh.shape[axis] for axis in axes)
    rows = local[0] * count
    if rows % size:
        raise InvalidArgumentError(
            f"{name}: a local batch of {local[0]} on {count} processes is a "
            f"global batch of {rows}, which the sharding's batch axis {axes} of "
            f"size {size} cannot split evenly: make local batch * process "
            f"count a multiple of {size}"
        )
    shape = (rows, *local[1:])
    starts = {
        index[0].start or 0
        for index in sharding.addressable_devices_indices_map(shape).values()
    }
    held = len(starts) * (rows // size)
    if held != local[0]:
        raise InvalidArgumentError(
            f"{name}: the sharding gives this process's devices {held} of the "
            f"{rows} rows of the global batch, but each process brings its own "
            f"{local[0]}: split dimension 0 over mesh axes that span every "
            "process's devices, e.g. NamedSharding(jax.make_mesh((jax.device_count(),), "
            f"('data',)), PartitionSpec('data')); got {sharding}"
        )
    return shape


# ------------------------------------------------------------ orbax


def _positions_in(directory: Any) -> list[bytes]:
    """The ``process_{i}.bin`` positions a checkpoint holds, by process index."""
    found: dict[int, bytes] = {}
    for path in directory.glob("process_*.bin"):
        index = path.name[len("process_") : -len(".bin")]
        if index.isdigit():
            found[int(index)] = path.read_bytes()
    missing = sorted(set(range(max(found, default=-1) + 1)) - set(found))
    if not found or missing:
        raise InvalidArgumentError(
            f"the checkpoint in {directory} lacks the positions of processes "
            f"{missing or [0]} (process_<i>.bin): not a complete zmqdata.jax save"
        )
    return [found[i] for i in range(len(found))]


def _resume_position(batches: GlobalBatches, states: list[bytes], where: Any) -> bytes:
    """What ``batches`` restores of the processes' saved ``states``."""
    from zmqdata._client.position import merge_positions

    if batches.multi_rank:
        try:
            return merge_positions(states)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(
                f"cannot merge the {len(states)} positions saved in {where}: {error}"
            ) from error
    if len(states) != batches.process_count:
        raise InvalidArgumentError(
            f"{where} holds the positions of {len(states)} processes, and "
            f"{batches.process_count} processes read it now: only a multi-rank "
            "service read (distributed_epoch with a job_name) resumes on another "
            "number of processes; this one resumes on as many as saved"
        )
    return states[batches.process_index]


def _item_of(item: Any, args: Any, what: str) -> GlobalBatches:
    batches = item if item is not None else getattr(args, "item", None)
    if not isinstance(batches, GlobalBatches):
        raise TypeError(
            f"zmqdata.jax.CheckpointHandler {what}s a zmqdata.jax.GlobalBatches, "
            f"got {type(batches).__name__}"
        )
    return batches


def _make_checkpointing() -> tuple[type, type, type]:
    """``CheckpointHandler``, ``CheckpointSave``, ``CheckpointRestore`` (needs orbax)."""
    _needs_jax()
    try:
        import orbax.checkpoint as ocp  # type: ignore[import-untyped,unused-ignore]
    except ImportError as error:
        raise ImportError(_MISSING) from error

    class CheckpointHandler(ocp.CheckpointHandler):  # type: ignore[misc,unused-ignore]
        """An orbax ``CheckpointHandler`` for ``GlobalBatches``.

        Saving, every process writes its position (``process_{i}.bin``) in
        the item's directory. Restoring, every process reads them all,
        merges them (``service.merge_positions``) and restores the merged
        position: on any number of processes, into a ``GlobalBatches`` over
        the same pipeline with a fresh ``job_name``, before its first batch.
        A local pipeline resumes each process's own position, on as many
        processes. Use it through ``CheckpointSave`` / ``CheckpointRestore``::

            manager = orbax.checkpoint.CheckpointManager(path)
            manager.save(step, args=ocp.args.Composite(
                model=ocp.args.StandardSave(params), data=CheckpointSave(batches)))
            ...
            batches = global_batches(pipeline(job_name="run-2"), sharding)
            manager.restore(step, args=ocp.args.Composite(
                model=ocp.args.StandardRestore(abstract_params),
                data=CheckpointRestore(batches)))
        """

        def save(self, directory: Any, item: Any = None, args: Any = None) -> None:
            batches = _item_of(item, args, "save")
            path = directory / f"process_{batches.process_index}.bin"
            path.write_bytes(batches.save())

        def restore(
            self, directory: Any, item: Any = None, args: Any = None
        ) -> GlobalBatches:
            batches = _item_of(item, args, "restore")
            states = _positions_in(directory)
            batches.restore(_resume_position(batches, states, directory))
            return batches

        def metadata(self, directory: Any) -> None:
            return None

    @ocp.args.register_with_handler(CheckpointHandler, for_save=True)
    @dataclasses.dataclass
    class CheckpointSave(ocp.args.CheckpointArgs):  # type: ignore[misc,unused-ignore]
        """Saves a ``GlobalBatches``'s position (``CheckpointHandler``)."""

        item: Any

    @ocp.args.register_with_handler(CheckpointHandler, for_restore=True)
    @dataclasses.dataclass
    class CheckpointRestore(ocp.args.CheckpointArgs):  # type: ignore[misc,unused-ignore]
        """Restores a ``GlobalBatches`` from a checkpoint (``CheckpointHandler``)."""

        item: Any

    made = (CheckpointHandler, CheckpointSave, CheckpointRestore)
    for cls in made:
        cls.__module__ = __name__
        cls.__qualname__ = cls.__name__
    return made


_CHECKPOINTING = ("CheckpointHandler", "CheckpointSave", "CheckpointRestore")

if TYPE_CHECKING:
    CheckpointHandler: Any
    CheckpointSave: Any
    CheckpointRestore: Any
else:

    def __getattr__(name: str) -> Any:
        """The orbax classes, made on first use (orbax imports only then)."""
        if name in _CHECKPOINTING:
            made = dict(zip(_CHECKPOINTING, _make_checkpointing(), strict=True))
            globals().update(made)
            return made[name]
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
