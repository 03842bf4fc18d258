"""The graph nodes ``Dataset``'s methods make, and what a graph says of them.

Each ``*_node`` function takes a method's arguments (a transformation's
input node first), raises ``TypeError`` / ``ValueError`` naming a bad one,
and returns the ``Node``; ``element_spec`` and ``cardinality`` fold a graph.
Pure: nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from zmqdata._dataset import fs, structure
from zmqdata._dataset.constants import AUTOTUNE, SHARD_HINT
from zmqdata._dataset.node import Constant, Node
from zmqdata._dataset.ops.source import SourceRef
from zmqdata._dataset.validate import (
    check_callable,
    check_int,
    check_optional_bool,
    check_optional_int,
)
from zmqdata.errors import InvalidArgumentError

# ---------------------------------------------------------------- sources


def range_node(args: tuple[int, ...], step: int | None) -> Node:
    """``Dataset.range(*args, step=step)``."""
    if step is not None:
        if len(args) != 2:
            raise TypeError(f"range step= needs start and stop, got {args!r}")
        args = (*args, step)
    if not 1 <= len(args) <= 3:
        raise TypeError(f"range takes 1 to 3 arguments, got {len(args)}: {args!r}")
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    start, stop = check_int("range start", start), check_int("range stop", stop)
    step = check_int("range step", step)
    if step == 0:
        raise ValueError("range step must not be 0")
    return Node("range", {"start": start, "stop": stop, "step": step})


def tensor_slices_node(tensors: Any) -> Node:
    """``Dataset.from_tensor_slices(tensors)``: a copy of ``tensors`` as arrays."""
    arrays = _to_arrays(tensors)
    try:
        size = structure.first_dim(arrays)
    except InvalidArgumentError as error:
        raise ValueError(f"from_tensor_slices({short(tensors)}): {error}") from None
    return Node("from_tensor_slices", {"tensors": Constant(arrays), "size": size})


def generator_node(fn: Callable[..., Any], args: Sequence[Any]) -> Node:
    """``Dataset.from_generator(fn, args)``."""
    check_callable("from_generator fn", fn)
    if not isinstance(args, tuple | list):
        raise TypeError(f"from_generator args must be a tuple or list, got {args!r}")
    return Node("from_generator", {"fn": fn, "args": Constant(tuple(args))})


def source_node(source: Any) -> Node:
    """``Dataset.from_source(source)``: any object with ``__len__`` and ``__getitem__``."""
    if not hasattr(source, "__getitem__") or not hasattr(source, "__len__"):
        raise TypeError(
            "from_source needs an object with __len__ and __getitem__, got "
            f"{type(source).__name__}"
        )
    return Node("from_source", {"source": SourceRef(source), "size": len(source)})


def list_files_node(
    pattern: str | Sequence[str], shuffle: bool, seed: int | None
) -> Node:
    """``Dataset.list_files(pattern, shuffle, seed)``: the pattern matched now."""
    files = fs.expand(pattern, "list_files pattern")
    if not isinstance(shuffle, bool):
        raise TypeError(f"list_files shuffle must be a bool, got {shuffle!r}")
    seed = check_optional_int("list_files seed", seed)
    return Node("list_files", {"files": files, "shuffle": shuffle, "seed": seed})


def zip_members(datasets: Any) -> tuple[list[str] | None, list[Any]]:
    """``Dataset.zip``'s keys (None for a tuple or list) and members, in order."""
    if isinstance(datasets, Mapping):
        if not all(isinstance(k, str) for k in datasets):
            raise TypeError(f"zip dict keys must be str, got {list(datasets)!r}")
        return list(datasets), list(datasets.values())
    if isinstance(datasets, tuple | list):
        return None, list(datasets)
    raise TypeError(f"zip takes a tuple or dict of datasets, got {datasets!r}")


def _to_arrays(tensors: Any) -> Any:
    """Tuples and dicts stay structures; every other value becomes an array."""
    if isinstance(tensors, tuple):
        if not tensors:
            raise ValueError("from_tensor_slices needs at least one component, got ()")
        return tuple(_to_arrays(t) for t in tensors)
    if isinstance(tensors, dict):
        if not tensors:
            raise ValueError("from_tensor_slices needs at least one component, got {}")
        return {key: _to_arrays(value) for key, value in tensors.items()}
    try:
        array = np.array(tensors)  # a copy: later changes to ``tensors`` don't leak in
    except ValueError as error:
        raise ValueError(f"from_tensor_slices({short(tensors)}): {error}") from None
    if array.dtype == object:
        raise ValueError(
            f"from_tensor_slices({short(tensors)}): cannot make a numpy array of it "
            "(ragged or mixed values?)"
        )
    if array.ndim == 0:
        raise ValueError(
            f"from_tensor_slices({short(tensors)}): a scalar has no first dimension to slice"
        )
    return array


# ---------------------------------------------------------------- transformations


def map_node(
    node: Node,
    fn: Callable[..., Any],
    num_parallel_calls: int | None,
    deterministic: bool | None,
    vectorized: bool = False,
) -> Node:
    """``Dataset.map(fn, num_parallel_calls, deterministic, vectorized)`` of ``node``.

    ``vectorized`` is kept only when True: other maps' pipelines (their bytes,
    their fingerprints) are those of releases without it.
    """
    args = {
        "fn": check_callable("map fn", fn),
        "num_parallel_calls": _parallelism(
            "map num_parallel_calls", num_parallel_calls
        ),
        "deterministic": check_optional_bool("map deterministic", deterministic),
    }
    if check_optional_bool("map vectorized", vectorized):
        args["vectorized"] = True
    return Node("map", args, (node,))


