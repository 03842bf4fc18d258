"""``SaveRunner``: writes the chunks of one save (``distributed_save``) on its own thread.

The dispatcher lists the saves running in each heartbeat reply
(``tasks.SaveDef``); the control loop runs one ``SaveRunner`` per save listed
and stops it once the save is not listed any more. Its thread asks the
dispatcher for a split (``GetSaveSplit``), runs the save's pipeline over that
split alone, writes its elements as one chunk (``_dataset/snapshot.py``:
committed at once, or not at all) and reports the chunk with its next request.
A request unanswered is sent again, with the same chunks, until an answer comes
(``requests.py``): a chunk written is reported until the dispatcher has it.

If the pipeline raises or the chunk cannot be written (a full disk, no
permission), the thread tells the dispatcher why (``failed``), which fails the
save, and ends.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Generator
from typing import Any

from zmqdata._dataset import snapshot
from zmqdata._dataset.iterator import IterContext, ListSplitProvider
from zmqdata._dataset.node import Node, make_iterator
from zmqdata._dataset.ops.source import find_split_source
from zmqdata._dataset.snapshot_chunks import chunk_name
from zmqdata._runtime import auth, threads
from zmqdata._runtime.clock import Backoff
from zmqdata._wire import messages as m
from zmqdata._wire.tasks import SaveDef
from zmqdata._worker.buffer import Cancelled
from zmqdata._worker.pipelines import Pipeline
from zmqdata._worker.requests import DispatcherRequests
from zmqdata.errors import UnavailableError, ZmqDataError, from_code

logger = logging.getLogger("zmqdata.worker")

ASK_AGAIN_MAX_S = 0.2
"""A reply with no split and no end (every split is being written) is asked
again after at most this long."""


class SaveFailed(Exception):
    """A chunk could not be made: the message names it and the error."""


class _Raised(Exception):
    """The pipeline raised (its error is the cause)."""


class SaveSplits(DispatcherRequests):
    """Asks the dispatcher for the splits of one save, reporting the chunks written."""

    asked_for = "save split"

    def __init__(
        self,
        dispatcher: str,
        worker_id: int,
        save_id: str,
        stop: threading.Event,
        timeout_s: float,
        keys: auth.ClientKeys | None = None,
    ) -> None:
        super().__init__(dispatcher, stop, timeout_s, keys)
        self._worker_id, self._save_id = worker_id, save_id
        self._request_id = 0

    def ask(self, chunks: list[list[Any]], failed: str = "") -> m.GetSaveSplitReply:
        """The answer to a request reporting ``chunks`` (and ``failed``).

        The request is sent again until answered, however long the dispatcher
        is away (it may be restarting); only the stop event ends the wait.

        Raises:
            Cancelled: Stopped.
            ZmqDataError: The dispatcher refused the request (as it said).
        """
        self._request_id += 1
        request = m.GetSaveSplit(
            request_id=self._request_id,
            worker_id=self._worker_id,
            save_id=self._save_id,
            chunks=chunks,
            failed=failed,
        )
        while True:
            try:
                reply = self._call(request)
            except UnavailableError as error:
                logger.warning("save %s: %s; asking again", self._save_id, error)
                continue
            if isinstance(reply, m.Error):
                raise from_code(reply.code, reply.message)
            if not isinstance(reply, m.GetSaveSplitReply) or not _well_formed(
                reply.split
            ):
                raise UnavailableError(
                    f"malformed save split reply from {self._dispatcher}"
                )
            return reply

    def close(self) -> None:
        self._drop_socket()


class SaveRunner:
    """One save on this worker: its thread writes the chunks the dispatcher hands it."""

    thread_limit: threads.Setting = "none"
    """Its native thread pools' limit (``WorkerConfig.threads``), set before start."""

    def __init__(
        self,
        save: SaveDef,
        pipeline: Pipeline,
        worker_id: int,
        dispatcher: str,
        dispatcher_timeout_s: float,
        keys: auth.ClientKeys | None = None,
    ) -> None:
        self.save_id = save.save_id
        self.worker_id = worker_id
        """The worker id its requests carry (a worker registered again runs it anew)."""
        self._save = save
        self._pipeline = pipeline
        self._stop = threading.Event()
        self._splits = SaveSplits(
            dispatcher, worker_id, save.save_id, self._stop, dispatcher_timeout_s, keys
        )
        self._thread = threading.Thread(
            target=self._run, name=f"zmqdata-save-{save.save_id}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the thread; a chunk it was writing is dropped, not committed."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                logger.warning(
                    "save %s: pipeline did not stop in %.0f s", self.save_id, timeout_s
                )

    @property
    def running(self) -> bool:
        """Whether its thread runs (it ends once the save is done, or failed)."""
        return self._thread.is_alive()

    def _run(self) -> None:
        chunks: list[list[Any]] = []  # written, not yet acknowledged
        failed = ""
        root: Node | None = None
        wait = Backoff(0.001, ASK_AGAIN_MAX_S, jitter=0.0)
        try:
            while True:
                reply = self._splits.ask(chunks, failed)
                chunks = []
                if failed or reply.done:
                    return
                if not reply.split:
                    if self._stop.wait(wait.next_delay()):
                        return
                    continue
                wait.reset()
                try:
                    if root is None:
                        root = self._root()
                    chunks = [self._write(root, *reply.split)]
                except SaveFailed as error:
                    logger.warning("save %s failed: %s", self.save_id, error)
                    failed = str(error)
        except Cancelled:
            return
        except ZmqDataError as error:
            logger.warning("save %s: %s", self.save_id, error)
        finally:
            self._splits.close()

    def _root(self) -> Node:
        """The save's pipeline, decoded (this thread's pools limited)."""
        try:
            root = self._pipeline.root()
        except Exception as error:
            raise SaveFailed(
                f"save {self.save_id}: cannot decode the pipeline: {_text(error)}"
            ) from error
        threads.limit_producer(self.thread_limit)
        return root

    def _write(self, root: Node, ordinal: int, lo: int, hi: int) -> list[Any]:
        """Writes split ``ordinal`` (``[lo, hi)``) as one chunk; its report.

        Raises:
            Cancelled: Stopped (nothing committed).
            SaveFailed: The pipeline raised, or the chunk could not be written.
        """
        save = self._save
        name = chunk_name(ordinal)
        try:
            with (
                snapshot.ChunkWriter(save.path, name, save.compression) as writer,
                contextlib.closing(_output(root, lo, hi)) as elements,
            ):
                for element in elements:
                    if self._stop.is_set():
                        raise Cancelled
                    writer.write(element)
        except Cancelled:
            raise
        except _Raised as raised:
            raise SaveFailed(
                f"the pipeline raised {_text(raised.__cause__)} while writing chunk "
                f"{name!r} (split {ordinal}, source elements {lo} to {hi}) of the save at "
                f"{save.path}"
            ) from raised.__cause__
        except ZmqDataError as error:  # ChunkWriter's: it names the chunk and path
            raise SaveFailed(error.message) from error
        except Exception as error:
            raise SaveFailed(
                f"cannot write chunk {name!r} of the save at {save.path}: "
                f"{_text(error)}"
            ) from error
        info = writer.info
        return [ordinal, info["name"], info["elements"], info["bytes"], info["crc32"]]


def _well_formed(split: list[Any]) -> bool:
    """Whether ``split`` is ``[ordinal, lo, hi]`` (ints, ``lo <= hi``) or empty.

    >>> _well_formed([]), _well_formed([0, 5, 10]), _well_formed([0, 5, "10"])
    (True, True, False)
    """
    if not split:
        return True
    return (
        len(split) == 3
        and all(type(value) is int for value in split)
        and 0 <= split[1] <= split[2]
    )


def _output(root: Node, lo: int, hi: int) -> Generator[Any, None, None]:
    """The elements of pipeline ``root`` over source elements ``[lo, hi)`` alone.

    What the pipeline raises comes as ``_Raised``.
    """
    try:
        ctx = IterContext(find_split_source(root), ListSplitProvider([[lo, hi]]))
        iterator = make_iterator(root, ctx)
    except Exception as error:
        raise _Raised from error
    try:
        while True:
            try:
                element = next(iterator)
            except StopIteration:
                return
            except Exception as error:
                raise _Raised from error
            yield element
    finally:
        iterator.close()


def _text(error: BaseException | None) -> str:
    """``Type: message`` of ``error``."""
    return f"{type(error).__name__}: {error}"
