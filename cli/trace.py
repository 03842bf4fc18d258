"""``zmqdata trace``: a window of spans from the whole cluster, as one trace file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from zmqdata_cli.logs import verbose_option
from zmqdata_cli.status import dispatcher_address, dispatcher_option, timeout_option

from zmqdata import service
from zmqdata._runtime.spans import MAX_SECONDS, MIN_SECONDS
from zmqdata.errors import ZmqDataError


def summary(trace: dict[str, Any], path: Path) -> str:
    """The line printed once a trace is written.

    >>> trace = {"traceEvents": [{"ph": "X", "pid": 1}, {"ph": "X", "pid": 2},
    ...                          {"ph": "M", "pid": 3}],
    ...          "metadata": {"complete": True, "peers": [{}, {}, {}]}}
    >>> summary(trace, Path("t.json"))
    'wrote 2 spans from 2 of 3 processes to t.json'
    """
    spans = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    processes = len({e["pid"] for e in spans})
    metadata = trace["metadata"]
    line = (
        f"wrote {len(spans)} spans from {processes} of "
        f"{len(metadata['peers'])} processes to {path}"
    )
    missing = [p["name"] for p in metadata["peers"] if not p.get("reported", True)]
    if not metadata.get("complete", True) and missing:
        line += f" (no spans came from: {', '.join(missing)})"
    return line


@click.command()
@verbose_option  # type: ignore[untyped-decorator]
@dispatcher_option  # type: ignore[untyped-decorator]
@click.option(
    "--seconds",
    type=click.FloatRange(MIN_SECONDS, MAX_SECONDS),
    default=10.0,
    show_default=True,
    help="How long to record.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=Path("trace.json"),
    show_default=True,
    help="The trace file to write (Chrome trace-event JSON; open it in Perfetto).",
)
@timeout_option  # type: ignore[untyped-decorator]
def trace(address: str | None, seconds: float, output: Path, timeout: float) -> None:
    """Record spans from the dispatcher, the workers and sharing trainers.

    Trainers share theirs only when they opted in (ZMQDATA_TRACE=1 or
    zmqdata.service.share_traces()). See docs/tracing.md.
    """
    target = dispatcher_address(address)
    try:
        recorded = service.trace(target, seconds, output, timeout_s=timeout)
    except (ZmqDataError, ValueError, OSError) as error:
        raise click.ClickException(str(error)) from None
    click.echo(summary(recorded, output))
