"""How a multi-rank job cuts its source into splits, from the pipeline alone (pure).

The dispatcher cuts a dealt job's source so (``_dispatcher/dealing.py``
``splits_of``, from the fields it derives once per dataset); code that
replays a job's order without a cluster (``advance_position``, lineage)
cuts it the same way from the pipeline.

>>> import zmqdata as zd
>>> dealt_split_size(zd.Dataset.range(1_000).map(abs).batch(8)._node)
16
"""

from __future__ import annotations

from zmqdata._dataset.node import Node
from zmqdata._dataset.ops import cache
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.ops.split_runs import main_chain, split_size, whole_batch

DEALT_SPLIT_SIZE = (1, 4096)
"""Elements per split of a dealt job: about ``SPLITS_PER_PASS`` splits, within
these bounds. Larger than first-come reads' (256): each split costs a fresh
pipeline iterator and, per consumer, a request for its share of it."""


def dealt_split_size(root: Node) -> int:
    """Source elements per split of a dealt job over ``root``.

    One chunk's under a ``snapshot`` (``cache.chunk_size``), else about
    ``SPLITS_PER_PASS`` splits of ``DEALT_SPLIT_SIZE``, whole batches.
    """
    persisted = [n for n in main_chain(root) if n.op in cache.PERSISTED]
    if persisted:
        return cache.chunk_size(persisted[0].inputs[0])
    source = find_split_source(root)
    length = source.definition.cardinality(source, [])
    return split_size(length, DEALT_SPLIT_SIZE, whole_batch(root))
