"""Static sharding: how a worker rewrites its task's pipeline (FILE, DATA, HINT).

Under a static ``ShardingPolicy`` the dispatcher tells each worker its index in
``DispatcherConfig.worker_addresses`` (``worker_index``) and the length of that
list (``num_workers``). ``static_shard`` turns the pipeline and those two
numbers into the pipeline the worker runs and the ``IterContext`` it runs it
in. It is pure: nothing runs, no file is touched.

>>> import zmqdata as zd
>>> root, ctx = static_shard(zd.Dataset.range(7)._node, DATA, 3, 1)
>>> from zmqdata._dataset.node import make_iterator
>>> [int(x) for x in make_iterator(root, ctx)]
[1, 4]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import Node
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._wire.modes import STATIC, ShardingPolicy
from zmqdata.errors import InvalidArgumentError

FILE, DATA, FILE_OR_DATA, HINT = (
    ShardingPolicy.FILE,
    ShardingPolicy.DATA,
    ShardingPolicy.FILE_OR_DATA,
    ShardingPolicy.HINT,
)


def static_shard(
    root: Node,
    processing_mode: int,
    num_workers: int | None,
    worker_index: int | None,
) -> tuple[Node, IterContext]:
    """The pipeline worker ``worker_index`` of ``num_workers`` runs, and its context.

    * DATA: a ``shard(num_workers, worker_index)`` after the whole pipeline.
    * FILE: the ``list_files`` source reads only the files whose position in
      its (sorted) list is ``worker_index`` modulo ``num_workers``; fewer files
      than workers is an error.
    * FILE_OR_DATA: FILE when the pipeline reads a ``list_files`` source with
      at least ``num_workers`` files, DATA otherwise.
    * HINT: every ``shard(SHARD_HINT, SHARD_HINT)`` becomes
      ``shard(num_workers, worker_index)``.

    A ``worker_index`` outside ``[0, num_workers)``, or None (a worker missing
    from the dispatcher's ``worker_addresses``), is an error.
    """
    num_workers, worker_index = _check_slot(processing_mode, num_workers, worker_index)
    if processing_mode == HINT:
        return root, IterContext(shard_hint=(num_workers, worker_index))
    if processing_mode == DATA:
        return _shard_data(root, num_workers, worker_index)
    source = _list_files_source(root)
    if processing_mode == FILE_OR_DATA and (
        source is None or len(source.args["files"]) < num_workers
    ):
        return _shard_data(root, num_workers, worker_index)
    return _shard_files(root, source, num_workers, worker_index)


def _check_slot(
    processing_mode: int, num_workers: int | None, worker_index: int | None
) -> tuple[int, int]:
    """``(num_workers, worker_index)`` if the policy is static and they fit, else raises."""
    if processing_mode not in STATIC:
        raise InvalidArgumentError(
            f"processing mode {processing_mode} is not a static sharding policy"
        )
    if (
        isinstance(num_workers, bool)
        or not isinstance(num_workers, int)
        or not isinstance(worker_index, int)
        or not 0 <= worker_index < num_workers
    ):
        raise InvalidArgumentError(
            "static sharding needs a worker index in [0, num_workers), got "
            f"worker_index={worker_index!r}, num_workers={num_workers!r}"
        )
    return num_workers, worker_index


def _shard_files(
    root: Node, source: Node | None, num_workers: int, worker_index: int
) -> tuple[Node, IterContext]:
    """FILE: the ``list_files`` source reads every ``num_workers``-th file."""
    if source is None:
        raise InvalidArgumentError(
            "FILE sharding needs a list_files source read through single-input ops "
            "(e.g. list_files(...).interleave(read)); use ShardingPolicy.DATA or "
            "FILE_OR_DATA for other pipelines"
        )
    files = list(source.args["files"])
    if len(files) < num_workers:
        raise InvalidArgumentError(
            f"FILE sharding: the dataset has {len(files)} file(s), not enough for the "
            f"required {num_workers} shards/workers; use ShardingPolicy.DATA or "
            "FILE_OR_DATA, or add files"
        )
    provider = _FileShardProvider(
        list(range(worker_index, len(files), num_workers)),
        bool(source.args.get("shuffle")),
        source.args.get("seed"),
        worker_index,
    )
    return root, IterContext(split_source=source, split_provider=provider)


def _shard_data(
    root: Node, num_workers: int, worker_index: int
) -> tuple[Node, IterContext]:
    sharded = Node("shard", {"num_shards": num_workers, "index": worker_index}, (root,))
    return sharded, IterContext()


def _list_files_source(root: Node) -> Node | None:
    """The ``list_files`` node the pipeline reads through single-input ops, if any."""
    try:
        source = find_split_source(root)
    except InvalidArgumentError:
        return None
    return source if source.op == "list_files" else None


class _FileShardProvider(ListSplitProvider):
    """One worker's files, as index splits ``[k, k + 1]`` of the ``list_files`` list.

    They are reshuffled every repetition if ``list_files`` shuffles: the order of a repetition is drawn from ``(seed, worker_index, repetition)``
    when ``list_files`` has a seed, so a seeded pipeline reads the same order
    on every run.
    """

    def __init__(
        self, indices: list[int], shuffle: bool, seed: int | None, worker_index: int
    ) -> None:
        self._indices, self._shuffle = indices, shuffle
        self._seed, self._worker_index = seed, worker_index
        self._repetition = 0
        super().__init__(self._order())

    def _order(self) -> list[list[int]]:
        order = self._indices
        if self._shuffle:
            key = (
                None
                if self._seed is None
                else [self._seed, self._worker_index, self._repetition]
            )
            permutation = np.random.default_rng(key).permutation(len(order))
            order = [order[int(i)] for i in permutation]
        return [[k, k + 1] for k in order]

    def reset(self) -> None:
        self._repetition += 1
        self._splits = self._order()
        super().reset()

    def get_state(self) -> Any:
        return {
            "position": super().get_state(),
            "repetition": self._repetition,
            "splits": list(self._splits),
        }

    def set_state(self, state: Any) -> None:
        self._repetition = int(state["repetition"])
        self._splits = [list(split) for split in state["splits"]]
        super().set_state(state["position"])
