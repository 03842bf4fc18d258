"""Pipelines to bytes and back: the op tree as msgpack, user code by cloudpickle.

The format is a msgpack map ``{"v": GRAPH_VERSION, "root": node}`` where each
node is ``{"op": name, "args": {...}, "inputs": [node, ...]}``. Plain argument
values are msgpack natives. Two extension types carry the rest:

* ``Constant`` data (numpy arrays, nested structures) as the frames codec's
  ``[header, *buffers]`` (raw array bytes, no pickle);
* user functions as cloudpickle bytes. cloudpickle ships lambdas and closures
  by value and module-level functions of importable modules by reference.

Constant data is decoded with the frames codec's limits set to the bytes that
carried it: a constant never holds more memory than its share of the pipeline
bytes, so a compressed or forged constant cannot expand at a worker.

This is the only module that pickles. ``deserialize(..., load_functions=False)``
leaves functions as opaque ``PickledFunction`` bytes and constant data as
``PackedConstant`` bytes, so a dispatcher can read a pipeline's structure (its
sources and their sizes, to make splits) without running anyone's code or
decoding anyone's data.

>>> import zmqdata as zd
>>> ds = zd.Dataset.range(5).map(lambda x: x + 1)
>>> data = serialize(ds._node)
>>> [int(x) for x in zd.Dataset(deserialize(data))]
[1, 2, 3, 4, 5]
>>> fingerprint(data) == fingerprint(serialize(ds._node))
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, is_dataclass
from typing import Any

import cloudpickle
import msgpack
import numpy as np

from zmqdata._dataset import fold
from zmqdata._dataset.node import Constant, Node
from zmqdata._wire import frames
from zmqdata.errors import InvalidArgumentError

GRAPH_VERSION = 1
MAX_DEPTH = 200
"""The longest chain of ops a pipeline may have (deeper ones are refused)."""
_EXT_CONSTANT = 1
_EXT_FUNCTION = 2


@dataclass(frozen=True, slots=True)
class PickledFunction:
    """A user function not yet unpickled (``load_functions=False``)."""

    payload: bytes

    def __call__(self, *args: Any) -> Any:
        raise InvalidArgumentError("this pipeline was loaded without its functions")


@dataclass(frozen=True, slots=True)
class PackedConstant:
    """Constant data not yet decoded (``load_functions=False``): its packed frames."""

    payload: bytes

    @property
    def value(self) -> Any:
        """Refuses: the data was not loaded."""
        raise InvalidArgumentError("this pipeline was loaded without its data")


def _encode_value(value: Any) -> Any:
    if isinstance(value, PackedConstant):
        return msgpack.ExtType(_EXT_CONSTANT, value.payload)
    if isinstance(value, Constant):
        parts = [
            bytes(memoryview(part).cast("B")) for part in frames.encode([value.value])
        ]
        return msgpack.ExtType(_EXT_CONSTANT, msgpack.packb(parts))
    if isinstance(value, PickledFunction):
        return msgpack.ExtType(_EXT_FUNCTION, value.payload)
    if callable(value) or is_dataclass(value):  # a service read's ReadOptions too
        return msgpack.ExtType(_EXT_FUNCTION, cloudpickle.dumps(value))
    raise TypeError(f"cannot serialize pipeline argument {value!r}")


def _encode_node(node: Node) -> dict[str, Any]:
    return {
        "op": node.op,
        "args": node.args,
        "inputs": [_encode_node(child) for child in node.inputs],
    }


def data_bytes(node: Node) -> int:
    """The bytes of the arrays, bytes and str in the pipeline's constants.

    At most its serialized size, known without serializing it.

    >>> import numpy as np, zmqdata as zd
    >>> data_bytes(zd.Dataset.from_tensor_slices(np.zeros(10, np.int32)).map(len)._node)
    40
    """
    own = sum(
        _payload(value.value)
        for value in node.args.values()
        if isinstance(value, Constant)
    )
    return own + sum(data_bytes(child) for child in node.inputs)


def _payload(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, bytes | str):
        return len(value)
    if isinstance(value, tuple | list):
        return sum(_payload(part) for part in value)
    if isinstance(value, dict):
        return sum(_payload(part) for part in value.values())
    return 0


def serialize(node: Node) -> bytes:
    """The pipeline rooted at ``node`` as bytes."""
    try:
        data: bytes = msgpack.packb(
            {"v": GRAPH_VERSION, "root": _encode_node(node)}, default=_encode_value
        )
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"cannot serialize the pipeline: {error}") from error
    return data


def fingerprint(data: bytes) -> str:
    """A stable id of serialized pipeline bytes (equal pipelines, equal ids)."""
    return hashlib.sha256(data).hexdigest()[:32]


def data_fingerprint(node: Node) -> str | None:
    """A stable id of the data ``node`` makes; None where it cannot be serialized.

    The pipeline as each op's ``Op.identity`` says (its arguments and inputs,
    less what a restore may change: a service read counts as the dataset it
    reads, a mixture leaves out its weights and choices). A restored mixture
    checks each input against the saved one with it.

    >>> import zmqdata as zd
    >>> a, b = zd.Dataset.range(3), zd.Dataset.range(4)
    >>> data_fingerprint(a._node) == data_fingerprint(zd.Dataset.range(3)._node)
    True
    >>> data_fingerprint(a._node) == data_fingerprint(b._node)
    False
    """
    stripped = fold.fold(node, lambda n, inputs: n.definition.identity(n, inputs))
    try:
        return fingerprint(serialize(stripped))
    except Exception:  # whatever pickling the user's functions raises: unknown
        return None


def deserialize(data: bytes, *, load_functions: bool = True) -> Node:
    """Rebuilds a pipeline from ``serialize`` output.

    ``load_functions=False`` loads the structure only: functions stay
    ``PickledFunction`` bytes and constant data ``PackedConstant`` bytes.

    Raises ``InvalidArgumentError`` for malformed bytes, an unknown op, a
    pipeline deeper than ``MAX_DEPTH``, a constant that is not one value
    within its own bytes, or a function that fails to unpickle (e.g. a module
    missing on this host).
    """

    def ext_hook(code: int, payload: bytes) -> Any:
        if code == _EXT_CONSTANT:
            return (
                _decode_constant(payload) if load_functions else PackedConstant(payload)
            )
        if code == _EXT_FUNCTION:
            return (
                cloudpickle.loads(payload)
                if load_functions
                else PickledFunction(payload)
            )
        raise InvalidArgumentError(f"unknown extension type {code} in a pipeline")

    try:
        tree = msgpack.unpackb(data, ext_hook=ext_hook, strict_map_key=True)
    except InvalidArgumentError:
        raise
    except Exception as error:
        raise InvalidArgumentError(f"cannot load the pipeline: {error!r}") from error
    if not isinstance(tree, dict) or tree.get("v") != GRAPH_VERSION:
        raise InvalidArgumentError(
            f"pipeline format version {tree.get('v') if isinstance(tree, dict) else '?'} "
            f"is not {GRAPH_VERSION}"
        )
    return _decode_node(tree.get("root"))


def _decode_constant(payload: bytes) -> Constant:
    """A ``Constant`` from its frames, holding no more bytes than ``payload``."""
    parts = msgpack.unpackb(payload)
    if type(parts) is not list or not all(type(part) is bytes for part in parts):
        raise InvalidArgumentError("malformed constant in a pipeline: not frames")
    limits = frames.Limits(max_bytes=len(payload), max_decompressed=len(payload))
    elements, _ = frames.decode(parts, limits)
    if len(elements) != 1:
        raise InvalidArgumentError(
            f"malformed constant in a pipeline: {len(elements)} values, expected 1"
        )
    return Constant(elements[0])


def _decode_node(tree: Any, depth: int = 0) -> Node:
    from zmqdata._dataset.ops import OPS

    if depth >= MAX_DEPTH:
        raise InvalidArgumentError(f"pipeline nested deeper than {MAX_DEPTH} ops")
    if not isinstance(tree, dict) or not isinstance(tree.get("args"), dict):
        raise InvalidArgumentError(f"malformed pipeline node: {tree!r:.100}")
    if tree.get("op") not in OPS:
        raise InvalidArgumentError(f"unknown op {tree.get('op')!r} in a pipeline")
    inputs = tree.get("inputs")
    if not isinstance(inputs, list):
        raise InvalidArgumentError(f"malformed inputs of op {tree['op']!r}")
    return Node(
        tree["op"],
        tree["args"],
        tuple(_decode_node(child, depth + 1) for child in inputs),
    )
