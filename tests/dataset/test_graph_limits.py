"""Pipelines from untrusted bytes: nesting depth and constants are bounded."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest

import zmqdata as zd
from zmqdata._dataset import graph
from zmqdata.errors import InvalidArgumentError


def test_pipelines_deeper_than_the_limit_are_refused_before_recursing():
    node = {"op": "range", "args": {"start": 0, "stop": 3, "step": 1}, "inputs": []}
    for _ in range(graph.MAX_DEPTH):
        node = {"op": "repeat", "args": {"count": 2}, "inputs": [node]}
    data = msgpack.packb({"v": 1, "root": node})
    with pytest.raises(InvalidArgumentError, match="deeper than 200 ops"):
        graph.deserialize(data, load_functions=False)
    shallower = msgpack.packb({"v": 1, "root": node["inputs"][0]})
    assert zd.Dataset(graph.deserialize(shallower)).cardinality() == 3 * 2 ** (
        graph.MAX_DEPTH - 1
    )


def test_constants_cannot_expand_past_their_bytes():
    data = graph.serialize(zd.Dataset.from_tensors(np.arange(10))._node)
    node = graph.deserialize(data)
    np.testing.assert_array_equal(node.args["tensors"].value, np.arange(10))
    frames = [
        msgpack.packb({"v": 1, "n": 2, "m": {}, "r": [["v", "int", [1]]] * 2, "b": []})
    ]
    tensors = msgpack.ExtType(1, msgpack.packb(frames))
    root = {"op": "from_tensors", "args": {"tensors": tensors}, "inputs": []}
    with pytest.raises(InvalidArgumentError, match="2 values, expected 1"):
        graph.deserialize(msgpack.packb({"v": 1, "root": root}))
    tensors = msgpack.ExtType(1, msgpack.packb({"not": "frames"}))
    root["args"] = {"tensors": tensors}
    with pytest.raises(InvalidArgumentError, match="not frames"):
        graph.deserialize(msgpack.packb({"v": 1, "root": root}))


def test_loading_the_structure_leaves_constants_packed():
    ds = zd.Dataset.from_tensor_slices(np.arange(10)).map(lambda x: x)
    data = graph.serialize(ds._node)
    node = graph.deserialize(data, load_functions=False)
    packed = node.inputs[0].args["tensors"]
    assert isinstance(packed, graph.PackedConstant)
    with pytest.raises(InvalidArgumentError, match="without its data"):
        packed.value  # noqa: B018
    assert zd.Dataset(node).cardinality() == 10
    assert graph.serialize(node) == data
