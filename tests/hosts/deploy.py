"""Real daemons on namespace hosts, started as configs/ and docs/ say.

``docs_commands()`` reads the commands of docs/deployment.md's "Many hosts"
section; ``Deployment`` runs them on namespace hosts, with only what the docs
say a user edits replaced: ``dispatcher-host``, the key paths and ``work_dir``.
"""

from __future__ import annotations

import json
import re
import shlex
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.cli.procs import Proc, run, zmqdata
from tests.hosts.netns import Host, Network

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("dispatcher", "worker")
MULTI_HOST = "configs/multi-host.yaml"
CONFIG_PATH = "/etc/zmqdata/zmqdata.yaml"  # the containers' deployment file
_PROMPT = re.compile(r"^(dispatcher|worker)-host(?:-N)?\$\s+zmqdata (.*)$")


def docs_commands() -> list[tuple[str, list[str]]]:
    """``(role, argv after zmqdata)`` of each command in deployment.md's section 3."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text.split("## 3. Many hosts", 1)[1].split("\n## ", 1)[0]
    block = section.split("```console\n", 1)[1].split("```", 1)[0]
    commands, lines = [], block.replace("\\\n", " ").splitlines()
    for line in lines:
        match = _PROMPT.match(line)
        assert match, f"unexpected line in deployment.md's console block: {line!r}"
        commands.append((match.group(1), shlex.split(match.group(2), comments=True)))
    return commands


def container_commands(kind: str) -> tuple[list[tuple[str, list[str]]], str | None]:
    """``(role, argv)`` of the containers in configs/docker-compose.yaml or configs/k8s/.

    The dispatcher's service name becomes ``dispatcher-host`` (the cluster's
    DNS would resolve it). Also returns the deployment file both mount
    (``CONFIG_PATH``: the file the compose services mount or the k8s ConfigMap).
    """
    configs = ROOT / "configs"
    if kind == "compose":
        services = yaml.safe_load((configs / "docker-compose.yaml").read_text())
        argv = {role: services["services"][role]["command"] for role in SERVICES}
        [config_map] = [
            (configs / source).read_text()
            for source, target, *_ in (
                v.split(":") for v in services["services"]["worker"]["volumes"]
            )
            if target == CONFIG_PATH
        ]
    else:
        argv, config_map = {}, None
        for role in SERVICES:
            for doc in yaml.safe_load_all(
                (configs / "k8s" / f"{role}.yaml").read_text()
            ):
                if doc["kind"] in ("StatefulSet", "Deployment"):
                    [container] = doc["spec"]["template"]["spec"]["containers"]
                    argv[role] = container["args"]
                elif doc["kind"] == "ConfigMap":
                    config_map = doc["data"]["zmqdata.yaml"]
    named = re.compile(r"(zmqdata-)?dispatcher:5050")
    return [
        (role, [named.sub("dispatcher-host:5050", arg) for arg in argv[role]])
        for role in SERVICES
    ], config_map


@dataclass(frozen=True)
class Keys:
    """The key files of docs/security.md, made with ``zmqdata keygen``."""

    server: Path  # directory of server.key{,_secret}
    trainer: Path  # directory of trainer.key{,_secret}
    authorized: Path  # the client (trainer) keys
    workers: Path  # the worker keys (server.key)

    @classmethod
    def make(cls, directory: Path) -> Keys:
        keys = cls(*(directory / d for d in ("keys", "trainer-keys", "auth", "wk")))
        for where, name, role in (
            (keys.server, "server", keys.workers),
            (keys.trainer, "trainer", keys.authorized),
        ):
            done = run("keygen", str(where), "--name", name, "--authorize", str(role))
            assert done.returncode == 0, done.stderr
        return keys

    def trainer_env(self) -> dict[str, str]:
        return {
            "ZMQDATA_CURVE_SECRET_KEY_FILE": str(self.trainer / "trainer.key_secret"),
            "ZMQDATA_CURVE_SERVER_KEY_FILE": str(self.server / "server.key"),
        }


class Deployment:
    """A dispatcher host, worker hosts and trainer hosts on one ``Network``.

    Everything started is stopped by ``close()``: processes first, then the
    namespaces.
    """

    def __init__(self, network: Network, directory: Path, keys: Keys | None) -> None:
        self._stack = ExitStack()
        self.network, self.directory, self.keys = network, directory, keys
        self.dispatcher_host = network.add_host()
        self.worker_hosts: list[Host] = []
        self.work_dir = directory / "journal"
        self.config = directory / "multi-host.yaml"
        self.procs: dict[str, Proc] = {}
        self._edits = {
            "dispatcher-host": self.dispatcher_host.address,
            "/var/lib/zmqdata": str(self.work_dir),
        }
        self.swap = {MULTI_HOST: str(self.config), **self._edits}
        """Docs spelling -> this deployment's, replaced in every command."""
        self.env: dict[str, str] = {}
        """Variables every process started from now on gets (``ZMQDATA_*``)."""

    def write_config(self, changes: dict[str, str] | None = None) -> None:
        """configs/multi-host.yaml with the user's edits, plus exact ``changes``."""
        assert self.keys is not None
        text = (ROOT / MULTI_HOST).read_text()
        edits = {
            **self._edits,
            "/etc/zmqdata/keys": str(self.keys.server),
            "/etc/zmqdata/authorized": str(self.keys.authorized),
            "/etc/zmqdata/worker-keys": str(self.keys.workers),
            **(changes or {}),
        }
        for old, new in edits.items():
            assert old in text, f"{MULTI_HOST} no longer has {old!r}"
            text = text.replace(old, new)
        self.config.write_text(text)

    def _argv(self, argv: list[str]) -> list[str]:
        for old, new in self.swap.items():
            argv = [arg.replace(old, new) for arg in argv]
        return argv

    def start(self, name: str, host: Host, argv: list[str], ready: str) -> Proc:
        """Runs ``zmqdata ARGV`` (docs spelling) on ``host``; waits for ``ready``."""
        proc = self._stack.enter_context(
            zmqdata(*self._argv(argv), prefix=host.prefix(**self.env))
        )
        self.procs[name] = proc
        proc.wait_for_line(ready)
        return proc

    def start_cluster(
        self, commands: list[tuple[str, list[str]]], workers: int
    ) -> None:
        """The dispatcher, then ``workers`` workers, each on its own host.

        ``commands`` holds one dispatcher and one worker command (docs
        spelling). Each worker must say it is ready at its host's address.
        """
        argv = dict(commands)
        self.start(
            "dispatcher", self.dispatcher_host, argv["dispatcher"], "dispatcher ready: "
        )
        for k in range(workers):
            host = self.network.add_host()
            ready = rf"worker ready: tcp://{re.escape(host.address)}:5051$"
            self.start(f"worker-{k}", host, argv["worker"], ready)
            self.worker_hosts.append(host)

    def advertised(self) -> list[list[str]]:
        """``[address, data_address]`` each worker should be listed with."""
        return sorted(
            [f"{h.address}:5051", f"tcp://{h.address}:5051"] for h in self.worker_hosts
        )

    def trainer(
        self, host: Host, module: str = "tests.hosts.trainer", **spec: Any
    ) -> Proc:
        """Starts ``module`` (a trainer) on ``host`` reading as ``spec`` says."""
        spec.setdefault("dispatcher", f"{self.dispatcher_host.address}:5050")
        env = {
            "PYTHONPATH": str(ROOT),
            **(self.keys.trainer_env() if self.keys else {}),
            **self.env,
        }
        return self._stack.enter_context(
            zmqdata(
                json.dumps(spec),
                prefix=host.prefix(**env),
                module=module,
            )
        )

    @staticmethod
    def result(trainer: Proc, timeout: float = 30.0) -> dict[str, Any]:
        """What the trainer read (waits for its ``result:`` line)."""
        line = trainer.wait_for_line(r"^result: (.*)$", timeout)
        result: dict[str, Any] = json.loads(line.group(1))
        return result

    def close(self) -> None:
        self._stack.close()
