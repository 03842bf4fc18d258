"""Where a pipeline's time goes: per-op statistics, timed on sampled elements.

A ``Profile`` belongs to one pass of a pipeline (a worker's task). Every op
is wrapped in a thin ``_Timed`` iterator that counts its elements (bytes from
every ``BYTES_EVERY``-th). One element in ``every`` (``ZMQDATA_PROFILE_EVERY``,
default 16) is *timed*: its reader calls ``begin()`` before asking for it and
``end()`` once it has it, and while it is in flight every op times its calls
(elements so cheap that timing them would cost more than ``COST_SHARE`` of
the time are timed more rarely). An op's *own time* is a call's time less
its inputs' calls (what it spent in its own code and its user function),
counted as many times over as elements went by untimed. Ops that
run their input on threads of their own (``prefetch``, ``num_parallel_calls``)
spend the producer's time waiting for them: that is their ``waited_s``; their
threads' work is timed where it runs (a parallel ``map``'s every call, as its
``busy`` share). The reader adds its own *phases* (encoding, blocking on a
full buffer, asking for splits); what is left of the producer's wall time is
``other``. While a trace is recorded (``tracer.log`` open) every element is
timed and each op call is a span.

``ZMQDATA_PROFILE_EVERY=0`` switches profiling off: no wrapper, no timing.

>>> import zmqdata as zd
>>> from zmqdata._dataset.iterator import IterContext
>>> from zmqdata._dataset.node import make_iterator
>>> ds = zd.Dataset.range(6).map(lambda x: x * 2).batch(3)
>>> profile = Profile(ds._node, every=1)
>>> it = make_iterator(ds._node, IterContext(profile=profile))
>>> weight = profile.begin(); first = next(it); profile.end()
>>> [b.tolist() for b in (first, *it)]
[[0, 2, 4], [6, 8, 10]]
>>> [(op["op"], op["elements"]) for op in profile.as_dict(elements=2)["ops"]]
[('range', 6), ('map(<lambda>)', 6), ('batch', 2)]
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from zmqdata._dataset.block import Block
from zmqdata._dataset.iterator import DatasetIterator
from zmqdata._dataset.node import Node

DEFAULT_EVERY: Final = 16
MAX_OPS: Final = 32
"""Ops profiled at most (those nearest the output); deeper ones count for the last kept."""
BYTES_EVERY: Final = 32
"""Bytes out are measured on every this-many-th element (a power of two)."""
_NS: Final = 1e-9
TIMING_NS: Final = 1_000
"""About what timing one op's call costs, in ns (a measured order of magnitude)."""
COST_SHARE: Final = 0.005
"""Timing may take at most this share of the producer's time: tiny elements
(W1's scalars) are timed one in hundreds, not one in ``every``."""
MAX_EVERY: Final = 4096


def every() -> int:
    """One element in how many is timed (``ZMQDATA_PROFILE_EVERY``; 0: profiling off)."""
    text = os.environ.get("ZMQDATA_PROFILE_EVERY", str(DEFAULT_EVERY))
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"ZMQDATA_PROFILE_EVERY must be an integer, got {text!r}"
        ) from None
    if not 0 <= value <= 1_000_000:
        raise ValueError(f"ZMQDATA_PROFILE_EVERY must be in [0, 1000000], got {value}")
    return value


USER_FUNCTIONS: Final = ("fn", "predicate", "element_length_func")
"""The arguments of ops that hold the user's function (its name labels the op)."""


def label(node: Node) -> str:
    """An op's name in reports: ``map(load)`` (its function's name), ``range``.

    >>> import zmqdata as zd
    >>> def load(x): return x
    >>> label(zd.Dataset.range(3).map(load)._node), label(zd.Dataset.range(3)._node)
    ('map(load)', 'range')
    """
    names = [
        getattr(value, "__name__", type(value).__name__)
        for name, value in node.args.items()
        if name in USER_FUNCTIONS
    ]
    return f"{node.op}({', '.join(names)})" if names else node.op


def nbytes(element: Any) -> int:
    """The payload bytes of an element (arrays, bytes, str; scalars count 8).

    >>> nbytes((np.zeros(4, np.float32), b"ab", {"k": 1}))
    26
    """
    if isinstance(element, np.ndarray):
        return element.nbytes
    if isinstance(element, bytes | bytearray | str):
        return len(element)
    if isinstance(element, tuple | list):
        return sum(nbytes(part) for part in element)
    if isinstance(element, dict):
        return sum(nbytes(part) for part in element.values())
    return 8


def _threads_of(node: Node) -> int | None:
    """Threads an op runs its work on (``num_parallel_calls``), else None."""
    from zmqdata._dataset.ops._threads import resolve_parallelism

    parallelism = node.args.get("num_parallel_calls")
    return None if parallelism is None else resolve_parallelism(parallelism)


