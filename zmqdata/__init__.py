"""zmqdata: tf.data service for plain Python + numpy pipelines, on ZeroMQ.

>>> import zmqdata as zd
>>> [int(x) for x in zd.Dataset.range(4).map(lambda x: x * x)]
[0, 1, 4, 9]
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from zmqdata import errors, io
from zmqdata._dataset.constants import (
    AUTOTUNE,
    INFINITE_CARDINALITY,
    UNKNOWN_CARDINALITY,
)
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.node import Op
from zmqdata._dataset.ops import OPS
from zmqdata._dataset.ops.pack import packing_efficiency
from zmqdata._dataset.structure import TensorSpec
from zmqdata._version import __version__

if TYPE_CHECKING:
    from zmqdata import service

__all__ = [
    "AUTOTUNE",
    "INFINITE_CARDINALITY",
    "UNKNOWN_CARDINALITY",
    "Dataset",
    "TensorSpec",
    "__version__",
    "errors",
    "io",
    "packing_efficiency",
    "service",
]


def _service_op() -> Op:
    """The ``data_service`` op; made when a pipeline that reads the service runs."""
    from zmqdata._client.api import DataService

    return DataService()


OPS.register("data_service", _service_op)


def __getattr__(name: str) -> Any:
    """``zd.service``, imported on first use: only the service loads zmq."""
    if name == "service":
        return importlib.import_module("zmqdata.service")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
