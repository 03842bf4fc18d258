"""Hosts for the multi-host tests: Linux network namespaces on a private bridge.

A ``Network`` is a namespace holding a Linux bridge; each ``Host`` is one more
namespace joined to it by a veth pair, with ``lo`` up and one address in
``10.250.<octet>.0/24``. Nothing is created in the caller's own namespace, so
no address or route of the machine changes, and nothing a test sends can leave
the bridge. Namespaces are named ``zd-<pid>-<n>``: unique per run, and those of
a run that died are found (their pid is gone) and removed by ``remove_stale``.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
from contextlib import suppress
from dataclasses import dataclass

PREFIX = "zd-"
_STALE = re.compile(rf"^{PREFIX}(\d+)-\d+$")
_names = itertools.count()


def ip(*args: str) -> str:
    """Runs ``ip ARGS``; raises ``RuntimeError`` with its stderr if it fails."""
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=10, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> list[str]:
    """Deletes the ``zd-*`` namespaces of runs whose process is gone."""
    removed = []
    for line in ip("netns", "list").splitlines():
        name = line.split(" ", 1)[0]
        match = _STALE.match(name)
        if match and not _alive(int(match.group(1))):
            with suppress(RuntimeError):
                ip("netns", "delete", name)
                removed.append(name)
    return removed


@dataclass(frozen=True)
class Host:
    """One namespace on the network, with one address."""

    namespace: str
    address: str

    def prefix(self, **env: str) -> list[str]:
        """Runs a command in this namespace with ``env`` added (all exec).

        The command gets a ``/dev/shm`` of its own (``ip netns exec`` gives it
        a private mount namespace), as on a host of its own: zmqdata's
        same-host shared memory must not join two "hosts" here.
        """
        assignments = [f"{key}={value}" for key, value in env.items()]
        own_shm = 'mount -t tmpfs -o size=256m zd-shm /dev/shm && exec env "$@"'
        netns = ["ip", "netns", "exec", self.namespace]
        return [*netns, "sh", "-c", own_shm, "sh", *assignments]


class Network:
    """A private /24 on a bridge; ``add_host()`` joins one more namespace."""

    def __init__(self) -> None:
        self._namespaces: list[str] = []
        self.hosts: list[Host] = []
        self.subnet = f"10.250.{os.getpid() % 250 + 1}"
        try:
            self._bridge = self._namespace()
            ip("-n", self._bridge, "link", "add", "br0", "type", "bridge")
            ip("-n", self._bridge, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise

    def _namespace(self) -> str:
        name = f"{PREFIX}{os.getpid()}-{next(_names)}"
        ip("netns", "add", name)
        self._namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_host(self) -> Host:
        """A new namespace at the next address of the subnet (from ``.1``)."""
        number = len(self.hosts) + 1
        namespace, port = self._namespace(), f"p{number}"
        bridge = ("-n", self._bridge)
        ip(
            *bridge,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            namespace,
        )
        ip(*bridge, "link", "set", port, "master", "br0", "up")
        host = Host(namespace, f"{self.subnet}.{number}")
        ip("-n", namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        self.hosts.append(host)
        return host

    def port(self, host: Host) -> tuple[str, str]:
        """``(namespace, device)`` of ``host``'s bridge port: what it sends to ``host``."""
        return self._bridge, f"p{self.hosts.index(host) + 1}"

    def close(self) -> None:
        """Deletes every namespace made (veth pairs and bridge go with them)."""
        for name in reversed(self._namespaces):
            with suppress(RuntimeError):
                ip("netns", "delete", name)
        self._namespaces.clear()


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (None: they can).

    ``ZMQDATA_NO_NETNS=1`` says they cannot, to skip the tier on purpose.
    """
    if os.environ.get("ZMQDATA_NO_NETNS") == "1":
        return "ZMQDATA_NO_NETNS=1 is set"
    if not sys.platform.startswith("linux"):
        return f"network namespaces need Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run as root"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is not installed"
    try:
        Network().close()
    except RuntimeError as error:
        return f"cannot make a network namespace and bridge: {error}"
    return None