class OpStats:
    """One op's counters: written by the threads that run it, read by anyone."""

    __slots__ = (
        "bytes_sampled",
        "elements",
        "index",
        "label",
        "own_s",
        "profile",
        "sampled",
        "thread_s",
        "threads",
        "waited_s",
        "waits",
    )

    def __init__(self, profile: Profile, index: int, node: Node) -> None:
        self.profile = profile
        self.index = index
        self.label = label(node)
        self.threads = _threads_of(node)
        self.waits = self.threads is not None or node.op == "prefetch"
        """Whether its input runs on threads of its own, which the producer waits for."""
        self.elements = 0
        self.sampled = 0
        self.bytes_sampled = 0
        self.own_s = 0.0
        """Time in this op's own code, on any thread."""
        self.thread_s = 0.0
        """The part of ``own_s`` on threads other than the producer's."""
        self.waited_s = 0.0
        """Time the producer waited in this op for its threads."""

    def sample_bytes(self, element: Any) -> None:
        self.sampled += 1
        self.bytes_sampled += nbytes(element)

    def add(self, seconds: float) -> None:
        """Charges ``seconds`` of this op's own calls, on the calling thread."""
        profile = self.profile
        if threading.get_ident() != profile.producer:
            self.own_s += seconds
            self.thread_s += seconds
        elif self.waits:
            self.waited_s += seconds
            profile.producer_s += seconds
        else:
            self.own_s += seconds
            profile.producer_s += seconds

    def as_dict(self, elapsed_s: float) -> dict[str, Any]:
        mean = self.bytes_sampled / self.sampled if self.sampled else 0.0
        busy = None
        if self.threads:
            busy = min(1.0, self.thread_s / (self.threads * elapsed_s or 1.0))
        return {
            "op": self.label,
            "index": self.index,
            "own_s": round(self.own_s, 4),
            "waited_s": round(self.waited_s, 4),
            "thread_s": round(self.thread_s, 4),
            "elements": self.elements,
            "bytes": int(mean * self.elements),
            "threads": self.threads,
            "busy": None if busy is None else round(busy, 3),
        }