def ignore_errors_node(node: Node, log_warning: bool) -> Node:
    """``Dataset.ignore_errors(log_warning)`` of ``node``."""
    if not isinstance(log_warning, bool):
        raise TypeError(
            f"ignore_errors log_warning must be a bool, got {log_warning!r}"
        )
    return Node("ignore_errors", {"log_warning": log_warning}, (node,))


def batch_node(node: Node, batch_size: int, drop_remainder: bool) -> Node:
    """``Dataset.batch(batch_size, drop_remainder)`` of ``node``."""
    if not isinstance(drop_remainder, bool):
        raise TypeError(f"batch drop_remainder must be a bool, got {drop_remainder!r}")
    args = {
        "batch_size": check_int("batch_size", batch_size, minimum=1),
        "drop_remainder": drop_remainder,
    }
    return Node("batch", args, (node,))


def shuffle_node(
    node: Node, buffer_size: int, seed: int | None, reshuffle_each_iteration: bool
) -> Node:
    """``Dataset.shuffle(buffer_size, seed, reshuffle_each_iteration)`` of ``node``."""
    if not isinstance(reshuffle_each_iteration, bool):
        raise TypeError(
            "shuffle reshuffle_each_iteration must be a bool, got "
            f"{reshuffle_each_iteration!r}"
        )
    args = {
        "buffer_size": check_int("shuffle buffer_size", buffer_size, minimum=1),
        "seed": check_optional_int("shuffle seed", seed, minimum=0),
        "reshuffle_each_iteration": reshuffle_each_iteration,
    }
    return Node("shuffle", args, (node,))


def shard_node(node: Node, num_shards: int, index: int) -> Node:
    """``Dataset.shard(num_shards, index)`` of ``node``; either may be ``SHARD_HINT``."""
    hint = (SHARD_HINT,)
    num_shards = check_int("shard num_shards", num_shards, minimum=1, also=hint)
    index = check_int("shard index", index, minimum=0, also=hint)
    if SHARD_HINT not in (num_shards, index) and index >= num_shards:
        raise ValueError(f"shard index must be < num_shards={num_shards}, got {index}")
    return Node("shard", {"num_shards": num_shards, "index": index}, (node,))


def interleave_node(
    node: Node,
    fn: Callable[..., Any],
    cycle_length: int | None,
    block_length: int,
    num_parallel_calls: int | None,
    deterministic: bool | None,
) -> Node:
    """``Dataset.interleave(…)`` of ``node``; no ``cycle_length`` is ``AUTOTUNE``."""
    cycle = AUTOTUNE if cycle_length is None else cycle_length
    args = {
        "fn": check_callable("interleave fn", fn),
        "cycle_length": check_int(
            "interleave cycle_length", cycle, 1, also=(AUTOTUNE,)
        ),
        "block_length": check_int("interleave block_length", block_length, minimum=1),
        "num_parallel_calls": _parallelism(
            "interleave num_parallel_calls", num_parallel_calls
        ),
        "deterministic": check_optional_bool("interleave deterministic", deterministic),
    }
    return Node("interleave", args, (node,))


def concatenate_node(node: Node, other: Node) -> Node:
    """``Dataset.concatenate`` of ``node`` and ``other``: their elements compatible."""
    mine, theirs = element_spec(node), element_spec(other)
    if (
        mine is not None
        and theirs is not None
        and structure.common_spec(mine, theirs) is None
    ):
        raise TypeError(
            f"cannot concatenate datasets with incompatible elements: {mine} vs {theirs}"
        )
    return Node("concatenate", {}, (node, other))


def prefetch_node(node: Node, buffer_size: int) -> Node:
    """``Dataset.prefetch(buffer_size)`` of ``node``."""
    size = check_int("prefetch buffer_size", buffer_size, minimum=0, also=(AUTOTUNE,))
    return Node("prefetch", {"buffer_size": size}, (node,))


# ---------------------------------------------------------------- inspection


def element_spec(node: Node) -> Any:
    """The nested ``TensorSpec`` of ``node``'s elements, or None if user code decides it."""
    return _fold(node, lambda node, specs: node.definition.element_spec(node, specs))


def cardinality(node: Node) -> int:
    """How many elements ``node`` makes, or ``INFINITE_`` / ``UNKNOWN_CARDINALITY``."""
    return int(_fold(node, lambda node, ns: node.definition.cardinality(node, ns)))


def _fold(node: Node, combine: Callable[[Node, list[Any]], Any]) -> Any:
    """``combine`` applied bottom-up: to each node and its inputs' results."""
    return combine(node, [_fold(child, combine) for child in node.inputs])


def _parallelism(name: str, value: int | None) -> int | None:
    """A ``num_parallel_calls``: None, ``AUTOTUNE`` or at least 1."""
    return check_optional_int(name, value, minimum=1, also=(AUTOTUNE,))


def short(value: Any) -> str:
    """``repr(value)``, cut to 80 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
