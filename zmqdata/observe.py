"""Where a job's time goes: a plot and a plain-text report, from one call.

Both read a dispatcher's status (``service.get_status``): pass the
dispatcher's address (or a ``DispatchServer``), or a status dict already
fetched. ``job_name=None`` picks the only job, else the busiest (most
elements per second); an unnamed job is ``"#<job_id>"``.

>>> from zmqdata import observe
>>> status = {"jobs": [{
...     "job_id": 3, "job_name": "train",
...     "ops": [{"op": "range", "index": 0, "own_s": 0.5, "share": 0.02},
...             {"op": "map(load)", "index": 1, "own_s": 15.6, "share": 0.78,
...              "threads": 4, "busy": 0.96}],
...     "phases": {"ops": 0.9, "encode": 0.06, "blocked": 0.04},
...     "bottleneck": {"kind": "input-bound", "op": "map(load)",
...                    "line": "input-bound: map(load) uses 78% of worker time"},
...     "consumers": [{"client_id": 7, "consumer_index": 0, "waited": 0.41},
...                   {"client_id": 8, "consumer_index": 1, "waited": 0.05,
...                    "straggler": True}]}]}
>>> print(observe.report(status))  # doctest: +NORMALIZE_WHITESPACE
input-bound: map(load) uses 78% of worker time
ops (own time, summed over the job's workers)
#  OP          OWN  SHARE  BUSY  THREADS  WAITED  ELEMENTS  EL/S
0  range      0.5s     2%     -        -       -         -     -
1  map(load) 15.6s    78%   96%        4       -         -     -
phases: ops 90%, encode 6%, blocked 4%
consumers
RANK  CLIENT  WAITED  EL/S  LAG
0          7     41%     -    -
1          8      5%     -    -  STRAGGLER
workers: none
>>> figure = observe.plot(status)  # a matplotlib Figure: shown by a notebook
>>> [ax.get_title() for ax in figure.axes]
['time per op (own code)', 'trainer wait by rank']
>>> figure.savefig("train.png")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zmqdata._dispatcher import job_view
from zmqdata._runtime.text import table

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure, SubFigure

PLOT_EXTRA = "pip install 'zmqdata[plot]'"
STRAGGLER_COLOR = "tab:red"
BAR_COLOR = "tab:blue"
BOTTLENECK_COLOR = "tab:orange"


def _status(service_or_status: Any) -> Mapping[str, Any]:
    """The status dict given, or the one the dispatcher at that address sends."""
    if isinstance(service_or_status, Mapping):
        return service_or_status
    from zmqdata import service

    return service.get_status(service_or_status)


def find_job(status: Mapping[str, Any], job_name: str | None = None) -> dict[str, Any]:
    """The job entry named ``job_name``; None: the only job, else the busiest.

    >>> jobs = [{"job_id": 1, "job_name": "a", "elements_per_s": 5.0},
    ...         {"job_id": 2, "job_name": None, "elements_per_s": 9.0}]
    >>> find_job({"jobs": jobs})["job_id"], find_job({"jobs": jobs}, "a")["job_id"]
    (2, 1)
    >>> find_job({"jobs": jobs}, "b")
    Traceback (most recent call last):
    ...
    ValueError: no job 'b' in the status (jobs: 'a', '#2')
    """
    if job_name is not None and not isinstance(job_name, str):
        raise TypeError(f"job_name must be a str or None, got {job_name!r}")
    found = status.get("jobs")
    jobs = [j for j in found if isinstance(j, dict)] if isinstance(found, list) else []
    if job_name is not None:
        return _named(jobs, job_name)
    if not jobs:
        raise ValueError("no jobs in the status: nothing to show")
    return max(jobs, key=_busyness)


def _named(jobs: list[dict[str, Any]], job_name: str) -> dict[str, Any]:
    """The job named ``job_name`` (``ValueError`` naming the others: none)."""
    for job in jobs:
        if job_view.job_name(job) == job_name:
            return job
    names = ", ".join(repr(job_view.job_name(job)) for job in jobs) or "none"
    raise ValueError(f"no job {job_name!r} in the status (jobs: {names})")


def _busyness(job: Mapping[str, Any]) -> tuple[float, float]:
    """How busy a job is: its elements per second, then its elements."""
    return (
        job_view.number(job.get("elements_per_s")) or 0,
        job_view.number(job.get("elements")) or 0,
    )


# ------------------------------------------------------------------ report


def _shown(value: float | None, form: str) -> str:
    """``value`` in ``form`` (a format spec with a suffix), or ``-`` if unknown.

    >>> _shown(0.415, "{:.0%}"), _shown(None, "{:.1f}s"), _shown(12.0, "{:.1f}s")
    ('42%', '-', '12.0s')
    """
    return "-" if value is None else form.format(value)


def _ops(job: Mapping[str, Any]) -> str:
    rows = [
        [
            _shown(op.index, "{}"),
            op.label,
            _shown(op.own_s, "{:.1f}s"),
            _shown(op.share, "{:.0%}"),
            _shown(op.busy, "{:.0%}"),
            _shown(op.threads, "{:.0f}"),
            _shown(op.waited_s or None, "{:.1f}s"),
            _shown(op.elements, "{:.0f}"),
            _shown(op.elements_per_s, "{:.0f}"),
        ]
        for op in job_view.ops(job)
    ]
    header = ["#", "OP", ">OWN", ">SHARE", ">BUSY", ">THREADS", ">WAITED"]
    return table(
        "ops (own time, summed over the job's workers)",
        [*header, ">ELEMENTS", ">EL/S"],
        rows,
    )


def _phases(job: Mapping[str, Any]) -> str:
    shares = job_view.phases(job)
    shown = ", ".join(f"{name} {share:.0%}" for name, share in shares.items())
    return f"phases: {shown or 'none'}"


def _consumers(job: Mapping[str, Any]) -> str:
    rows = [
        [
            _shown(c.consumer_index, "{}"),
            _shown(c.client_id, "{}"),
            _shown(c.waited, "{:.0%}"),
            _shown(c.elements_per_s, "{:.0f}"),
            _shown(c.lag, "{:.0f}"),
            "STRAGGLER" if c.straggler else "",
        ]
        for c in job_view.consumers(job)
    ]
    header = ["RANK", ">CLIENT", ">WAITED", ">EL/S", ">LAG", ""]
    return table("consumers", header, rows)


def _workers(job: Mapping[str, Any]) -> str:
    rows = [
        [
            _shown(w.worker_id, "{}"),
            w.address,
            _shown(w.elements_per_s, "{:.0f}"),
            "STRAGGLER" if w.straggler else "",
        ]
        for w in job_view.workers(job)
    ]
    return table("workers", ["ID", "ADDRESS", ">EL/S", ""], rows)


def report(service_or_status: Any, job_name: str | None = None) -> str:
    """A job's verdict line, then its ops, phases, consumers (ranks) and workers.

    Stragglers are marked ``STRAGGLER``; what the status leaves out (older
    workers) shows as ``-`` or ``none``. See the module's example.

    Args:
        service_or_status: A dispatcher address (or ``DispatchServer``), or a
            status dict from ``service.get_status``.
        job_name: The job's name (``"#<job_id>"`` for an unnamed job); None:
            the only job, else the busiest.

    Raises:
        ValueError: No such job, or no job at all.
    """
    job = find_job(_status(service_or_status), job_name)
    verdict = job_view.bottleneck(job)
    line = [verdict.line] if verdict is not None and verdict.line else []
    return "\n".join([*line, _ops(job), _phases(job), _consumers(job), _workers(job)])


# ------------------------------------------------------------------ plot


def _axes_pair(ax: Any) -> tuple[Axes, Axes] | None:
    """``ax`` as the two axes to draw on (None: make a figure)."""
    if ax is None:
        return None
    from matplotlib.axes import Axes

    try:  # a numpy array of axes (what plt.subplots returns) or a sequence
        pair = list(ax.flat) if hasattr(ax, "flat") else list(ax)
    except TypeError:
        pair = []
    if len(pair) != 2 or not all(isinstance(a, Axes) for a in pair):
        raise TypeError(f"ax must be a pair of matplotlib Axes or None, got {ax!r}")
    return pair[0], pair[1]


def _plot_ops(
    ax: Axes, job: Mapping[str, Any], verdict: job_view.Verdict | None
) -> None:
    ops = job_view.ops(job)
    ax.set_title("time per op (own code)")
    if not ops:
        ax.text(0.5, 0.5, "no per-op statistics", ha="center", transform=ax.transAxes)
        return
    shares = _shares(ops)
    colors = [
        BOTTLENECK_COLOR
        if verdict is not None and op.label == verdict.op
        else BAR_COLOR
        for op in ops
    ]
    positions = range(len(ops))
    ax.barh(positions, shares, color=colors)
    ax.set_yticks(positions, [op.label for op in ops])
    ax.invert_yaxis()  # the source on top
    ax.set_xlabel("share of the workers' pipeline time")
    ax.set_xlim(0, max(1.0, *shares) * 1.15)
    ax.xaxis.set_major_formatter("{x:.0%}")
    for position, (op, share) in enumerate(zip(ops, shares, strict=True)):
        if op.busy is not None:
            ax.annotate(
                f"busy {op.busy:.0%}",
                (share, position),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
            )


def _shares(ops: list[job_view.OpView]) -> list[float]:
    """Each op's share of the time: as reported, else from its own time."""
    total = sum(op.own_s or 0 for op in ops) or 1.0
    return [op.share if op.share is not None else (op.own_s or 0) / total for op in ops]


