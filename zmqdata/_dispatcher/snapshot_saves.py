"""Snapshots written through: the saves that the jobs over a ``snapshot`` write.

A pipeline with a ``snapshot(path)`` (or a ``cache(filename)``) before
``distribute`` names a folder (``path/<fingerprint>`` of the ops before it).
The first ``distributed_epoch`` job over it opens a save there (``open_save``:
journaled, ``Save.by_jobs``) or, if the folder holds a finished snapshot,
adopts its chunks. The job's splits are cut one chunk each, the same for every
job over the same ops (``cache.chunk_size``), and each split goes out with the
snapshot's word on it (``words``): the chunk to read instead of running the
ops before the snapshot, or none yet, so the worker makes the split and
writes it as it streams (``_dataset/ops/cache_chunks.py``). Workers report
the chunks they committed with their next split request (``took``); the first
report of a split is kept, and once every split has its chunk the manifest is
written (``save_requests.take_chunks``): the snapshot is finished. Later
epochs, and later jobs over the same ops, find every chunk and run none of
those ops.

Who writes which split is not kept: every run that makes a whole split writes
it, so a worker lost mid-split, a repetition that catches up with the one
before, or two jobs at once cost at most a second write of the split, never a
second chunk listed (the chunks not listed are removed once the manifest is
written).

>>> import zmqdata as zd
>>> from zmqdata._dataset import graph
>>> ds = zd.Dataset.range(1_000).map(lambda x: x).snapshot("/snaps").batch(8)
>>> root = graph.deserialize(graph.serialize(ds._node), load_functions=False)
>>> target = target_of(root)
>>> target.directory.startswith("/snaps/"), target.split_size, target.refused
(True, 15, '')
>>> target_of(zd.Dataset.range(9).cache()._node).refused  # doctest: +ELLIPSIS
'cache() in memory before distribute cannot serve distributed_epoch: ...'
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import TYPE_CHECKING, Any

from zmqdata._dataset import builders, fs, snapshot, specs
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops import cache
from zmqdata._dataset.ops.split_runs import main_chain
from zmqdata._dispatcher import dealing, model
from zmqdata._dispatcher import events as ev
from zmqdata._wire import messages as m
from zmqdata._wire.modes import ShardingPolicy
from zmqdata.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ZmqDataError,
)

if TYPE_CHECKING:
    from zmqdata._dispatcher.records import ClusterRecords
    from zmqdata._dispatcher.state import DispatcherState


def target_of(root: Node) -> model.SnapshotTarget | None:
    """The ``snapshot`` (or ``cache``) on ``root``'s main chain, if any (functions not loaded)."""
    persisted = [node for node in main_chain(root) if node.op in cache.PERSISTED]
    if not persisted:
        return None  # (one in a branch, a zip's, passes through on workers)
    node = persisted[0]
    refused = ""
    everywhere = [other for other in root.walk() if other.op in cache.PERSISTED]
    if len(everywhere) > 1:
        persisted = everywhere
        refused = (
            f"a distributed_epoch read writes one snapshot: this pipeline has "
            f"{len(persisted)} ({', '.join(n.op for n in persisted)}) before "
            "distribute; keep the last"
        )
    elif cache.in_memory(node):
        refused = (
            "cache() in memory before distribute cannot serve distributed_epoch: "
            "a split goes to any worker in each epoch, so no worker holds the "
            "elements it would read; use snapshot(path) (or cache(filename)), "
            "which every worker reads, or cache() after distribute"
        )
    try:
        size = cache.chunk_size(node.inputs[0])
    except InvalidArgumentError as error:
        size, refused = 0, refused or f"{node.op} before distribute: {error}"
    return model.SnapshotTarget(
        op=node.op,
        directory="" if cache.in_memory(node) else cache.directory(node),
        compression=cache.compression(node),
        fingerprint=node.args["fingerprint"],
        split_size=size,
        element_spec=_spec(node.inputs[0]),
        refused=refused,
    )


def _spec(node: Node) -> bytes:
    """The element spec of ``node`` as ``specs.encode_spec`` bytes (b"": unknown)."""
    try:
        spec = builders.element_spec(node)
    except Exception:  # decided by user code the dispatcher does not run
        return b""
    return b"" if spec is None else specs.encode_spec(spec)


def check_job(msg: m.GetOrCreateJob, dataset: model.Dataset, whole: bool) -> None:
    """Refuses a job that cannot read the snapshot of its pipeline split by split.

    ``whole``: the job runs each split whole (exactly once, or dealt).
    Under ``parallel_epochs`` every worker makes the whole dataset, and the
    op behaves as it does locally.
    """
    target = dataset.snapshot
    if target is None or msg.processing_mode == ShardingPolicy.OFF:
        return
    if msg.processing_mode != ShardingPolicy.DYNAMIC:
        raise InvalidArgumentError(
            f"{target.op} before distribute is written split by split under "
            f"distributed_epoch; processing mode {model.mode_name(msg.processing_mode)} "
            "gives each worker a static shard, so none would write it whole"
        )
    if target.refused:
        raise InvalidArgumentError(target.refused)
    if not whole:
        raise InvalidArgumentError(
            f"{target.op} before distribute needs exactly_once=True (the default) "
            "or num_consumers: its workers write each split as one chunk, so each "
            "split must run whole"
        )


def save_of(records: ClusterRecords, target: model.SnapshotTarget) -> model.Save | None:
    """The save of ``target``'s folder: running or finished (None: none, or it failed).

    A folder's saves follow one another only when the one before failed
    (``open_save``), so the latest is the one that counts.
    """
    save = _latest(records, target)
    return None if save is None or save.error else save


