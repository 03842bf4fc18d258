"""``zmqdata dispatcher`` and ``zmqdata worker``: the servers as foreground daemons.

Each reads its section of a config file (``--config``, else ``ZMQDATA_CONFIG``,
else ``./zmqdata.yaml``), with ``ZMQDATA_<SECTION>__<FIELD>`` variables over
it and flags over those; logs one line per lifecycle event (the bound,
advertised and metrics addresses at start), logs ``<name> ready: <address>``
once serving (a worker: once registered with its dispatcher), stops cleanly on SIGINT/SIGTERM (exit 0) and exits non-zero with
a one-line reason on bad configuration.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

import click
from zmqdata_cli._common import check_exposure, load_deployment, serve
from zmqdata_cli.logs import daemon_logging

from zmqdata import service
from zmqdata._config import LOCAL_DISPATCHER, WELL_KNOWN_PORT
from zmqdata._dispatcher import journal
from zmqdata._runtime import hostaddr, tuning, yaml_config
from zmqdata._runtime import threads as thread_pools
from zmqdata.errors import UnavailableError

DISPATCHER_ENV = "ZMQDATA_DISPATCHER"
# A documentation address (RFC 5737): a UDP connect towards it picks the
# default route's source address and sends nothing.
_OUTSIDE = "tcp://192.0.2.1:9"

_config_option = click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="YAML deployment file (see docs/deployment.md) "
    "[default: $ZMQDATA_CONFIG, else ./zmqdata.yaml if present].",
)
_insecure_option = click.option(
    "--insecure",
    is_flag=True,
    help="Allow binding a non-loopback host without CURVE keys (docs/security.md).",
)


@click.command()
@_config_option
@click.option("--host", default=None, help="Interface to bind [default: 127.0.0.1].")
@click.option(
    "--port",
    type=int,
    default=None,
    help=f"Port (0: any free) [default: dispatcher.port of the config, else {WELL_KNOWN_PORT}].",
)
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
@daemon_logging()  # type: ignore[untyped-decorator]
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
    section = load_deployment(config_file, discover=True).dispatcher
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
            port=section.get("port", WELL_KNOWN_PORT) if port is None else port,
            work_dir=work_dir,
            fault_tolerant_mode=fault_tolerant or None,
        )

    serve("dispatcher", build, lambda server: server.target, announce_dispatcher)


def reachable(target: str) -> str:
    """``target`` as ``host:port`` others can dial.

    A wildcard host becomes this host's address on its default route (else
    its name).

    >>> reachable("tcp://127.0.0.1:5050"), reachable("ipc:///run/d.sock")
    ('127.0.0.1:5050', 'ipc:///run/d.sock')
    """
    if not target.startswith("tcp://"):
        return target
    try:  # a worker advertises its address the same way
        address, _ = hostaddr.advertise(target, _OUTSIDE, None)
    except UnavailableError:  # no route out
        address = f"{socket.gethostname()}:{target.rpartition(':')[2]}"
    return address


def build_dispatcher(
    section: dict[str, Any], insecure: bool, **overrides: Any
) -> service.DispatchServer:
    """A started dispatcher for a ``dispatcher:`` section and flag overrides."""
    config = yaml_config.dispatcher_config(section, **overrides)
    check_exposure("dispatcher", config.protocol, config.host, config.secured, insecure)
    tuning.serve_a_fleet()  # the process is the dispatcher's
    return service.DispatchServer(config)


@click.command()
@_config_option
@click.option(
    "--dispatcher",
    "dispatcher_address",
    default=None,
    envvar=DISPATCHER_ENV,
    help="Dispatcher address, host:port or tcp://host:port "
    f"[default: ${DISPATCHER_ENV}, else worker.dispatcher_address of the config, "
    f"else {LOCAL_DISPATCHER}].",
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
@click.option(
    "--heartbeat-interval-ms",
    type=int,
    default=None,
    help="How often the worker reports to the dispatcher, in ms "
    "[default: worker.heartbeat_interval_ms of the config, else 1000].",
)
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
@daemon_logging()  # type: ignore[untyped-decorator]
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
    section = load_deployment(config_file, discover=True).worker

    def build() -> service.WorkerServer:
        config = yaml_config.worker_config(
            section,
            dispatcher_address=dispatcher_address
            or section.get("dispatcher_address", LOCAL_DISPATCHER),
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

    serve(
        "worker",
        build,
        lambda server: server.address,
        announce_worker,
        ready=lambda server: server.registered(),
    )


def announce_dispatcher(server: service.DispatchServer) -> None:
    """Logs the metrics address and how to attach workers and trainers.

    (The dispatcher logs its bound address when it starts.)
    """
    log = logging.getLogger("zmqdata.dispatcher")
    if server.metrics_address:
        log.info("dispatcher metrics: http://%s/metrics", server.metrics_address)
    address = reachable(server.target)
    log.info(
        "attach workers with: zmqdata worker --dispatcher %s  (or %s=%s)",
        address,
        DISPATCHER_ENV,
        address,
    )
    log.info(
        'attach trainers with: service.distribute(mode, "%s")  (or %s=%s)',
        address,
        DISPATCHER_ENV,
        address,
    )


def announce_worker(server: service.WorkerServer) -> None:
    """Logs the worker's dispatcher and metrics addresses.

    (The worker logs its bound and advertised addresses when it starts, and
    ``worker ready`` once registered.)
    """
    log = logging.getLogger("zmqdata.worker")
    log.info(
        "worker started, registering with the dispatcher at %s",
        server.config.dispatcher_address,
    )
    if server.metrics_address:
        log.info("worker metrics: http://%s/metrics", server.metrics_address)
