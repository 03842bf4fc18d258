"""Control messages of trace windows (``zmqdata trace``) and distributed saves.

Imported through ``zmqdata._wire.messages``, which encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from zmqdata._wire.messages_base import Message


@dataclass(slots=True, kw_only=True)
class StartTrace(Message):
    """Opens a trace window of ``seconds`` (``zmqdata trace``; docs/tracing.md)."""

    TYPE: ClassVar[str] = "start_trace"
    seconds: float


@dataclass(slots=True, kw_only=True)
class StartTraceReply(Message):
    TYPE: ClassVar[str] = "start_trace_reply"
    trace_id: int
    start_ns: int
    until_ns: int
    """The window, in the dispatcher's clock."""


@dataclass(slots=True, kw_only=True)
class GetTrace(Message):
    """What window ``trace_id`` holds, its spans from ``offset`` on."""

    TYPE: ClassVar[str] = "get_trace"
    trace_id: int
    offset: int = 0


@dataclass(slots=True, kw_only=True)
class GetTraceReply(Message):
    TYPE: ClassVar[str] = "get_trace_reply"
    trace_id: int
    start_ns: int
    until_ns: int
    done: bool
    """The window is over and every peer asked has reported (or is gone)."""
    peers: list[dict[str, Any]]
    """A span's peer is its index here (``_dispatcher/traces.py: Peer.as_dict``)."""
    offset: int
    spans: list[list[Any]]
    """``[peer, name, cat, tid, start_ns, end_ns(, args)]`` from ``offset`` on."""
    total: int
    """How many spans the window holds now."""
    dropped: int = 0
    """Spans the dispatcher did not keep (over its bound for a window)."""


@dataclass(slots=True, kw_only=True)
class TraceSpans(Message):
    """A peer's spans of window ``trace_id``, in the dispatcher's clock, chunked.

    From a worker (``worker_id``) or a consumer (``client_id``); ``offset``
    numbers the chunk's first span among the peer's; ``last`` ends its report.
    """

    TYPE: ClassVar[str] = "trace_spans"
    trace_id: int
    worker_id: int = 0
    client_id: int = 0
    offset: int = 0
    spans: list[list[Any]] = field(default_factory=list)
    """``[name, cat, tid, start_ns, end_ns(, args)]``."""
    last: bool = False
    threads: list[list[Any]] = field(default_factory=list)
    """With ``last``: ``[tid, name]`` of the threads the spans name."""
    dropped: int = 0
    """With ``last``: spans the peer did not keep (over its bound)."""
    clock: list[int] = field(default_factory=list)
    """``[offset_ns, rtt_ns]``: the peer's clock estimate (dispatcher minus peer)."""


@dataclass(slots=True, kw_only=True)
class StartSave(Message):
    """``distributed_save``: write dataset ``dataset_id``'s elements under ``path``.

    Idempotent: asking again for the same dataset and path finds the save.
    """

    TYPE: ClassVar[str] = "start_save"
    dataset_id: str
    path: str
    compression: str | None = None
    """``"zstd"`` or None: how chunks are written."""


@dataclass(slots=True, kw_only=True)
class StartSaveReply(Message):
    TYPE: ClassVar[str] = "start_save_reply"
    save_id: str


@dataclass(slots=True, kw_only=True)
class GetSaveSplit(Message):
    """A worker asks for the next split of a save, with the chunks it wrote.

    ``chunks``: ``[ordinal, name, elements, bytes, crc32]`` of each chunk
    written since its last request (committed on disk); ``failed``: why the
    worker could not write one (the save fails with it).
    """

    TYPE: ClassVar[str] = "get_save_split"
    worker_id: int
    save_id: str
    chunks: list[list[Any]] = field(default_factory=list)
    failed: str = ""


@dataclass(slots=True, kw_only=True)
class GetSaveSplitReply(Message):
    """The next split of a save to write, if any.

    ``split``: ``[ordinal, lo, hi]``, to write as one chunk; empty: none now
    (ask again), or none ever again with ``done`` (the save ended).
    """

    TYPE: ClassVar[str] = "get_save_split_reply"
    split: list[int] = field(default_factory=list)
    done: bool = False
