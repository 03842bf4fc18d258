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

With ``--autoscale MIN:MAX`` it starts ``workers:`` clamped to that range, then
every ``--autoscale-interval`` seconds follows the dispatcher's recommended
worker count (``zmqdata/_dispatcher/autoscale.py``) one worker at a time:
adds a worker process, or drains the newest one (SIGTERM: it leaves without
losing data, then exits), logging each decision with its reason. Each worker
child runs with ``ZMQDATA_LOG_TAG=worker-<index>``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import click
from zmqdata_cli._common import (
    SignalStop,
    connectable,
    load_deployment,
    start_server,
    stop_on_signals,
)
from zmqdata_cli.daemons import announce_dispatcher, build_dispatcher
from zmqdata_cli.lifecycle import daemon_options
from zmqdata_cli.logs import daemon_logging

from zmqdata import service
from zmqdata._dispatcher.autoscale import Autoscaler, Policy
from zmqdata._runtime import shm, threads, yaml_config
from zmqdata._runtime.clock import Backoff
from zmqdata._worker.server import DRAIN_TIMEOUT_S

logger = logging.getLogger("zmqdata.cli")

BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 30.0
STABLE_AFTER_S = 30.0  # a worker up this long has its backoff and crashes reset
CRASH_WINDOW_S = 120.0
STOP_GRACE_S = 10.0
RETIRE_GRACE_S = DRAIN_TIMEOUT_S + 5.0
"""A worker asked to drain is killed if it has not exited after this long."""


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
    retire_by: float | None = None
    """Autoscaling: draining since asked to leave; killed if still alive then."""

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
        if self.retire_by is not None:
            return
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

    def retire(self, now: float) -> None:
        """Asks the worker to drain and exit (it is not restarted)."""
        self.retire_by = now + RETIRE_GRACE_S
        self.restart_at = None
        self.terminate()

    def retired(self, now: float) -> bool:
        """Whether a retiring worker is gone (killed once past ``retire_by``)."""
        assert self.retire_by is not None
        if self.proc is None or self.proc.poll() is not None:
            return True
        if now < self.retire_by:
            return False
        logger.warning("worker %d did not drain in time; killing it", self.index)
        self.proc.kill()
        self.proc.wait()
        return True

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


def worker_env(threads_per_pool: int | None, index: int) -> dict[str, str]:
    """Worker ``index``'s environment: its log tag, and the thread variables set.

    Set before Python starts, so that numpy's BLAS never starts wider pools.
    """
    env = {**os.environ, "ZMQDATA_LOG_TAG": f"worker-{index}"}
    if threads_per_pool is not None:
        env.update(dict.fromkeys(threads.ENV_VARS, str(threads_per_pool)))
    return env


