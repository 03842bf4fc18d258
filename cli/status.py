"""``zmqdata status``: the dispatcher's view of workers, datasets and jobs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click
from zmqdata_cli._common import SignalStop, stop_on_signals
from zmqdata_cli.daemons import DISPATCHER_ENV
from zmqdata_cli.logs import verbose_option
from zmqdata_cli.status_view import render

from zmqdata import observe, service
from zmqdata._config import LOCAL_DISPATCHER
from zmqdata.errors import PermissionDeniedError, ZmqDataError

__all__ = ["render", "status"]

CLEAR_LINE = "\x1b[K"
HOME = "\x1b[H"
CLEAR_BELOW = "\x1b[J"


dispatcher_option = click.option(
    "--dispatcher",
    "address",
    default=None,
    metavar="HOST:PORT",
    envvar=DISPATCHER_ENV,
    help=f"Dispatcher address, host:port [default: ${DISPATCHER_ENV}, else "
    f"{LOCAL_DISPATCHER}, the local dispatcher's well-known address].",
)
"""The ``--dispatcher`` option of the commands that ask a dispatcher."""
timeout_option = click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Give up on an unreachable dispatcher after this many seconds.",
)
"""The ``--timeout`` of the commands that ask a dispatcher once."""


def dispatcher_address(given: str | None) -> str:
    """The dispatcher to ask: ``--dispatcher``, else the local one.

    (The one place the commands that ask a dispatcher take their default.)
    """
    return given or LOCAL_DISPATCHER


def fetch(address: str, timeout: float) -> dict[str, Any]:
    """``service.get_status``; a bad address or a refused key exits non-zero.

    An unreachable dispatcher raises ``ZmqDataError`` (``--watch`` retries).
    """
    try:
        return service.get_status(address, timeout_s=timeout)
    except (PermissionDeniedError, ValueError) as error:
        raise click.ClickException(str(error)) from None


def snapshot(
    address: str, timeout: float, as_json: bool, job_name: str | None = None
) -> str:
    """One status, as JSON or tables; with ``job_name``, that job's diagnosis."""
    current = fetch(address, timeout)
    if job_name is not None:
        try:
            job = observe.find_job(current, job_name)
        except ValueError as error:
            raise click.ClickException(str(error)) from None
        if as_json:
            return json.dumps(job, indent=2, sort_keys=True)
        return observe.report(current, job_name)
    if as_json:
        return json.dumps(current, indent=2, sort_keys=True)
    shown: str = render(current, address)
    return shown


@click.command()
@verbose_option  # type: ignore[untyped-decorator]
@dispatcher_option
@click.option("--json", "as_json", is_flag=True, help="Print get_status() as JSON.")
@click.option(
    "--job",
    "job_name",
    default=None,
    metavar="NAME",
    help="Where this job's time goes: bottleneck, ops, ranks, workers.",
)
@click.option(
    "--watch",
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS until Ctrl-C; survives a dispatcher restart.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Give up on an unreachable dispatcher after this many seconds (per poll).",
)
def status(
    address: str | None,
    as_json: bool,
    job_name: str | None,
    watch: float | None,
    timeout: float,
) -> None:
    """Show the workers, datasets and jobs a dispatcher knows."""
    target = dispatcher_address(address)

    def show() -> str:
        return snapshot(target, timeout, as_json, job_name)

    if watch is None:
        try:
            click.echo(show())
        except ZmqDataError as error:
            raise click.ClickException(str(error)) from None
        return
    terminal = sys.stdout.isatty()
    with stop_on_signals() as stop:
        watch_loop(show, watch, stop, terminal)


def frame(body: str, every: float, terminal: bool) -> str:
    """One ``--watch`` screen: redrawn in place on a terminal, else plain text.

    >>> frame(chr(10).join("ab"), 2.0, terminal=False).splitlines()[1:]
    ['', 'a', 'b', '']
    >>> frame("a", 2.0, terminal=True).startswith(HOME)
    True
    """
    stamp = time.strftime("%H:%M:%S")
    text = f"every {every:g}s, {stamp} (Ctrl-C to stop)\n\n{body}"
    if not terminal:
        return text + "\n\n"  # snapshots separated by a blank line
    lines = (line + CLEAR_LINE for line in text.split("\n"))
    return HOME + "\n".join(lines) + "\n" + CLEAR_BELOW


def watch_loop(
    show: Callable[[], str], every: float, stop: SignalStop, terminal: bool
) -> None:
    """Prints ``show()`` every ``every`` seconds until ``stop``.

    A failed poll prints why and keeps polling.
    """
    while not stop.is_set():
        try:
            body = show()
        except ZmqDataError as error:
            body = f"dispatcher unreachable (retrying): {error}"
        click.echo(frame(body, every, terminal), nl=False)
        stop.wait(every)
