"""``zmqdata dispatcher`` and ``zmqdata worker``: the servers as foreground daemons.

Each reads its section of an optional ``--config`` file (flags override it),
logs one line per lifecycle event, prints ``<name> ready: <address>`` on stderr
once serving, stops cleanly on SIGINT/SIGTERM (exit 0) and exits non-zero with
a one-line reason on bad configuration.
"""

from __future__ import annotations

from typing import Any

import click
from zmqdata_cli._common import check_exposure, load_deployment, serve

from zmqdata import service
from zmqdata._dispatcher import journal
from zmqdata._runtime import threads as thread_pools
from zmqdata._runtime import yaml_config

_config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML deployment file (see docs/deployment.md).",
)
_insecure_option = click.option(
    "--insecure",
    is_flag=True,
    help="Allow binding a non-loopback host without CURVE keys (docs/security.md).",
)


@click.command()
@_config_option
@click.option("--host", default=None, help="Interface to bind [default: 127.0.0.1].")
@click.option("--port", type=int, default=None, help="Port (0: any free) [default: 0].")
@click.option("--work-dir", default=None, help="Directory for the journal.")
@click.option(
    "--fault-tolerant",
    is_flag=True,
    default=None,
    help="Journal state changes in the work dir.",
)
@click.option(
    "--repair-journal",
    is_flag=True,
    help="Cut a damaged journal back to its records before the damage (after "
    "backing the file up in the work dir), then exit; see docs/reliability.md.",
)
@_insecure_option
def dispatcher(
    config_file: str | None,
    host: str | None,
    port: int | None,
    work_dir: str | None,
    fault_tolerant: bool | None,
    repair_journal: bool,
    insecure: bool,
) -> None:
    """Run a dispatcher in the foreground."""
    section = load_deployment(config_file).dispatcher
    if repair_journal:
        directory = work_dir or section.get("work_dir")
        if not directory:
            raise click.ClickException("--repair-journal needs --work-dir")
        click.echo(journal.repair(directory), err=True)
        return

    def build() -> service.DispatchServer:
        return build_dispatcher(
            section,
            insecure,
            host=host,
            port=port,
            work_dir=work_dir,
            fault_tolerant_mode=fault_tolerant or None,
        )

    serve("dispatcher", build, lambda server: server.target)


def build_dispatcher(
    section: dict[str, Any], insecure: bool, **overrides: Any
) -> service.DispatchServer:
    """A started dispatcher for a ``dispatcher:`` section and flag overrides."""
    config = yaml_config.dispatcher_config(section, **overrides)
    check_exposure("dispatcher", config.protocol, config.host, config.secured, insecure)
    return service.DispatchServer(config)


@click.command()
@_config_option
@click.option(
    "--dispatcher",
    "dispatcher_address",
    default=None,
    help="Dispatcher address, host:port or tcp://host:port "
    "[default: worker.dispatcher_address of --config].",
)
@click.option("--host", default=None, help="Interface to bind [default: 127.0.0.1].")
@click.option(
    "--port", type=int, default=None, help="Data port (0: any free) [default: 0]."
)
@click.option(
    "--worker-address",
    default=None,
    help="host:port consumers connect to [default: the bound host and port; "
    "for --host 0.0.0.0, this host's address towards the dispatcher].",
)
@click.option("--heartbeat-interval-ms", type=int, default=None)
@click.option(
    "--metrics-port",
    type=int,
    default=None,
    help="Serve Prometheus metrics on this port (0: any free) [default: none].",
)
@click.option(
    "--threads",
    default=None,
    metavar="auto|none|N",
    help="Threads of each native pool (BLAS, OpenMP) the pipelines use: auto "
    "shares this host's cores among its workers, none leaves them alone "
    "[default: auto].",
)
@_insecure_option
def worker(
    config_file: str | None,
    dispatcher_address: str | None,
    host: str | None,
    port: int | None,
    worker_address: str | None,
    heartbeat_interval_ms: int | None,
    metrics_port: int | None,
    threads: str | None,
    insecure: bool,
) -> None:
    """Run a worker in the foreground."""
    section = load_deployment(config_file).worker

    def build() -> service.WorkerServer:
        config = yaml_config.worker_config(
            section,
            dispatcher_address=dispatcher_address,
            host=host,
            port=port,
            worker_address=worker_address,
            heartbeat_interval_ms=heartbeat_interval_ms,
            metrics_port=metrics_port,
            threads=int(threads) if threads and threads.isdigit() else threads,
        )
        protocol = config.data_transfer_protocol or config.protocol
        check_exposure("worker", protocol, config.host, config.secured, insecure)
        thread_pools.own_process(config.threads)
        return service.WorkerServer(config)

    serve("worker", build, lambda server: server.address)