def open_save(state: DispatcherState, dataset: model.Dataset) -> None:
    """Opens the save a new DYNAMIC job over ``dataset`` reads and writes.

    Adopts a finished snapshot in the folder (its chunks must be cut as this
    job's splits are), or claims the folder (``snapshot.begin``; taking
    over a marker an earlier dispatcher left). Raises naming the folder
    where it holds another pipeline's save, or cannot be written.
    """
    target = dataset.snapshot
    if target is None or not target.directory:
        return
    if save_of(state.records, target) is not None:
        return
    num_splits = dealing.splits_of(dataset).count()
    chunks = _finished_chunks(target, num_splits)
    save_id = uuid.uuid4().hex[:16]
    if chunks is None:
        snapshot.begin(target.directory, save_id, take_over=True)
    state.apply(
        ev.SaveStarted(
            save_id,
            target.directory,
            dataset.dataset_id,
            target.compression,
            num_splits,
            time.time(),
            by_jobs=True,
        )
    )
    for ordinal, chunk in enumerate(chunks or []):
        state.apply(ev.ChunkSaved(save_id, ordinal, *chunk))
    if chunks is not None:
        state.apply(ev.SaveEnded(save_id, ""))


def _finished_chunks(
    target: model.SnapshotTarget, num_splits: int
) -> list[list[Any]] | None:
    """The chunks of a finished snapshot in ``target``'s folder, by ordinal (None: none).

    Raises ``FailedPreconditionError`` naming the folder where the save
    there is another pipeline's, or not cut one chunk per split.
    """
    try:
        manifest = snapshot.read_manifest(target.directory)
    except (NotFoundError, FailedPreconditionError):
        return None
    where = f"the {target.op} at {target.directory}"
    if manifest["dataset_id"] != target.fingerprint:
        raise FailedPreconditionError(
            f"{where} holds the output of another pipeline (fingerprint "
            f"{manifest['dataset_id']!r}, this one {target.fingerprint!r}); "
            "remove it, or give this pipeline another path"
        )
    chunks = manifest["chunks"]
    ordinals = [int(chunk["name"].split("-", 1)[0]) for chunk in chunks]
    if ordinals != list(range(num_splits)):
        raise FailedPreconditionError(
            f"{where} is cut into {len(chunks)} chunks, not one per split of this "
            f"job's {num_splits}: it was written otherwise (distributed_save?); "
            "remove it to write it again"
        )
    return [[c["name"], c["elements"], c["bytes"], c["crc32"]] for c in chunks]


def took(state: DispatcherState, dataset: model.Dataset, msg: m.GetSplit) -> None:
    """What a task's snapshot writes did: the first chunk of each split is listed.

    A chunk it could not write fails the save with the reason: the job reads
    on without writing, and the next job opens a new save. A chunk reported
    once the snapshot is finished (a second writer of its split, later than
    the manifest's pruning) is removed.
    """
    from zmqdata._dispatcher import save_requests

    target = dataset.snapshot
    save = None if target is None else save_of(state.records, target)
    if save is None or not (msg.chunks or msg.chunk_failed):
        return
    if save.ended:
        _remove_late(save, msg.chunks)
    elif msg.chunk_failed:
        error = f"a worker could not write a chunk: {msg.chunk_failed}"
        save_requests.fail(state, save, error)
    else:
        save_requests.take_chunks(state, save, msg.chunks)


def _remove_late(save: model.Save, chunks: list[list[Any]]) -> None:
    """Removes the chunks reported to the finished ``save`` that it does not list."""
    for ordinal, name, *_ in chunks:
        if save.chunks.get(ordinal, [None])[0] != name:
            with contextlib.suppress(OSError, ZmqDataError):
                fs.remove(snapshot.chunk_path(save.path, name))


def words(
    state: DispatcherState, dataset: model.Dataset, splits: list[list[int]]
) -> list[list[Any]]:
    """The snapshot's word on each of ``splits``: its chunk, or ``[ordinal]`` (none yet)."""
    target = dataset.snapshot
    if target is None or not target.directory or not splits:
        return []
    save = save_of(state.records, target)
    chunks = {} if save is None else save.chunks
    said = []
    for split in splits:
        ordinal = split[1] // target.split_size
        said.append([ordinal, *chunks.get(ordinal, ())])
    return said


def status(
    records: ClusterRecords, dataset: model.Dataset, job: model.Job
) -> dict[str, Any] | None:
    """A job's ``"snapshot"`` status: its folder, writing or reading, chunks written.

    ``"failed"`` (with its ``"error"``) where a worker could not write a
    chunk: the job reads on without writing. None for a job over no
    snapshot, or one that does not write it (every worker of a
    ``parallel_epochs`` job runs the op as a local pass does).
    """
    target = dataset.snapshot
    dynamic = job.processing_mode == ShardingPolicy.DYNAMIC
    if target is None or not target.directory or not dynamic:
        return None
    save = _latest(records, target)
    said: dict[str, Any] = {
        "path": target.directory,
        "state": "writing",
        "written": 0 if save is None else len(save.chunks),
        "total": None if save is None else save.num_splits,
    }
    if save is not None and save.ended:
        said["state"] = "failed" if save.error else "reading"
    if save is not None and save.error:
        said["error"] = save.error
    return said


def _latest(records: ClusterRecords, target: model.SnapshotTarget) -> model.Save | None:
    """The latest save of ``target``'s folder, failed ones included."""
    return next(
        (
            save
            for save in reversed(records.saves.values())
            if save.by_jobs and save.path == target.directory
        ),
        None,
    )
