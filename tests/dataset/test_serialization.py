"""Pipelines survive serialize → bytes → deserialize, here and in a fresh process."""

import functools
import subprocess
import sys

import msgpack
import numpy as np
import pytest

import zmqdata as zd
from zmqdata._dataset import graph
from zmqdata.errors import InvalidArgumentError


def roundtrip(ds: zd.Dataset) -> zd.Dataset:
    return zd.Dataset(graph.deserialize(graph.serialize(ds._node)))


def as_bytes(ds: zd.Dataset) -> list:
    return [repr(e) for e in ds]


OFFSET = 100


def add_offset(x):
    return x + OFFSET


PIPELINES = {
    "range": lambda: zd.Dataset.range(3, 20, 4),
    "slices": lambda: zd.Dataset.from_tensor_slices(
        {"img": np.arange(24, dtype=np.float32).reshape(6, 2, 2), "y": np.arange(6)}
    ),
    "tensors": lambda: zd.Dataset.from_tensors(
        (np.ones(3, np.int8), "txt", b"raw", 2.5)
    ),
    "generator": lambda: zd.Dataset.from_generator(lambda n: iter(range(n)), args=(4,)),
    "zip": lambda: zd.Dataset.zip({"a": zd.Dataset.range(3), "b": zd.Dataset.range(9)}),
    "map": lambda: zd.Dataset.range(5).map(add_offset, num_parallel_calls=2),
    "filter": lambda: zd.Dataset.range(9).filter(lambda x: x % 3 == 0),
    "batch": lambda: (
        zd.Dataset.range(7).batch(3).unbatch().batch(2, drop_remainder=True)
    ),
    "shuffle": lambda: zd.Dataset.range(20).shuffle(8, seed=3),
    "repeat_take_skip": lambda: zd.Dataset.range(4).repeat(3).skip(2).take(7),
    "shard": lambda: zd.Dataset.range(10).shard(3, 2),
    "interleave": lambda: zd.Dataset.range(1, 4).interleave(
        lambda x: zd.Dataset.from_tensors(x).repeat(x), cycle_length=2, block_length=2
    ),
    "flat_map_enumerate": lambda: (
        zd.Dataset.range(3).flat_map(lambda x: zd.Dataset.range(x)).enumerate(5)
    ),
    "concatenate_prefetch": lambda: (
        zd.Dataset.range(2).concatenate(zd.Dataset.range(7, 9)).prefetch(1)
    ),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_op_roundtrips(name):
    build = PIPELINES[name]
    assert as_bytes(roundtrip(build())) == as_bytes(build())


def test_closures_and_partials_travel_by_value():
    scale = np.float32(0.5)
    ds = zd.Dataset.range(4).map(lambda x: x * scale).map(functools.partial(np.add, 1))
    assert [float(x) for x in roundtrip(ds)] == [1.0, 1.5, 2.0, 2.5]


def test_equal_pipelines_have_equal_fingerprints():
    def build(k):
        return zd.Dataset.range(10).map(lambda x: x + k).batch(2)

    a, b, c = (graph.serialize(build(k)._node) for k in (1, 1, 2))
    assert graph.fingerprint(a) == graph.fingerprint(b)
    assert graph.fingerprint(a) != graph.fingerprint(c)
    assert graph.fingerprint(a) != graph.fingerprint(
        graph.serialize(build(1).take(3)._node)
    )


def test_pipeline_runs_identically_in_a_fresh_process():
    ds = (
        zd.Dataset.from_tensor_slices((np.arange(12).reshape(6, 2), np.arange(6) * 1.5))
        .map(lambda a, b: {"sum": a.sum() + b, "a": a})
        .shuffle(4, seed=11)
        .batch(4)
    )
    program = (
        "import sys, zmqdata as zd\n"
        "from zmqdata._dataset import graph\n"
        "ds = zd.Dataset(graph.deserialize(sys.stdin.buffer.read()))\n"
        "print([repr(e) for e in ds])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program],
        input=graph.serialize(ds._node),
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    assert out.strip() == repr(as_bytes(ds))


def test_loading_without_functions_keeps_them_opaque():
    data = graph.serialize(zd.Dataset.range(3).map(lambda x: x)._node)
    node = graph.deserialize(data, load_functions=False)
    assert node.op == "map"
    assert isinstance(node.args["fn"], graph.PickledFunction)
    assert node.inputs[0].args == {"start": 0, "stop": 3, "step": 1}
    assert graph.serialize(node) == data


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\xc1garbage",
        msgpack.packb({"v": 99, "root": {}}),
        msgpack.packb({"v": 1, "root": {"op": "rm -rf", "args": {}, "inputs": []}}),
        msgpack.packb({"v": 1, "root": {"op": "range", "args": 3, "inputs": []}}),
        msgpack.packb({"v": 1, "root": {"op": "map", "args": {}, "inputs": "x"}}),
        msgpack.packb([1, 2, 3]),
    ],
)
def test_malformed_pipelines_raise_invalid_argument(data):
    with pytest.raises(InvalidArgumentError):
        graph.deserialize(data)
