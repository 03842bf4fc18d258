"""``LineageLog``: which elements each step of a rank took, written as it trains (opt-in).

The records of any element of a multi-rank read follow from its token
(``service.lineage``), and a rank's ``k``-th element of a read is token
``stream.token_at(r + k * R)``. So a rank's log holds, per step, one row of
two ``int64`` columns, appended to their own files: the step and how many
elements of the read the rank had consumed after it (``rank{r}.step``,
``rank{r}.consumed``; ``-1``: the read ended in that step). The read's stream, epoch and job go to
``rank{r}.streams.jsonl`` when they change (a new epoch, a restore), with
the row they start at. 16 bytes a step, no record stored; a step's records
are computed when asked for (``logged_lineage``).

Rows are written in chunks (``flush_every``) and by ``flush()``: flush when
saving a checkpoint, so that the log covers every step the checkpoint has. A
process that crashed leaves whole rows (a torn last row is cut off when the
log is opened again); a run resumed from an older checkpoint logs its steps
again, and the latest row of a step is the one that counts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Self

import numpy as np

from zmqdata._client.position import positions_in
from zmqdata._dataset.dataset import Dataset
from zmqdata._dataset.iterator import DatasetIterator
from zmqdata._dataset.lineage_records import records_at, traced
from zmqdata._dataset.validate import check_int
from zmqdata._wire import deal
from zmqdata._wire.lineage import Ranges
from zmqdata.errors import InvalidArgumentError

COLUMNS = ("step", "consumed")
"""The ``int64`` columns of a log, one file each."""
FLUSH_EVERY = 1024
"""Rows kept in memory before they are written."""
TO_THE_END = -1
"""``consumed`` of a step in which the read ended (no position to read)."""
_SEGMENT_KEYS = (
    "dataset_id", "job", "epoch", "seed", "num_consumers", "consumer_index", "stream"
)  # fmt: skip


class LineageLog:
    """One rank's per-step log of a multi-rank read, in ``directory`` (module doc).

    ``record(step, iterator)`` after each step: ``iterator`` is the one the
    trainer reads (its position holds the read's, as for ``save()``).

    >>> import tempfile, zmqdata as zd
    >>> from zmqdata import service
    >>> pipeline, folder = zd.Dataset.range(40), tempfile.mkdtemp()
    >>> with service.DispatchServer() as d, service.WorkerServer(
    ...         service.WorkerConfig(d.target)):
    ...     read = pipeline.apply(service.distribute("distributed_epoch", d.target,
    ...         job_name="log", num_consumers=1, consumer_index=0, seed=3))
    ...     it = iter(read.batch(4))
    ...     with LineageLog(folder, rank=0) as log:
    ...         for step, batch in enumerate(it):
    ...             log.record(step, it)
    >>> [element["token"] for element in logged_lineage(folder, 0, 2, pipeline)]
    [8, 9, 10, 11]
    >>> last = logged_lineage(folder, 0, 9, pipeline)  # its records are its values
    >>> [element["sources"][0]["index"] for element in last] == batch.tolist()
    True
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        rank: int,
        flush_every: int = FLUSH_EVERY,
    ) -> None:
        self.rank = check_int("rank", rank, minimum=0)
        self._every = check_int("flush_every", flush_every, minimum=1)
        self._folder = Path(directory)
        self._folder.mkdir(parents=True, exist_ok=True)
        self._rows = _cut_to_whole_rows(self._folder, self.rank)
        self._held: tuple[list[int], list[int]] = ([], [])
        """The rows not written yet: their steps, their consumed counts."""
        self._path: tuple[Any, ...] | None = None
        """Where the read's position sits in the iterator's state."""
        last = _segments(self._folder, self.rank, self._rows)[-1:]
        self._segment: dict[str, Any] | None = (
            {key: last[0][key] for key in _SEGMENT_KEYS} if last else None
        )
        """The read the last rows are of (a log opened again goes on with it)."""

    def record(self, step: int, iterator: DatasetIterator) -> None:
        """Notes that step ``step`` is done: the elements ``iterator``'s read consumed by now."""
        state = iterator.get_state()
        position = _at(state, self._path)
        if position is None:  # the first step, the state changed shape, or it ended
            found = positions_in(state)
            if len(found) > 1 or (not found and self._segment is None):
                raise InvalidArgumentError(
                    "LineageLog records one multi-rank read (distributed_epoch "
                    f"with num_consumers); this iterator holds {len(found)}"
                )
            if found:
                self._path, position = found[0]
        if position is None:  # the read ended: the step took the rest of its epoch
            consumed = TO_THE_END
        else:
            if not _same_read(position, self._segment):
                self._start_segment({key: position[key] for key in _SEGMENT_KEYS})
            consumed = position["consumed"]
        steps, counts = self._held
        steps.append(step)
        counts.append(consumed)
        if len(steps) == self._every:
            self.flush()

    def _start_segment(self, segment: dict[str, Any]) -> None:
        self.flush()
        with open(_file(self._folder, self.rank, "streams.jsonl"), "a") as out:
            out.write(json.dumps({"row": self._rows, **segment}) + "\n")
        self._segment = segment

    def flush(self) -> None:
        """Writes the rows held (call it when saving a checkpoint)."""
        if not self._held[0]:
            return
        for column, name in zip(self._held, COLUMNS, strict=True):
            with open(_file(self._folder, self.rank, name), "ab") as out:
                out.write(np.array(column, dtype="<i8").tobytes())
        self._rows += len(self._held[0])
        self._held = ([], [])

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def logged_lineage(
    directory: str | os.PathLike[str], rank: int, step: int, dataset: Dataset
) -> list[dict[str, Any]]:
    """The records of each element rank ``rank`` took in step ``step`` (its latest run).

    One dict per element, in the order taken: ``{"epoch", "token", "sources"}``
    (``token``: its position in the epoch, as ``service.lineage`` numbers
    them). ``dataset``: the pipeline before ``distribute``.
    """
    folder = Path(directory)
    steps, consumed = _columns(folder, rank)
    rows = np.flatnonzero(steps == step)
    if not len(rows):
        raise ValueError(f"step {step} of rank {rank} is not in the log at {folder}")
    row = int(rows[-1])
    segments = _segments(folder, rank, len(steps))
    at = max(i for i, s in enumerate(segments) if s["row"] <= row)
    segment = segments[at]
    first = int(consumed[row - 1]) if row > segment["row"] else 0
    out = []
    if row == segment["row"] and at and _next_epoch(segments[at - 1], segment):
        out += _elements(dataset, segments[at - 1], int(consumed[row - 1]), None)
    end = None if consumed[row] == TO_THE_END else int(consumed[row])
    return out + _elements(dataset, segment, first, end)


