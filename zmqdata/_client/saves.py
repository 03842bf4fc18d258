"""``distributed_save``: the workers write a dataset's elements once, under a path.

The dispatcher hands the dataset's splits to the workers, which write each as
one checksummed chunk under ``path/chunks/``; it journals every chunk
committed, so a save goes on through worker loss and a fault-tolerant
dispatcher's restart, and writes ``path/manifest.json`` once every split has
its chunk. ``Dataset.load(path)`` reads the result (docs/snapshots.md; the
format: docs/formats.md).

>>> import tempfile, zmqdata as zd
>>> from zmqdata import service
>>> folder = tempfile.mkdtemp()
>>> with service.DispatchServer() as dispatcher, service.WorkerServer(
...         service.WorkerConfig(dispatcher.target)):
...     ds = zd.Dataset.range(10).map(lambda x: x * x)
...     service.distributed_save(ds, folder, dispatcher.target, wait=True)
>>> sorted(int(x) for x in zd.Dataset.load(folder))
[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
"""

from __future__ import annotations

from typing import Any

from zmqdata._client import rpc, settings
from zmqdata._client.api import get_status, register_dataset
from zmqdata._dataset import snapshot
from zmqdata._dataset.dataset import Dataset
from zmqdata._runtime import clock
from zmqdata._wire import messages as m
from zmqdata._wire.address import dispatcher_target
from zmqdata.errors import FailedPreconditionError

POLL_S = 0.2
"""How often ``wait=True`` asks the dispatcher how the save goes."""
COMPRESSIONS = ("AUTO", "zstd", None)


def distributed_save(
    dataset: Dataset,
    path: str,
    service: Any = None,
    compression: str | None = "AUTO",
    wait: bool = False,
) -> None:
    """Has the service's workers write ``dataset``'s elements under ``path``.

    ``path``: a local folder every worker and the dispatcher can write (a
    shared file system) or an fsspec URL (``s3://``, ``gs://``, ...); it must
    not hold another save. ``compression``: ``"AUTO"`` (zstd chunks on object
    stores, raw ones on local paths: ``snapshot.resolve_compression``), ``"zstd"`` or None (raw).
    ``wait=True`` returns once the save finished, and raises
    ``FailedPreconditionError`` with the reason if it failed; ``wait=False``
    returns once the save started (``get_status()["saves"]`` shows how it
    goes). ``service=None``: ``ZMQDATA_DISPATCHER``.
    """
    target = dispatcher_target(service)
    _check(dataset, path, compression, wait)
    dataset_id = register_dataset(target, dataset, compression=None)
    request = m.StartSave(
        dataset_id=dataset_id,
        path=path,
        compression=snapshot.resolve_compression(compression, path),
    )
    timeout_s = settings.current().dispatcher_timeout_s
    save_id = rpc.call(target, request, m.StartSaveReply, timeout_s).save_id
    if wait:
        _wait_for(target, save_id, path)


def _check(dataset: Any, path: Any, compression: Any, wait: Any) -> None:
    """Raises ``TypeError`` or ``ValueError`` for an argument of the wrong kind."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a zmqdata Dataset, got {dataset!r}")
    if not isinstance(path, str) or not path:
        raise ValueError(f"path must be a non-empty str, got {path!r}")
    if compression not in COMPRESSIONS:
        raise ValueError(
            f"compression must be 'AUTO', 'zstd' or None, got {compression!r}"
        )
    if not isinstance(wait, bool):
        raise TypeError(f"wait must be a bool, got {wait!r}")


def _wait_for(target: str, save_id: str, path: str) -> None:
    """Returns once save ``save_id`` finished; raises if it failed or was forgotten."""
    while True:
        found = [s for s in get_status(target)["saves"] if s["save_id"] == save_id]
        if not found:
            raise FailedPreconditionError(
                f"the dispatcher at {target} no longer knows the save to {path!r} "
                "(restarted without --fault-tolerant?): save again"
            )
        save = found[0]
        if save["state"] == "failed":
            raise FailedPreconditionError(
                f"the save to {path!r} failed: {save['error']}"
            )
        if save["state"] == "finished":
            return
        clock.sleep(POLL_S)
