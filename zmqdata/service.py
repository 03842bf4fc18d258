"""The tf.data-service API: servers, ``distribute`` and friends.

>>> import zmqdata as zd
>>> from zmqdata import service
>>> with service.DispatchServer() as dispatcher, service.WorkerServer(
...         service.WorkerConfig(dispatcher.target)):
...     ds = zd.Dataset.range(6).apply(
...         service.distribute("distributed_epoch", dispatcher.target))
...     sorted(int(x) for x in ds)
[0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

from zmqdata._client.advance import advance_position
from zmqdata._client.api import (
    CrossTrainerCache,
    distribute,
    from_dataset_id,
    get_status,
    register_dataset,
)
from zmqdata._client.lineage_log import LineageLog, logged_lineage
from zmqdata._client.position import merge_positions
from zmqdata._client.saves import distributed_save
from zmqdata._client.traces import share_traces, trace
from zmqdata._config import DispatcherConfig, WorkerConfig
from zmqdata._dataset.constants import SHARD_HINT
from zmqdata._dataset.lineage_records import lineage
from zmqdata._dispatcher.server import DispatchServer
from zmqdata._wire.modes import ShardingPolicy
from zmqdata._worker.server import WorkerServer

__all__ = [
    "SHARD_HINT",
    "CrossTrainerCache",
    "DispatchServer",
    "DispatcherConfig",
    "LineageLog",
    "ShardingPolicy",
    "WorkerConfig",
    "WorkerServer",
    "advance_position",
    "distribute",
    "distributed_save",
    "from_dataset_id",
    "get_status",
    "lineage",
    "logged_lineage",
    "merge_positions",
    "register_dataset",
    "share_traces",
    "trace",
]
