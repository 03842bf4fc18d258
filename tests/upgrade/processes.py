"""Dispatchers, workers and trainers of either release, as child processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Self

from tests.cli.procs import Proc, zmqdata
from tests.helpers import poll_for
from zmqdata import service

CURRENT = (sys.executable, "-I")
"""This release's interpreter (``-I``, as the previous one's: see ``previous.py``)."""
TRAINER = Path(__file__).with_name("trainer.py")
WAIT_S = 30.0
"""The most a step waits (processes start in about a second each)."""


def start_dispatcher(
    stack: ExitStack, python: Sequence[str], port: int, work_dir: Path
) -> Proc:
    """A fault-tolerant dispatcher keeping its journal in ``work_dir``."""
    args = ["--port", str(port), "--fault-tolerant", "--work-dir", str(work_dir)]
    proc = stack.enter_context(zmqdata("dispatcher", *args, python=python))
    proc.wait_for_line(r"dispatcher ready: ", timeout=WAIT_S)
    return proc


def start_worker(stack: ExitStack, python: Sequence[str], target: str) -> Proc:
    args = ("worker", "--dispatcher", target, "--heartbeat-interval-ms", "50")
    proc = stack.enter_context(zmqdata(*args, python=python))
    proc.wait_for_line(r"worker ready: ", timeout=WAIT_S)
    return proc


def wait_for_workers(target: str, count: int) -> None:
    poll_for(
        lambda: len(service.get_status(target)["workers"]) == count, timeout=WAIT_S
    )


class Trainer:
    """``trainer.py`` run by ``python``: reads as many elements as it is told."""

    def __init__(self, python: Sequence[str], target: str, n: int) -> None:
        self.popen = subprocess.Popen(
            [*python, str(TRAINER), target, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "ZMQDATA_CLIENT_HEARTBEAT_MS": "20"},
        )
        self.elements: list[int] = []
        self._said: list[str] = []
        self._stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            word = line.strip()
            if word.isdigit():
                self.elements.append(int(word))
            else:
                self._said.append(word)

    def _read_stderr(self) -> None:
        assert self.popen.stderr is not None
        self._stderr.extend(line.rstrip("\n") for line in self.popen.stderr)

    def read(self, count: int | None) -> None:
        """Reads ``count`` more elements (None: to the end); fails if the read does."""
        assert self.popen.stdin is not None
        said, before = len(self._said), len(self.elements)
        self.popen.stdin.write("all\n" if count is None else f"{count}\n")
        self.popen.stdin.flush()

        def answered() -> bool:
            if len(self._said) > said:
                return True
            if self.popen.poll() is not None:
                self._readers[1].join(5)
                raise AssertionError(
                    f"the trainer exited {self.popen.returncode}:\n"
                    + "\n".join(self._stderr)
                )
            return False

        poll_for(answered, timeout=WAIT_S, interval=0.005)
        expected = "end" if count is None else f"read {before + count}"
        assert self._said[said] == expected, (self._said[said], self._stderr)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(10)
        for reader in self._readers:
            reader.join(5)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None:
                with suppress(OSError):
                    stream.close()