def _same_read(position: dict[str, Any], segment: dict[str, Any] | None) -> bool:
    """Whether ``position`` is of the read ``segment`` says.

    What changes between reads: the epoch, or (a restore) the job and stream.
    """
    return (
        segment is not None
        and position["stream"] == segment["stream"]
        and position["epoch"] == segment["epoch"]
        and position["job"] == segment["job"]
    )


def _next_epoch(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether ``after`` is the next epoch of ``before``'s read (the step spans its end)."""
    same = all(before[k] == after[k] for k in ("dataset_id", "job", "consumer_index"))
    return same and after["epoch"] == before["epoch"] + 1


def _elements(
    dataset: Dataset, segment: dict[str, Any], first: int, end: int | None
) -> list[dict[str, Any]]:
    """The records of elements ``first`` to ``end`` (None: its last) a segment's rank took."""
    epoch = traced(dataset._node, segment["seed"], segment["epoch"])
    R, r = segment["num_consumers"], segment["consumer_index"]
    stream = deal.Stream(segment["stream"][0], Ranges(segment["stream"][1:]))
    if end is None:
        end = stream.index_of(epoch.total()) // R
    ks = np.arange(first, end, dtype=np.int64)
    tokens = stream.tokens_at(r + ks * R).tolist()
    records = records_at(epoch, tokens)
    return [
        {"epoch": segment["epoch"], "token": token, "sources": found}
        for token, found in zip(tokens, records, strict=True)
    ]


def _file(folder: Path, rank: int, name: str) -> Path:
    return folder / f"rank{rank}.{name}"


def _columns(folder: Path, rank: int) -> list[np.ndarray]:
    """The log's columns, cut to the rows every column has."""
    columns = []
    for name in COLUMNS:
        path = _file(folder, rank, name)
        data = path.read_bytes() if path.exists() else b""
        columns.append(np.frombuffer(data[: len(data) // 8 * 8], dtype="<i8"))
    rows = min(len(c) for c in columns)
    return [c[:rows] for c in columns]


def _cut_to_whole_rows(folder: Path, rank: int) -> int:
    """Cuts every column file to the rows all of them hold; returns how many."""
    rows = len(_columns(folder, rank)[0])
    for name in COLUMNS:
        path = _file(folder, rank, name)
        if path.exists():
            os.truncate(path, rows * 8)
    return rows


def _segments(folder: Path, rank: int, rows: int) -> list[dict[str, Any]]:
    """The streams lines that hold for the log's rows, in row order.

    A line at row ``n`` ends those at ``n`` or later (a process that crashed
    before writing their rows, or a run that started again there).
    """
    segments: list[dict[str, Any]] = []
    path = _file(folder, rank, "streams.jsonl")
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        try:
            segment = json.loads(line)
        except json.JSONDecodeError:
            continue  # a torn last line
        while segments and segments[-1]["row"] >= segment["row"]:
            segments.pop()
        if segment["row"] < rows:
            segments.append(segment)
    return segments


def _at(state: Any, path: tuple[Any, ...] | None) -> Any:
    """The value at ``path`` in ``state`` if it is a multi-rank position, else None."""
    if path is None:
        return None
    try:
        for key in path:
            state = state[key]
    except (KeyError, IndexError, TypeError):
        return None
    return state if deal.is_position(state) else None
