"""``zmqdata status``: the dispatcher's view of workers, datasets and jobs."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from typing import Any

import click
from zmqdata_cli._common import stop_on_signals

from zmqdata import service
from zmqdata.errors import PermissionDeniedError, UnavailableError

_WORKER_KEYS = ("worker_id", "address", "data_address", "tags", "num_tasks")


def _stats(worker: dict[str, Any]) -> dict[str, float]:
    """The numeric per-worker statistics present in a status (``stats`` or top level)."""
    found: dict[str, float] = {}
    candidates = dict(worker.get("stats") or {})
    candidates.update({k: v for k, v in worker.items() if k not in _WORKER_KEYS})
    for key, value in candidates.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            found[key] = value
    return found


def _number(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def render(status: dict[str, Any], address: str) -> str:
    """The human view of ``status``."""
    lines = [f"dispatcher {address} (zmqdata {status.get('version', '?')})"]
    workers = status.get("workers", [])
    lines.append(f"workers: {len(workers)}")
    for w in workers:
        stats = "".join(f"  {k}={_number(v)}" for k, v in sorted(_stats(w).items()))
        tags = f"  tags={','.join(w['tags'])}" if w.get("tags") else ""
        lines.append(
            f"  #{w.get('worker_id')}  {w.get('address')}  "
            f"tasks={w.get('num_tasks', 0)}{tags}{stats}"
        )
    datasets = status.get("datasets", [])
    lines.append(f"datasets: {len(datasets)}")
    for d in datasets:
        lines.append(
            f"  {d.get('dataset_id')}  fingerprint={str(d.get('fingerprint'))[:12]}  "
            f"compression={d.get('compression')}  bytes={d.get('pipeline_bytes')}"
        )
    jobs = status.get("jobs", [])
    lines.append(f"jobs: {len(jobs)}")
    for j in jobs:
        name = f" name={j['job_name']}" if j.get("job_name") else ""
        consumers = j.get("num_consumers")
        lines.append(
            f"  {j.get('job_id')}  dataset={j.get('dataset_id')}  "
            f"mode={j.get('processing_mode')}  "
            f"consumers={'-' if consumers is None else consumers}  "
            f"clients={j.get('num_clients')}  finished={j.get('finished')}{name}"
        )
    return "\n".join(lines)


@click.command()
@click.option(
    "--dispatcher",
    "address",
    required=True,
    envvar="ZMQDATA_DISPATCHER",
    help="Dispatcher address, host:port [default: $ZMQDATA_DISPATCHER].",
)
@click.option("--json", "as_json", is_flag=True, help="Print get_status() as JSON.")
@click.option(
    "--watch",
    type=click.FloatRange(min=0.1),
    default=None,
    metavar="SECONDS",
    help="Refresh every SECONDS until Ctrl-C.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Give up on an unreachable dispatcher after this many seconds.",
)
def status(address: str, as_json: bool, watch: float | None, timeout: float) -> None:
    """Show the workers, datasets and jobs a dispatcher knows."""

    def show() -> None:
        try:
            current = service.get_status(address, timeout_s=timeout)
        except (UnavailableError, PermissionDeniedError, ValueError) as error:
            raise click.ClickException(str(error)) from None
        if as_json:
            click.echo(json.dumps(current, indent=2, sort_keys=True))
        else:
            click.echo(render(current, address))

    if watch is None:
        show()
        return
    with stop_on_signals() as stop:
        _watch(show, watch, stop)


def _watch(show: Callable[[], None], every: float, stop: threading.Event) -> None:
    while not stop.is_set():
        if sys.stdout.isatty():
            click.echo("\x1b[2J\x1b[H", nl=False)  # clear the screen
        show()
        stop.wait(every)