class Profile:
    """Per-op statistics of one pass over the pipeline rooted at ``root``.

    ``ops`` are listed source first. The pass's iterators join it when built
    with ``IterContext(profile=...)``. Its reader, on the producer thread,
    brackets each timed element with ``begin()`` and ``end()`` (``timed()``
    says which) and counts the last op's elements itself (``as_dict``).
    With a ``tracer`` whose ``log`` is open (``_runtime/spans.py``), every
    element is timed and each op call recorded as a span.
    """

    def __init__(self, root: Node, every: int = DEFAULT_EVERY) -> None:
        if every < 1:
            raise ValueError(f"Profile every must be >= 1, got {every!r}")
        # A worker's own ops (``split_runs``) are not the user's: their time
        # is their parent's.
        nodes = [n for n in root.walk() if n is root or not n.definition.runs_splits][
            :MAX_OPS
        ]
        self._by_node = {id(node): OpStats(self, 0, node) for node in nodes}
        ordered = [self._by_node[id(node)] for node in reversed(nodes)]
        for index, stats in enumerate(ordered):
            stats.index = index
        self.ops = ordered
        self.root = self._by_node[id(root)]
        self._every = self.every = every
        self.weight = every
        self._timing_ns = TIMING_NS * (1 + len(ordered))
        """About what timing one element costs (more ops, more calls timed)."""
        """How many elements the one being timed stands for."""
        self.timing = False
        """An element is being timed: every op times its calls."""
        self.local = threading.local()
        """Per thread: the time of the inner calls of the call being timed."""
        self.producer: int | None = None
        self.producer_s = 0.0
        """The producer's time in ops and phases (what ``other`` is not)."""
        self.phases: dict[str, float] = {}
        self.tracer: Any = None
        self._countdown = 1
        self._begun = 0
        self._started = time.perf_counter()
        self._ended: float | None = None

    def wrap(self, node: Node, iterator: DatasetIterator) -> DatasetIterator:
        """``iterator``, timed and counted (the root is timed by its reader)."""
        stats = self._by_node.get(id(node))
        if stats is None or stats is self.root:  # an inner pipeline: its op's time
            return iterator
        return _Timed(iterator, stats)

    def busy(self, node: Node, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` timed at every call: the work of an op's thread pool."""
        stats = self._by_node.get(id(node))
        if stats is None:
            return fn

        def timed(*args: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:  # on a pool thread: the op's own time, off the producer
                stats.add((time.perf_counter_ns() - start) * _NS)

        return timed

    def timed(self) -> bool:
        """Counts one element to come; whether it is timed (then it has begun).

        A reader may count for itself instead, calling ``begin()`` when its
        count runs out.
        """
        self._countdown -= 1
        if self._countdown:
            return False
        self._countdown = self.begin()
        return True

    def begin(self) -> int:
        """The producer starts asking for an element to time.

        Returns how many elements it stands for: the count to the next one
        (every element while a trace is recorded).
        """
        tracing = self.tracer is not None and self.tracer.log is not None
        self.weight = 1 if tracing else self.every
        if self.producer is None:
            self.producer = threading.get_ident()
        self.local.inner = 0
        self.timing = True
        self._begun = time.perf_counter_ns()
        return self.weight

    def end(self) -> None:
        """The producer has the element: what its last op took, less its inputs.

        Elements much cheaper than timing one are timed more rarely: at most
        ``COST_SHARE`` of the producer's time goes to timing.
        """
        now = time.perf_counter_ns()
        took = now - self._begun
        self.timing = False
        self.root.add((took - self.local.inner) * _NS * self.weight)
        self.span(self.root.label, self._begun, now)
        self.local.inner = 0
        rarest = self._timing_ns / (COST_SHARE * max(1, took))
        self.every = max(self._every, min(MAX_EVERY, int(rarest)))

    def phase(self, name: str, took_ns: int) -> None:
        """Charges the producer's ``took_ns`` (of a timed element) to phase ``name``."""
        seconds = took_ns * _NS * self.weight
        self.phases[name] = self.phases.get(name, 0.0) + seconds
        self.producer_s += seconds
        now = time.perf_counter_ns()
        self.span(name, now - took_ns, now)

    def span(self, name: str, start_ns: int, end_ns: int) -> None:
        """Records a span if a trace is being recorded."""
        tracer = self.tracer
        if tracer is not None and tracer.log is not None:
            tracer.log.add(name, "op", start_ns, end_ns)

    def inner(self, took_ns: int) -> None:
        """Time within the op call being timed that is not the op's (a phase)."""
        self.local.inner = getattr(self.local, "inner", 0) + took_ns

    def finish(self) -> None:
        """The pass is over: its time stops."""
        self.timing = False
        self._ended = time.perf_counter()

    def as_dict(self, elements: int = 0, nbytes: int = 0) -> dict[str, Any]:
        """Ops (source first), phases and the producer's time, in seconds.

        ``elements`` and ``nbytes``: what the last op made, as its reader counted.
        """
        self.root.elements, self.root.sampled, self.root.bytes_sampled = (
            elements,
            elements,
            nbytes,
        )
        elapsed = (self._ended or time.perf_counter()) - self._started
        other = max(0.0, elapsed - self.producer_s)
        phases = {**self.phases, "other": other}
        return {
            "ops": [stats.as_dict(elapsed) for stats in self.ops],
            "phases": {name: round(s, 4) for name, s in phases.items()},
            "elapsed_s": round(max(elapsed, self.producer_s), 4),
        }


class _Timed(DatasetIterator):
    """An op's iterator, counted, and timed while its profile times an element."""

    def __init__(self, inner: DatasetIterator, stats: OpStats) -> None:
        self._inner = inner
        self._stats = stats
        self._profile = stats.profile

    @property
    def lineage(self) -> Any:
        return self._inner.lineage

    @lineage.setter
    def lineage(self, value: Any) -> None:
        self._inner.lineage = value

    def __next__(self) -> Any:
        if self._profile.timing:
            element = self._timed(next, self._inner)
        else:
            element = next(self._inner)
        stats = self._stats
        stats.elements += 1
        if not stats.elements & (BYTES_EVERY - 1):
            stats.sample_bytes(element)
        return element

    def next_block(self, limit: int) -> Block | None:
        block: Block | None
        if self._profile.timing:
            block = self._timed(self._inner.next_block, limit)
        else:
            block = self._inner.next_block(limit)
        if block is not None:
            self._stats.elements += block.n
        return block

    def _timed(self, call: Callable[..., Any], argument: Any) -> Any:
        """``call(argument)``, its time less its inputs' charged to the op."""
        profile, stats = self._profile, self._stats
        local = profile.local
        outer = getattr(local, "inner", 0)
        local.inner = 0
        start = time.perf_counter_ns()
        try:
            return call(argument)
        finally:
            end = time.perf_counter_ns()
            stats.add((end - start - local.inner) * _NS * profile.weight)
            local.inner = outer + end - start
            profile.span(stats.label, start, end)

    def get_state(self) -> dict[str, Any]:
        return self._inner.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        self._inner.set_state(state)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