def _plot_consumers(ax: Axes, job: Mapping[str, Any]) -> None:
    consumers = job_view.consumers(job)
    ax.set_title("trainer wait by rank")
    if not consumers:
        ax.text(0.5, 0.5, "no consumers", ha="center", transform=ax.transAxes)
        return
    waits = [c.waited or 0 for c in consumers]
    colors = [STRAGGLER_COLOR if c.straggler else BAR_COLOR for c in consumers]
    positions = range(len(consumers))
    ax.bar(positions, waits, color=colors)
    ax.set_xticks(positions, [c.label for c in consumers])
    ax.set_xlabel("rank (client id without one)")
    ax.set_ylabel("waited for data (last minute)")
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter("{x:.0%}")
    if any(c.straggler for c in consumers):
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=STRAGGLER_COLOR, label="straggler")])


def plot(service_or_status: Any, job_name: str | None = None, ax: Any = None) -> Figure:
    """A figure of where a job's time goes: per-op time and per-rank waits.

    Left: each op's share of the workers' pipeline time in its own code
    (horizontal bars, source on top, the bottleneck op highlighted, ``busy``
    annotated on ops with threads of their own). Right: the fraction of the
    last minute each rank's trainer waited for data (stragglers in red). The
    title is the bottleneck verdict. Needs matplotlib (``zmqdata[plot]``).

    Args:
        service_or_status: A dispatcher address (or ``DispatchServer``), or a
            status dict from ``service.get_status``.
        job_name: The job's name (``"#<job_id>"`` for an unnamed job); None:
            the only job, else the busiest.
        ax: Two matplotlib ``Axes`` to draw on (ops, ranks), e.g. from
            ``plt.subplots(1, 2)``; None: a new ``Figure`` of its own.

    Returns:
        The ``matplotlib.figure.Figure`` drawn on; a notebook shows it.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: No such job, or no job at all.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"observe.plot needs matplotlib: {PLOT_EXTRA}") from None
    pair = _axes_pair(ax)
    job = find_job(_status(service_or_status), job_name)
    drawn_on: Figure | SubFigure
    if pair is None:
        drawn_on = Figure(figsize=(12, 4.5), layout="constrained")
        ops_ax, ranks_ax = drawn_on.subplots(1, 2, width_ratios=(3, 2))
    else:
        ops_ax, ranks_ax = pair
        drawn_on = ops_ax.figure  # a Figure, or a SubFigure of one
    verdict = job_view.bottleneck(job)
    _plot_ops(ops_ax, job, verdict)
    _plot_consumers(ranks_ax, job)
    name = job_view.job_name(job)
    drawn_on.suptitle(f"{name}: {verdict.line}" if verdict and verdict.line else name)
    return drawn_on if isinstance(drawn_on, Figure) else drawn_on.figure


__all__ = ["find_job", "plot", "report"]