@dataclass(frozen=True)
class ScaleRange:
    """``--autoscale MIN:MAX``: how many worker processes autoscaling may run."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> ScaleRange:
        """``"1:4"`` -> ``ScaleRange(1, 4)``; a clear error for anything else.

        >>> ScaleRange.parse("1:4")
        ScaleRange(low=1, high=4)
        """
        low, sep, high = text.partition(":")
        try:
            bounds = cls(int(low), int(high)) if sep else None
        except ValueError:
            bounds = None
        if bounds is None or not 1 <= bounds.low <= bounds.high:
            raise click.BadParameter(
                f"expected MIN:MAX with 1 <= MIN <= MAX (e.g. 1:4), got {text!r}",
                param_hint="'--autoscale'",
            )
        return bounds

    def clamp(self, workers: int) -> int:
        return max(self.low, min(workers, self.high))


class _Scaler:
    """Follows the in-process dispatcher's recommended worker count.

    One step per ``interval_s``: a new worker process, or the newest worker
    asked to drain and exit. Reads ``state.autoscaler.advice``, a frozen
    value the dispatcher thread replaces whole (safe to read here).
    """

    def __init__(
        self,
        bounds: ScaleRange,
        interval_s: float,
        dispatcher: service.DispatchServer,
        new_slot: Callable[[int], _Slot],
    ) -> None:
        self.bounds, self.interval_s = bounds, interval_s
        self._dispatcher, self._new_slot = dispatcher, new_slot
        self._due = time.monotonic() + interval_s

    def step(self, slots: list[_Slot], now: float) -> None:
        """Adds or retires one worker if the recommendation says so."""
        self._forget_exited(slots, now)
        if now < self._due:
            return
        self._due = now + self.interval_s
        advice = self._dispatcher._loop.state.autoscaler.advice
        active = [s for s in slots if s.retire_by is None]
        wanted = self.bounds.clamp(advice.recommended_workers)
        if wanted > len(active):
            self._add(slots, len(active), advice.reason)
        elif wanted < len(active):
            slot = max(active, key=lambda s: s.index)
            logger.info(
                "autoscale: %d -> %d workers, draining worker %d (%s)",
                len(active),
                len(active) - 1,
                slot.index,
                advice.reason,
            )
            slot.retire(now)

    @staticmethod
    def _forget_exited(slots: list[_Slot], now: float) -> None:
        """Drops the retired workers that have drained and exited."""
        for slot in [s for s in slots if s.retire_by is not None]:
            if slot.retired(now):
                shm.sweep()
                slots.remove(slot)
                logger.info("worker %d drained and exited", slot.index)

    def _add(self, slots: list[_Slot], active: int, reason: str) -> None:
        """Starts a worker in the lowest free slot index."""
        taken = {s.index for s in slots}
        index = min(i for i in range(len(slots) + 1) if i not in taken)
        slot = self._new_slot(index)
        logger.info(
            "autoscale: %d -> %d workers, adding worker %d (%s)",
            active,
            active + 1,
            index,
            reason,
        )
        slots.append(slot)
        slot.start()


@click.command()
@click.argument("config_file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option(
    "--insecure",
    is_flag=True,
    help="Allow binding a non-loopback host without CURVE keys (docs/security.md).",
)
@click.option(
    "--autoscale",
    "scale_range",
    metavar="MIN:MAX",
    default=None,
    help="Add and drain worker processes within MIN:MAX to follow the "
    "dispatcher's recommended worker count (docs/deployment.md, Autoscaling).",
)
@click.option(
    "--autoscale-interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds between two autoscaling decisions.",
)
@click.option(
    "--autoscale-window",
    type=click.FloatRange(min=0.0),
    default=10.0,
    show_default=True,
    help="Seconds of demand and supply a scaling step looks at.",
)
@click.option(
    "--autoscale-cooldown",
    type=click.FloatRange(min=0.0),
    default=30.0,
    show_default=True,
    help="Seconds at least between two scaling steps.",
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
def up(
    config_file: str,
    insecure: bool,
    scale_range: str | None,
    autoscale_interval: float,
    autoscale_window: float,
    autoscale_cooldown: float,
    max_crashes: int,
) -> None:
    """Run a dispatcher and the file's `workers:` worker processes, supervised.

    FILE is a YAML deployment file: a `dispatcher:` section, a `worker:`
    section and `workers:`, the number of worker processes (docs/deployment.md;
    configs/local.yaml is a local one: zmqdata up configs/local.yaml).
    """
    bounds = None if scale_range is None else ScaleRange.parse(scale_range)
    deployment = load_deployment(config_file)
    config_file = os.path.abspath(config_file)
    with stop_on_signals() as stop:
        dispatcher = start_server(
            "dispatcher", lambda: build_dispatcher(deployment.dispatcher, insecure)
        )
        target = connectable(dispatcher.target)
        announce_dispatcher(dispatcher)

        def new_slot(i: int) -> _Slot:
            command = _worker_command(config_file, target, deployment, i, insecure)
            env = worker_env(worker_threads(deployment), i)
            return _Slot(i, command, max_crashes, env)

        count = deployment.workers
        scaler = None
        if bounds is not None:
            count = bounds.clamp(count)
            policy = Policy(
                autoscale_window,
                autoscale_cooldown,
                min_workers=bounds.low,
                max_workers=bounds.high,
            )
            dispatcher._loop.state.autoscaler = Autoscaler(policy)
            scaler = _Scaler(bounds, autoscale_interval, dispatcher, new_slot)
            logger.info(
                "autoscaling between %d and %d workers", bounds.low, bounds.high
            )
        slots = [new_slot(i) for i in range(count)]
        try:
            for slot in slots:
                slot.start()
            _supervise(slots, target, dispatcher, stop, scaler)
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
    stop: SignalStop,
    scaler: _Scaler | None = None,
) -> None:
    ready = False
    while not stop.wait(0.2):
        now = time.monotonic()
        for slot in slots:
            slot.check(now)
        if scaler is not None and ready:
            scaler.step(slots, now)
        if not ready:
            pids = {slot.alive_pid for slot in slots}
            if None not in pids and pids <= _registered_pids(dispatcher):
                ready = True
                logger.info(
                    "deployment ready: dispatcher %s, %d workers registered",
                    target,
                    len(slots),
                )
