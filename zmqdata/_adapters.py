"""What the framework adapters (``zmqdata.torch``, ``zmqdata.jax``) share.

Finding a pipeline's service reads and making the open ones multi-rank reads:
each rank (or process) a consumer of the job, dealt its share in turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from zmqdata._dataset.constants import INFINITE_CARDINALITY
from zmqdata._dataset.node import Node
from zmqdata._wire.modes import ShardingPolicy


def uses_service(node: Node) -> bool:
    """Whether the pipeline reads from the service (an op ``data_service`` in it)."""
    return any(n.op == "data_service" for n in node.walk())


def takes_consumers(node: Node) -> bool:
    """Whether ``node`` is a service read an adapter makes a multi-rank read.

    A finite ``distributed_epoch`` read of a named job that names no
    ``num_consumers``, no cross-trainer cache and not
    ``target_workers="LOCAL"`` (which a multi-rank read refuses): the read
    whose consumers would otherwise split the elements first come first
    served.
    """
    if node.op != "data_service":
        return False
    options = node.args["options"]
    return (
        options.processing_mode == ShardingPolicy.DYNAMIC
        and options.job_name is not None
        and options.num_consumers is None
        and options.trainer_id is None
        and options.target_workers != "LOCAL"
        and node.args["cardinality"] != INFINITE_CARDINALITY
    )


def unnamed(node: Node) -> bool:
    """Whether ``node`` is a service read that splits the data in a job of its own.

    A read with no ``job_name`` in any mode but ``parallel_epochs``: each
    consumer gets a job of its own, so several consumers read every element
    each (under ``parallel_epochs`` every worker produces the whole dataset
    anyway).
    """
    if node.op != "data_service":
        return False
    options = node.args["options"]
    return options.job_name is None and options.processing_mode != ShardingPolicy.OFF


def with_consumers(node: Node, num_consumers: int, consumer_index: int) -> Node:
    """``node`` with ``num_consumers``/``consumer_index`` set on its open reads.

    Only the nodes from the root down to such a read are rebuilt (fresh nodes,
    so the caller's dataset is left as it was); the rest is shared.
    """
    changes = {"num_consumers": num_consumers, "consumer_index": consumer_index}
    return _with_options(node, takes_consumers, changes)


def with_job_name(node: Node, job_name: str) -> Node:
    """``node`` with ``job_name`` set on its ``unnamed`` reads (as ``with_consumers``)."""
    return _with_options(node, unnamed, {"job_name": job_name})


def _with_options(
    node: Node, takes: Callable[[Node], bool], changes: dict[str, Any]
) -> Node:
    """``node`` with ``changes`` to the read options of the nodes ``takes`` accepts.

    A service read's ``options`` arg is a frozen ``ReadOptions``
    (``_client/options.py``): a changed copy replaces it. The rest is shared.
    """
    inputs = tuple(_with_options(child, takes, changes) for child in node.inputs)
    if takes(node):
        options = dataclasses.replace(node.args["options"], **changes)
        return Node(node.op, {**node.args, "options": options}, inputs)
    if all(new is old for new, old in zip(inputs, node.inputs, strict=True)):
        return node
    return Node(node.op, node.args, inputs)
