"""Helpers shared by the ``zmqdata`` commands: config loading, serving."""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

from zmqdata._runtime import yaml_config
from zmqdata.errors import ZmqDataError

logger = logging.getLogger("zmqdata.cli")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
CONFIG_ENV = "ZMQDATA_CONFIG"
DEFAULT_CONFIG = "zmqdata.yaml"
T = TypeVar("T")


def find_config(path: str | None) -> tuple[str | None, str]:
    """The config file to read and why: ``--config``, ``ZMQDATA_CONFIG``, ``./zmqdata.yaml``.

    >>> find_config("d.yaml")
    ('d.yaml', '--config')
    """
    if path is not None:
        return path, "--config"
    if os.environ.get(CONFIG_ENV):
        return os.environ[CONFIG_ENV], CONFIG_ENV
    if os.path.isfile(DEFAULT_CONFIG):
        return DEFAULT_CONFIG, f"./{DEFAULT_CONFIG}"
    return None, "no config file"


def load_deployment(path: str | None, discover: bool = False) -> yaml_config.Deployment:
    """The deployment file at ``path`` with ``ZMQDATA_<SECTION>__<FIELD>`` over it.

    With ``discover``, a missing ``path`` is looked for (``find_config``);
    the file used is logged. Bad files or variables exit 1 with one line.
    """
    source = "the command line"
    if discover:
        path, source = find_config(path)
    try:
        deployment = (
            yaml_config.Deployment() if path is None else yaml_config.load(path)
        )
        deployment = yaml_config.with_env(deployment, os.environ)
    except yaml_config.ConfigError as error:
        raise click.ClickException(str(error)) from None
    if path is not None:
        logger.info("config: %s (from %s)", os.path.abspath(path), source)
    for name in deployment.from_env:
        logger.info("config: %s set by the environment", name)
    return deployment


class SignalStop:
    """Set by a signal handler; waited on by the main thread, without a lock.

    A handler runs in the main thread between two bytecodes, maybe while the
    main thread is inside ``threading.Event.wait`` holding the event's lock:
    ``Event.set`` there would wait for that lock forever (a daemon that never
    stopped on SIGTERM, once in a fresh-clone CI run). So ``set`` only flips a
    flag, and ``wait`` naps in short steps on an event nobody sets.

    >>> stop = SignalStop()
    >>> stop.wait(0.01), stop.is_set()
    (False, False)
    >>> stop.set(); stop.wait(10.0)
    True
    """

    STEP_S = 0.05

    def __init__(self) -> None:
        self._set = False
        self._nap = threading.Event()
        """Never set: only waited on, so no handler ever takes its lock."""

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Waits until set or ``timeout`` seconds passed; whether it is set."""
        deadline = time.monotonic() + timeout
        while not self._set and (left := deadline - time.monotonic()) > 0:
            self._nap.wait(min(left, self.STEP_S))
        return self._set


@contextmanager
def stop_on_signals() -> Iterator[SignalStop]:
    """A ``SignalStop`` set by SIGINT or SIGTERM (each logged), for the ``with`` body."""
    stop = SignalStop()

    def on_signal(signum: int, frame: Any) -> None:
        logger.info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def start_server(name: str, build: Callable[[], T]) -> T:
    """``build()``, its errors turned into a one-line ``Error: ...`` exit."""
    try:
        return build()
    except click.ClickException:
        raise
    except (TypeError, ValueError) as error:
        raise click.ClickException(f"bad {name} configuration: {error}") from None
    except Exception as error:
        raise click.ClickException(f"{name} failed to start: {error}") from None


def serve(
    name: str,
    build: Callable[[], Any],
    describe: Callable[[Any], str],
    announce: Callable[[Any], None] = lambda server: None,
    ready: Callable[[Any], bool] = lambda server: True,
) -> None:
    """Builds a server, logs ``<name> ready: <address>``, serves until a signal.

    ``announce(server)`` logs more about it (addresses, hints) first; the
    ready line waits until ``ready(server)`` (a worker: registered).
    """
    role = logging.getLogger(f"zmqdata.{name}")
    with stop_on_signals() as stop:
        server = start_server(name, build)
        announce(server)
        try:
            _watch(server, stop, lambda: ready(server), every=0.05)
            if not stop.is_set():
                role.info("%s ready: %s", name, describe(server))
            _watch(server, stop, lambda: False, every=0.5)
        except ZmqDataError as error:
            server.stop()
            raise click.ClickException(f"{name} failed: {error}") from None
        role.info("%s stopping", name)
        drain = getattr(server, "drain", None)
        if drain is not None:  # a worker leaves without losing data (autoscaling)
            drain()
        server.stop()
        role.info("%s stopped", name)


def _watch(
    server: Any, stop: SignalStop, done: Callable[[], bool], every: float
) -> None:
    """Waits until ``done()`` or ``stop``; raises if a server loop died."""
    while not done() and not stop.wait(every):
        server.join(timeout=0)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (127.0.0.0/8, ::1, localhost)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(
    name: str, protocol: str, host: str, secured: bool, insecure: bool
) -> None:
    """Refuses a non-loopback TCP bind without CURVE keys unless ``--insecure``.

    Registering a dataset ships code that every worker runs, so whoever can
    reach an unauthenticated server can run code on the workers.
    """
    if secured or insecure or protocol != "tcp" or is_loopback(host):
        return
    raise click.ClickException(
        f"refusing to bind the {name} to {host} without CURVE keys: anyone who "
        "can reach it could run code on the workers; configure curve_* keys "
        "(see docs/security.md) or pass --insecure"
    )


def connectable(target: str) -> str:
    """A dispatcher target that local processes can connect to (not 0.0.0.0)."""
    return target.replace("//0.0.0.0:", "//127.0.0.1:").replace("//*:", "//127.0.0.1:")
