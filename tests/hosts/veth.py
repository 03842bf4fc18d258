"""Two hosts joined by one veth pair, whose first host's sending rate ``tc`` limits.

A ``VethPair`` is two network namespaces, ``zd-<pid>-<n>`` as in ``netns.py``
(so ``netns.remove_stale`` finds those of a run that died), joined by a veth
pair with one address each in ``10.251.<octet>.0/24``. ``limit("200mbit")``
puts a token bucket (``tc qdisc ... tbf``) on the first host's side, so what
it sends crosses a slow link; ``limit(None)`` takes it off. ``shape(host,
rate)`` does the same to any host's ``eth0`` (a ``netns.Network`` host too),
``shape_into(network, host, rate)`` to what a ``Network``'s bridge sends it.
Nothing is created in the caller's namespace.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import suppress

from tests.hosts import netns
from tests.hosts.netns import Host, Network


def tc_missing() -> str | None:
    """Why ``tc`` cannot shape a link here (None: it can)."""
    if shutil.which("tc") is None:
        return "the tc command (iproute2) is not installed"
    return None


def shape(host: Host, rate: str | None) -> None:
    """Limits what ``host`` sends on its ``eth0`` to ``rate`` (e.g. ``"100mbit"``).

    A token bucket (``tc qdisc ... tbf``); None takes it off.
    """
    shape_device(host.namespace, "eth0", rate)


def shape_into(network: Network, host: Host, rate: str | None) -> None:
    """Limits what ``network``'s bridge sends to ``host`` (all it receives) to ``rate``."""
    shape_device(*network.port(host), rate)


def shape_device(namespace: str, device: str, rate: str | None) -> None:
    """Limits what ``device`` in ``namespace`` sends to ``rate`` (None: no limit)."""
    if rate is None:
        args = ["qdisc", "del", "dev", device, "root"]
    else:
        args = ["qdisc", "replace", "dev", device, "root", "tbf", "rate", rate,
                "burst", "256kb", "latency", "20ms"]  # fmt: skip
    done = subprocess.run(
        ["tc", "-n", namespace, *args],
        capture_output=True, text=True, timeout=10, check=False,
    )  # fmt: skip
    if done.returncode != 0 and rate is not None:
        raise RuntimeError(f"tc {' '.join(args)}: {done.stderr.strip()}")


class VethPair:
    """``sender`` and ``receiver`` namespaces on one veth pair (see the module)."""

    def __init__(self) -> None:
        subnet = f"10.251.{os.getpid() % 250 + 1}"
        self._names: list[str] = []
        try:
            self.sender = self._host(f"{subnet}.1")
            self.receiver = self._host(f"{subnet}.2")
            netns.ip(
                "-n", self.sender.namespace, "link", "add", "eth0", "type", "veth",
                "peer", "name", "eth0", "netns", self.receiver.namespace,
            )  # fmt: skip
            for host in (self.sender, self.receiver):
                netns.ip("-n", host.namespace, "addr", "add", f"{host.address}/24",
                         "dev", "eth0")  # fmt: skip
                netns.ip("-n", host.namespace, "link", "set", "eth0", "up")
        except BaseException:
            self.close()
            raise

    def _host(self, address: str) -> Host:
        name = f"{netns.PREFIX}{os.getpid()}-{next(netns._names)}"
        netns.ip("netns", "add", name)
        self._names.append(name)
        netns.ip("-n", name, "link", "set", "lo", "up")
        return Host(name, address)

    def limit(self, rate: str | None) -> None:
        """Limits what ``sender`` sends to ``rate`` (e.g. ``"200mbit"``); None: no limit."""
        shape(self.sender, rate)

    def close(self) -> None:
        """Deletes both namespaces (the veth pair and its qdisc go with them)."""
        for name in reversed(self._names):
            with suppress(RuntimeError):
                netns.ip("netns", "delete", name)
        self._names.clear()
