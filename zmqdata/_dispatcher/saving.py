"""``distributed_save`` on the dispatcher: what a save may hold, who writes which split.

A save hands its dataset's splits out by ordinal (index ranges sized as a
multi-rank read's, ``dealing.splits_of``: whole batches). A worker writes each
split it gets as one chunk, alone (``_worker/saver.py``), and reports the
chunk with its next request: the dispatcher journals it (``ChunkSaved``), the
first report of an ordinal only. A split handed to a worker that is lost
goes to the next worker that asks, whole: nothing is lost, and a chunk the
lost worker still commits later is not listed (the manifest names one chunk
per ordinal). Who holds which split is liveness, not state: after a
dispatcher restart every split without a chunk is handed out again.

>>> import zmqdata as zd
>>> from zmqdata._dispatcher import model
>>> runs = SaveRuns()
>>> save = model.Save("s", "/p", "d", None, num_splits=3, started=0.0)
>>> runs.next_split(save, worker_id=1), runs.next_split(save, worker_id=2)
(0, 1)
>>> runs.next_split(save, worker_id=1)  # worker 1 still holds split 0
0
>>> runs.worker_lost(1); runs.next_split(save, worker_id=2)  # 2 holds 1
1
>>> runs.committed("s", 1); runs.next_split(save, worker_id=2)
0
"""

from __future__ import annotations

from collections import deque

from zmqdata._dataset import graph
from zmqdata._dataset.ops.cache import CHUNK_SPLIT_SIZE
from zmqdata._dataset.ops.split_runs import WHOLE_DATASET_OPS
from zmqdata._dispatcher import dealing, model
from zmqdata._dispatcher.splits import Splits
from zmqdata.errors import InvalidArgumentError

SPLIT_SIZE = CHUNK_SPLIT_SIZE
"""Source elements per split of a save, so per chunk (as a snapshot's): about
``SPLITS_PER_PASS`` chunks, of at most 256 source elements (256 images of
150 KB: a 38 MB chunk), a multiple of the first ``batch``."""


def splits_of(dataset: model.Dataset) -> Splits:
    """A save's splits, by ordinal: one chunk each."""
    return dealing.splits_of(dataset, SPLIT_SIZE)


def check_savable(dataset: model.Dataset) -> None:
    """Raises ``InvalidArgumentError`` if ``dataset`` cannot be saved split by split."""
    if dataset.split_source is None:
        raise InvalidArgumentError(
            f"dataset {dataset.dataset_id} cannot be saved: distributed_save splits "
            "its source (range, from_tensor_slices, list_files, from_source, record "
            "files, load) and its pipeline has none"
        )
    if dataset.cardinality == -1:
        raise InvalidArgumentError(
            f"dataset {dataset.dataset_id} is infinite (a repeat() before "
            "distributed_save): a save must end"
        )
    root = graph.deserialize(dataset.pipeline, load_functions=False)
    for op in sorted({node.op for node in root.walk()} & set(WHOLE_DATASET_OPS)):
        raise InvalidArgumentError(
            f"{op} before distributed_save counts elements over the whole dataset, "
            "but workers write it one split at a time: apply it to "
            "Dataset.load(path) instead"
        )


class SaveRuns:
    """Which worker writes which split of each running save (liveness, not state)."""

    def __init__(self) -> None:
        self._pending: dict[str, deque[int]] = {}
        """Save id -> ordinals to hand out (no chunk, no writer), lowest first."""
        self._writers: dict[str, dict[int, int]] = {}
        """Save id -> ordinal -> the worker writing it."""

    def next_split(self, save: model.Save, worker_id: int) -> int | None:
        """The ordinal ``worker_id`` writes next: the one it holds, or a new one."""
        writers = self._writers.setdefault(save.save_id, {})
        for ordinal, writer in writers.items():
            if writer == worker_id and ordinal not in save.chunks:
                return ordinal
        pending = self._pending.get(save.save_id)
        if pending is None:
            pending = self._pending[save.save_id] = deque(
                o for o in range(save.num_splits) if o not in save.chunks
            )
        while pending:
            ordinal = pending.popleft()
            if ordinal not in save.chunks:
                writers[ordinal] = worker_id
                return ordinal
        return None

    def committed(self, save_id: str, ordinal: int) -> None:
        """Split ``ordinal`` has its chunk: nobody writes it any more."""
        self._writers.get(save_id, {}).pop(ordinal, None)

    def worker_lost(self, worker_id: int) -> None:
        """The splits ``worker_id`` was writing go to the next workers that ask."""
        for save_id, writers in self._writers.items():
            lost = sorted(o for o, w in writers.items() if w == worker_id)
            for ordinal in lost:
                del writers[ordinal]
            self._pending[save_id].extendleft(reversed(lost))

    def forget(self, save_id: str) -> None:
        """The save ended."""
        self._pending.pop(save_id, None)
        self._writers.pop(save_id, None)
