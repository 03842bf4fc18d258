"""The pipelines a worker holds, by fingerprint: each decoded once, run by every task.

A dataset's pipeline travels to a worker with its first task only. The worker's
heartbeats say which pipelines it holds (``WorkerHeartbeat.pipelines``) and the
dispatcher leaves those out of later task definitions: a pipeline that carries
a 64 MiB constant costs one transfer and one decoding per worker, not one per
task (``docs/architecture.md``, "Pipelines a worker holds").

The control thread owns a ``Pipelines``: it resolves each task definition it
receives and drops the least recently used pipelines, past ``capacity_bytes``,
only while it builds a heartbeat, so a heartbeat's reply finds what that
heartbeat said was held. A task whose pipeline was dropped since (a task pushed
between two heartbeats) is not started; the next heartbeat's reply brings it
again, with its pipeline.

>>> from zmqdata import Dataset
>>> from zmqdata._dataset import graph
>>> from zmqdata._wire.tasks import TaskDef
>>> data = graph.serialize(Dataset.range(3)._node)
>>> task = TaskDef(task_id=1, iteration_id=1, dataset_id="d", pipeline=data,
...                processing_mode=0, fingerprint=graph.fingerprint(data))
>>> held = Pipelines(capacity_bytes=1 << 20)
>>> first = held.resolve(task)
>>> held.held() == [task.fingerprint]
True
>>> import dataclasses
>>> held.resolve(dataclasses.replace(task, task_id=2, pipeline=b"")) is first
True
>>> first.root().op
'range'
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from zmqdata._dataset import graph
from zmqdata._dataset.node import Node
from zmqdata._wire.messages import MAX_PIPELINES_HELD
from zmqdata._wire.tasks import SaveDef, TaskDef

CAPACITY_BYTES = 256 * 2**20
"""Serialized pipelines a worker keeps by default: four of the largest a
dispatcher accepts by default (``max_pipeline_bytes``, 64 MiB)."""


class Pipeline:
    """One dataset's serialized pipeline, decoded by the first task that runs it."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        self._data: bytes | None = data
        self._root: Node | None = None
        self._lock = threading.Lock()

    def root(self) -> Node:
        """The pipeline, decoded once, as if anew (``Node.fresh``).

        Its tasks' producer threads call this; the first one decodes.
        """
        with self._lock:
            if self._root is None:
                assert self._data is not None
                self._root = graph.deserialize(self._data)
                self._data = None  # decoded: the bytes are not needed again
        return self._root.fresh()


class Pipelines:
    """The pipelines held, least recently used first (owned by the control thread)."""

    def __init__(self, capacity_bytes: int = CAPACITY_BYTES) -> None:
        self.capacity_bytes = capacity_bytes
        self._held: OrderedDict[str, Pipeline] = OrderedDict()

    def resolve(self, task: TaskDef | SaveDef) -> Pipeline | None:
        """``task``'s pipeline, or None if it carries none and none is held.

        The one held under its fingerprint (decoded already, maybe), else the
        one it carries (kept if it has a fingerprint).
        """
        held = self._held.get(task.fingerprint) if task.fingerprint else None
        if held is not None:
            self._held.move_to_end(task.fingerprint)
            return held
        if not task.pipeline:
            return None
        carried = Pipeline(task.pipeline)
        if task.fingerprint:
            self._held[task.fingerprint] = carried
        return carried

    def held(self) -> list[str]:
        """The fingerprints held, the least recently used past the capacity dropped.

        The most recent one is always kept.
        """
        total = sum(p.size for p in self._held.values())
        while len(self._held) > 1 and (
            total > self.capacity_bytes or len(self._held) > MAX_PIPELINES_HELD
        ):
            _, dropped = self._held.popitem(last=False)
            total -= dropped.size
        return list(self._held)
