"""A service read's ``ReadOptions`` live in its ``data_service`` node, as they are.

The op's iterator reads them there; the framework adapters change a copy;
the pipeline's bytes (a spawned ``DataLoader`` worker's copy) carry them.
"""

from __future__ import annotations

from tests.client.fakes import options
from zmqdata._adapters import takes_consumers, with_consumers, with_job_name
from zmqdata._client.api import _service_dataset
from zmqdata._client.position import DealtProgress, Position, progress_for
from zmqdata._dataset import graph
from zmqdata._dataset.constants import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from zmqdata._wire.modes import ShardingPolicy

DYNAMIC = int(ShardingPolicy.DYNAMIC)


def test_the_pipeline_bytes_carry_the_options() -> None:
    read = options(processing_mode=DYNAMIC, job_name="run", seed=3)
    ds = _service_dataset(read, b"", infinite=False).map(lambda x: x + 1)
    copy = graph.deserialize(graph.serialize(ds._node))
    assert copy.inputs[0].args == {
        "options": read,
        "element_spec": b"",
        "cardinality": UNKNOWN_CARDINALITY,
    }


def test_adapters_change_a_copy_of_the_options() -> None:
    read = options(processing_mode=DYNAMIC, job_name="run")
    node = _service_dataset(read, b"", infinite=False).map(lambda x: x)._node
    assert takes_consumers(node.inputs[0])
    filled = with_consumers(node, num_consumers=4, consumer_index=1)
    got = filled.inputs[0].args["options"]
    assert (got.num_consumers, got.consumer_index, got.job_name) == (4, 1, "run")
    assert node.inputs[0].args["options"] is read  # the caller's read is untouched
    assert with_job_name(filled, "other") is filled  # named already: shared


def test_a_finite_distributed_read_with_consumers_progresses_dealt() -> None:
    dealt = options(
        processing_mode=DYNAMIC, job_name="j", num_consumers=2, consumer_index=0
    )
    assert isinstance(progress_for(dealt, UNKNOWN_CARDINALITY), DealtProgress)
    assert isinstance(progress_for(dealt, INFINITE_CARDINALITY), Position)  # rounds
    assert isinstance(progress_for(options(), UNKNOWN_CARDINALITY), Position)
    assert progress_for(dealt, UNKNOWN_CARDINALITY).lazy
    assert not progress_for(options(), UNKNOWN_CARDINALITY).lazy
