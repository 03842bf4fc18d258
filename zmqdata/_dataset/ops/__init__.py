"""Op definitions, one module per family, and the registry by op name.

An op defined above this layer (the service reader, ``data_service``, lives in
``_client``) is registered as a loader by the package that wires the layers
together (``zmqdata/__init__.py``), and made on first use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from zmqdata._dataset.node import Op
from zmqdata._dataset.ops.batch import Batch, Unbatch
from zmqdata._dataset.ops.bucket import BucketBySequenceLength
from zmqdata._dataset.ops.cache import Cache, Snapshot
from zmqdata._dataset.ops.combine import Concatenate, Enumerate, Zip
from zmqdata._dataset.ops.interleave import Interleave
from zmqdata._dataset.ops.map import Filter, IgnoreErrors, Map
from zmqdata._dataset.ops.mix import ChooseFromDatasets, SampleFromDatasets
from zmqdata._dataset.ops.pack import Pack
from zmqdata._dataset.ops.padding import PaddedBatch
from zmqdata._dataset.ops.prefetch import Prefetch
from zmqdata._dataset.ops.repeat import Repeat
from zmqdata._dataset.ops.shuffle import Shuffle
from zmqdata._dataset.ops.source import (
    FromGenerator,
    FromSource,
    FromTensors,
    FromTensorSlices,
    ListFiles,
    Range,
    SplittableSource,
)
from zmqdata._dataset.ops.split_runs import SplitRuns
from zmqdata._dataset.ops.take_skip import Shard, Skip, Take


class Registry(Mapping[str, Op]):
    """Op singletons by name; an op may be registered as a loader instead.

    >>> registry = Registry([Range()])
    >>> registry.register("skip", Skip)
    >>> "skip" in registry, registry["skip"].name, sorted(registry)
    (True, 'skip', ['range', 'skip'])
    """

    def __init__(self, ops: Iterable[Op]) -> None:
        self._ops = {op.name: op for op in ops}
        self._loaders: dict[str, Callable[[], Op]] = {}

    def register(self, name: str, load: Callable[[], Op]) -> None:
        """Adds the op ``name``, which ``load()`` makes when it is first looked up."""
        self._loaders[name] = load

    def __getitem__(self, name: str) -> Op:
        op = self._ops.get(name)
        if op is None:
            op = self._ops.setdefault(name, self._loaders[name]())
        return op

    def __contains__(self, name: object) -> bool:
        return name in self._ops or name in self._loaders

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops.keys() | self._loaders.keys())

    def __len__(self) -> int:
        return len(self._ops.keys() | self._loaders.keys())


OPS: Final = Registry(
    (
        Range(),
        FromTensorSlices(),
        FromTensors(),
        FromGenerator(),
        FromSource(),
        ListFiles(),
        Zip(),
        Map(),
        Filter(),
        IgnoreErrors(),
        Batch(),
        Unbatch(),
        PaddedBatch(),
        BucketBySequenceLength(),
        Pack(),
        Shuffle(),
        Repeat(),
        Take(),
        Skip(),
        Shard(),
        Interleave(),
        Concatenate(),
        Enumerate(),
        SampleFromDatasets(),
        ChooseFromDatasets(),
        Prefetch(),
        SplitRuns(),
        Cache(),
        Snapshot(),
    )
)


def _tfrecord() -> Op:
    from zmqdata._dataset.ops.tfrecord import TFRecord

    return TFRecord()


def _parquet() -> Op:
    from zmqdata._dataset.ops.parquet import Parquet

    return Parquet()


def _webdataset() -> Op:
    from zmqdata._dataset.ops.webdataset import WebDataset

    return WebDataset()


def _load() -> Op:
    from zmqdata._dataset.ops.load import Load

    return Load()


# The file readers load on first use (pyarrow only where Parquet is read).
OPS.register("tfrecord", _tfrecord)
OPS.register("parquet", _parquet)
OPS.register("webdataset", _webdataset)
OPS.register("load", _load)

__all__ = ["OPS", "Registry", "SplittableSource"]
