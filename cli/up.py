"""``zmqdata up FILE``: a whole deployment from one YAML file, supervised.

Runs the dispatcher in this process and ``workers:`` worker processes
(``python -m zmqdata worker --config FILE --dispatcher <address>``; worker ``i``
gets ``port + i`` and ``metrics_port + i`` when those are fixed; unless the
file sets ``worker.threads`` to a number or ``none``, each worker gets
``--threads`` its share of the usable cores, also in its thread environment
variables from its start), prints
``deployment ready: ...`` on stderr once every worker process is alive and
registered, restarts a worker that exits with exponential backoff, and on
SIGINT/SIGTERM stops the workers, then the dispatcher, and exits 0. A worker
that exits ``--max-crashes`` times in a row within ``CRASH_WINDOW_S`` stops the
whole deployment with a one-line reason and a non-zero exit.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import click
from zmqdata_cli._common import (
    connectable,
    load_deployment,
    start_server,
    stop_on_signals,
)
from zmqdata_cli.daemons import announce_dispatcher, build_dispatcher
from zmqdata_cli.lifecycle import daemon_options
from zmqdata_cli.logs import daemon_logging

from zmqdata import service
from zmqdata._runtime import shm, threads, yaml_config
from zmqdata._runtime.clock import Backoff

logger = logging.getLogger("zmqdata.cli")

BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 30.0
STABLE_AFTER_S = 30.0  # a worker up this long has its backoff and crashes reset
CRASH_WINDOW_S = 120.0
STOP_GRACE_S = 10.0


def restart_backoff() -> Backoff:
    """Delays between a worker's restarts: doubling, and jittered.

    Workers that crashed together (their dispatcher or host gone) do not all
    come back at the same moment.
    """
    return Backoff(BACKOFF_START_S, BACKOFF_MAX_S, jitter=0.5)


@dataclass
class _Slot:
    """One supervised worker process."""

    index: int
    command: list[str]
    max_crashes: int
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    backoff: Backoff = field(default_factory=restart_backoff)
    crashes: list[float] = field(default_factory=list)
    """When the worker exited, since it last ran ``STABLE_AFTER_S``."""

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command, env=self.env)
        self.started_at = time.monotonic()
        self.restart_at = None
        logger.info("worker %d started (pid %d)", self.index, self.proc.pid)

    @property
    def alive_pid(self) -> int | None:
        """The worker's pid while its process runs."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        return self.proc.pid

    def check(self, now: float) -> None:
        """Restarts the worker if it exited (after its backoff delay).

        Raises:
            click.ClickException: If it exited ``max_crashes`` times in a row
                within ``CRASH_WINDOW_S``.
        """
        if self.restart_at is not None:
            if now >= self.restart_at:
                self.start()
            return
        assert self.proc is not None
        code = self.proc.poll()
        if code is None:
            if now - self.started_at >= STABLE_AFTER_S:
                self.crashes = []
                self.backoff.reset()
            return
        shm.sweep()  # the shared-memory segments it left
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S] + [now]
        if len(self.crashes) >= self.max_crashes:
            raise click.ClickException(
                f"worker {self.index} exited {len(self.crashes)} times in a row "
                f"within {CRASH_WINDOW_S:g} s (last exit code {code}); "
                "stopping the deployment"
            )
        delay = self.backoff.next_delay()
        logger.warning(
            "worker %d exited with code %d; restarting in %.1f s",
            self.index,
            code,
            delay,
        )
        self.restart_at = now + delay

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.warning("worker %d did not stop in time; killing it", self.index)
            self.proc.kill()
            self.proc.wait()


def _worker_command(
    config_file: str,
    target: str,
    deployment: yaml_config.Deployment,
    index: int,
    insecure: bool = False,
) -> list[str]:
    command = [sys.executable, "-m", "zmqdata", "worker"]
    command += ["--config", config_file, "--dispatcher", target]
    if insecure:
        command.append("--insecure")
    # Several workers on one host cannot share a fixed port.
    for key in ("port", "metrics_port"):
        port = deployment.worker.get(key)
        if port:
            command += [f"--{key.replace('_', '-')}", str(port + index)]
    share = worker_threads(deployment)
    if share is not None and deployment.worker.get("threads", "auto") == "auto":
        command += ["--threads", str(share)]
    return command


def worker_threads(deployment: yaml_config.Deployment) -> int | None:
    """Threads per native pool of each worker.

    ``worker.threads`` if a number, else (``auto``) this host's usable cores
    divided among the workers; None for ``none``.
    """
    setting = deployment.worker.get("threads", "auto")
    return threads.share(setting, threads.usable_cores(), deployment.workers)


def worker_env(threads_per_pool: int | None) -> dict[str, str] | None:
    """The worker processes' environment, with the thread variables set.

    Set before Python starts, so that numpy's BLAS never starts wider pools.
    """
    if threads_per_pool is None:
        return None
    return {**os.environ, **dict.fromkeys(threads.ENV_VARS, str(threads_per_pool))}


@click.command()
@click.argument("config_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow binding a non-loopback host without CURVE keys (docs/security.md).",
)
@click.option(
    "--max-crashes",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help=f"Stop everything when a worker exits this many times in a row "
    f"within {CRASH_WINDOW_S:g} s.",
)
@daemon_options  # type: ignore[untyped-decorator]
@daemon_logging(tag="dispatcher", propagate=True)  # type: ignore[untyped-decorator]
def up(config_file: str, insecure: bool, max_crashes: int) -> None:
    """Run a dispatcher and the file's `workers:` worker processes, supervised."""
    deployment = load_deployment(config_file)
    config_file = os.path.abspath(config_file)
    with stop_on_signals() as stop:
        dispatcher = start_server(
            "dispatcher", lambda: build_dispatcher(deployment.dispatcher, insecure)
        )
        target = connectable(dispatcher.target)
        announce_dispatcher(dispatcher)
        slots = [
            _Slot(
                i,
                _worker_command(config_file, target, deployment, i, insecure),
                max_crashes,
                worker_env(worker_threads(deployment)),
            )
            for i in range(deployment.workers)
        ]
        try:
            for slot in slots:
                slot.start()
            _supervise(slots, target, dispatcher, stop)
        finally:
            logger.info("stopping %d workers", len(slots))
            for slot in slots:
                slot.terminate()
            deadline = time.monotonic() + STOP_GRACE_S
            for slot in slots:
                slot.wait(deadline)
            logger.info("workers stopped; stopping the dispatcher")
            dispatcher.stop()
            logger.info("deployment stopped")


def _registered_pids(dispatcher: service.DispatchServer) -> set[int]:
    """The pids of the worker processes registered with the in-process dispatcher.

    A worker registers with its process token, ``<pid>-<uuid>``. ``list()``
    copies the table in one step under the GIL, safe from the dispatcher thread.
    """
    workers = list(dispatcher._loop.state.records.workers.values())
    tokens = [worker.local_process.split("-", 1)[0] for worker in workers]
    return {int(token) for token in tokens if token.isdigit()}


def _supervise(
    slots: list[_Slot],
    target: str,
    dispatcher: service.DispatchServer,
    stop: threading.Event,
) -> None:
    ready = False
    while not stop.wait(0.2):
        now = time.monotonic()
        for slot in slots:
            slot.check(now)
        if not ready:
            pids = {slot.alive_pid for slot in slots}
            if None not in pids and pids <= _registered_pids(dispatcher):
                ready = True
                logger.info(
                    "deployment ready: dispatcher %s, %d workers registered",
                    target,
                    len(slots),
                )
