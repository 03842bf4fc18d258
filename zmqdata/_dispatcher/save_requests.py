"""``distributed_save`` requests: ``StartSave`` and ``GetSaveSplit``.

A save claims its path (``snapshot.begin``) and is journaled; workers then
ask for splits to write, reporting the chunks they wrote with each request
(``ChunkSaved``), and who writes which split is kept beside the records
(``saving.SaveRuns``). Once every split has its chunk the dispatcher writes
the manifest and the save ends (``SaveEnded``), failed if a worker or the
manifest failed.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

from zmqdata._dataset import snapshot
from zmqdata._dispatcher import events as ev
from zmqdata._dispatcher import jobs, model, saving
from zmqdata._dispatcher.outgoing import Outgoing
from zmqdata._wire import messages as m
from zmqdata.errors import FailedPreconditionError, NotFoundError, ZmqDataError

if TYPE_CHECKING:
    from zmqdata._dispatcher.state import DispatcherState

logger = logging.getLogger("zmqdata.dispatcher")


def start_save(
    state: DispatcherState, peer: bytes, msg: m.StartSave, now: float
) -> list[Outgoing]:
    """Starts a ``distributed_save`` (or finds the one of this dataset and path).

    Claims the path first (``snapshot.begin``: refused if it holds another
    save or cannot be written), then journals the save.
    """
    records = state.records
    dataset = jobs.dataset_of(records, msg.dataset_id)
    for save in records.saves.values():
        if save.path != msg.path:
            continue
        if save.dataset_id == msg.dataset_id and not save.error:
            reply = m.StartSaveReply(request_id=msg.request_id, save_id=save.save_id)
            return [Outgoing(peer, reply)]
        failed = f", which failed: {save.error}" if save.error else ""
        raise FailedPreconditionError(
            f"{msg.path!r} holds save {save.save_id} of dataset "
            f"{save.dataset_id}{failed}; save to another path"
        )
    saving.check_savable(dataset)
    save_id = uuid.uuid4().hex[:16]
    snapshot.begin(msg.path, save_id)
    num_splits = saving.splits_of(dataset).count()
    state.apply(
        ev.SaveStarted(
            save_id,
            msg.path,
            msg.dataset_id,
            msg.compression,
            num_splits,
            time.time(),
        )
    )
    logger.info(
        "save %s of dataset %s to %s: %d splits",
        save_id,
        msg.dataset_id,
        msg.path,
        num_splits,
    )
    _finish_if_complete(state, records.saves[save_id])
    reply = m.StartSaveReply(request_id=msg.request_id, save_id=save_id)
    return [Outgoing(peer, reply)]


def get_save_split(
    state: DispatcherState, peer: bytes, msg: m.GetSaveSplit, now: float
) -> list[Outgoing]:
    """Takes a worker's chunks written, and hands it the next split to write."""
    records = state.records
    worker = records.workers.get(msg.worker_id)
    if worker is None:  # a save runner asks on a socket of its own
        raise NotFoundError(f"worker {msg.worker_id} is not registered; register again")
    save = records.saves.get(msg.save_id)
    done: list[Outgoing] = [
        Outgoing(peer, m.GetSaveSplitReply(request_id=msg.request_id, done=True))
    ]
    if save is None or save.ended:
        return done
    if msg.failed:
        _take(state, save, msg.chunks)
        _end_save(state, save, f"worker {worker.worker_address}: {msg.failed}")
        return done
    if take_chunks(state, save, msg.chunks):
        return done
    ordinal = state.save_runs.next_split(save, worker.worker_id)
    if ordinal is None:  # others write the rest
        return [Outgoing(peer, m.GetSaveSplitReply(request_id=msg.request_id))]
    splits = saving.splits_of(records.datasets[save.dataset_id])
    lo, hi = splits.at(ordinal)[:2]
    reply = m.GetSaveSplitReply(request_id=msg.request_id, split=[ordinal, lo, hi])
    return [Outgoing(peer, reply)]


def take_chunks(
    state: DispatcherState, save: model.Save, chunks: list[list[Any]]
) -> bool:
    """Lists the chunks workers committed (the first of each split); whether the save ended.

    Once every split has its chunk, the manifest is written.
    """
    _take(state, save, chunks)
    return _finish_if_complete(state, save)


def _take(state: DispatcherState, save: model.Save, chunks: list[list[Any]]) -> None:
    for ordinal, name, elements, nbytes, crc32 in chunks:
        if ordinal < save.num_splits and ordinal not in save.chunks:
            state.apply(
                ev.ChunkSaved(save.save_id, ordinal, name, elements, nbytes, crc32)
            )
        state.save_runs.committed(save.save_id, ordinal)


def _finish_if_complete(state: DispatcherState, save: model.Save) -> bool:
    """Writes the manifest once every split has its chunk; whether it ended."""
    if save.ended or len(save.chunks) < save.num_splits:
        return save.ended
    chunks = [
        {"name": c[0], "elements": c[1], "bytes": c[2], "crc32": c[3]}
        for _, c in sorted(save.chunks.items())
    ]
    dataset = state.records.datasets[save.dataset_id]
    target = dataset.snapshot if save.by_jobs else None
    try:
        snapshot.write_manifest(
            save.path,
            element_spec=dataset.element_spec
            if target is None
            else target.element_spec,
            chunks=chunks,
            compression=save.compression,
            cardinality=sum(c["elements"] for c in chunks),
            dataset_id=save.dataset_id if target is None else target.fingerprint,
        )
    except (OSError, ZmqDataError) as error:
        _end_save(state, save, f"its manifest could not be written: {error}")
        return True
    if save.by_jobs:  # a split's second writer's (another job's, a lost worker's)
        with contextlib.suppress(OSError, ZmqDataError):
            snapshot.remove_chunks(save.path, keep={c["name"] for c in chunks})
    _end_save(state, save, "")
    return True


def fail(state: DispatcherState, save: model.Save, error: str) -> None:
    """Ends ``save`` with ``error`` (a snapshot's writer could not write a chunk)."""
    if not save.ended:
        _end_save(state, save, error)


def _end_save(state: DispatcherState, save: model.Save, error: str) -> None:
    state.apply(ev.SaveEnded(save.save_id, error))
    state.save_runs.forget(save.save_id)
    if error:
        logger.warning("save %s to %s failed: %s", save.save_id, save.path, error)
    else:
        logger.info("save %s to %s finished", save.save_id, save.path)
