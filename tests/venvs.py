"""Virtualenvs of their own for one build of zmqdata, made offline and fast.

A ``Venv`` has no pip and no dependencies of its own: a ``.pth`` file gives it
this interpreter's site-packages (the dependencies ``make`` installed) after
its own, so the zmqdata installed in it (``--no-deps``) is the one it
imports. Its interpreter runs with ``-I``: neither the working directory nor
``PYTHONPATH`` comes first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Venv:
    path: Path

    @property
    def python(self) -> tuple[str, ...]:
        """The interpreter and its flags, to start a process with."""
        return (str(self.path / "bin" / "python"), "-I")

    @classmethod
    def create(cls, path: Path) -> Venv:
        """An empty venv at ``path`` that sees this one's dependencies."""
        check(sys.executable, "-m", "venv", "--without-pip", str(path))
        venv = cls(path)
        site = venv.run(
            "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        )
        paths = sysconfig.get_paths()  # this interpreter's: the dependencies
        dependencies = dict.fromkeys([paths["purelib"], paths["platlib"]])
        (Path(site.strip()) / "zmqdata-dependencies.pth").write_text(
            "".join(f"{path}\n" for path in dependencies)
        )
        return venv

    def install(self, artifact: Path) -> None:
        """Installs a wheel or an sdist of zmqdata, without its dependencies."""
        check(
            sys.executable, "-m", "pip", "--python", self.python[0], "install",
            "--no-deps", "--no-index", "--no-build-isolation", "--quiet",
            str(artifact),
        )  # fmt: skip

    def run(self, *args: str, timeout: float = 60.0) -> str:
        """``python ARGS`` to completion; its stdout (fails on a non-zero exit)."""
        return check(*self.python, *args, timeout=timeout, cwd=self.path)


def check(*command: str, timeout: float = 300.0, cwd: Path | None = None) -> str:
    """Runs ``command`` (without ``PYTHONPATH``); its stdout; fails if it fails."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    completed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
        cwd=cwd,
    )
    assert completed.returncode == 0, f"{command}: {completed.stderr}"
    return completed.stdout
