"""Values computed bottom-up over a node tree, from each op's definition.

The dispatcher reads a registered pipeline's cardinality with these, straight
from the decoded nodes: no ``Dataset`` is built and no function is loaded.

>>> import zmqdata as zd
>>> cardinality(zd.Dataset.range(10).batch(3)._node)
4
>>> cardinality(zd.Dataset.range(2).repeat()._node)
-1
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zmqdata._dataset.node import Node


def fold(node: Node, combine: Callable[[Node, list[Any]], Any]) -> Any:
    """``combine(node, [fold(input) for each input])``, from the leaves up."""
    return combine(node, [fold(child, combine) for child in node.inputs])


def cardinality(node: Node) -> int:
    """The pipeline's cardinality (``-1`` infinite, ``-2`` unknown)."""
    return int(fold(node, lambda n, inputs: n.definition.cardinality(n, inputs)))
