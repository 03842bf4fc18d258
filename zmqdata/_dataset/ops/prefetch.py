"""``prefetch``: run the input ahead on a background thread."""

from __future__ import annotations

from zmqdata._dataset.constants import AUTOTUNE
from zmqdata._dataset.iterator import DatasetIterator, IterContext
from zmqdata._dataset.node import Node, Op, make_iterator
from zmqdata._dataset.ops._threads import BackgroundIterator

AUTOTUNE_BUFFER = 16


class Prefetch(Op):
    name = "prefetch"

    def iterator(self, node: Node, ctx: IterContext) -> DatasetIterator:
        source = make_iterator(node.inputs[0], ctx)
        size = node.args["buffer_size"]
        if size == 0:
            return source
        return BackgroundIterator(
            source,
            AUTOTUNE_BUFFER if size == AUTOTUNE else size,
            "prefetch",
            lineage=ctx.lineage,
        )
