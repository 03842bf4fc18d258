"""Running ``zmqdata`` commands as child processes in tests, always cleaned up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress

from tests.helpers import poll_for


class Proc:
    """A ``python -m zmqdata ...`` child whose stderr lines are collected.

    ``prefix`` goes before the interpreter (e.g. ``ip netns exec NS env K=V``:
    commands that exec, so the child keeps its pid); ``module`` replaces
    ``zmqdata``; ``python`` (interpreter and flags) replaces this one (e.g.
    another release's, ``tests/upgrade``).
    """

    def __init__(
        self,
        args: Sequence[str],
        prefix: Sequence[str] = (),
        module: str = "zmqdata",
        python: Sequence[str] = (sys.executable,),
    ) -> None:
        self.popen = subprocess.Popen(
            [*prefix, *python, "-m", module, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group: teardown kills its children
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float = 20.0) -> re.Match[str]:
        """The first stderr line matching ``pattern`` (fails if the child exits)."""
        regex = re.compile(pattern)

        def first() -> re.Match[str] | None:
            return next(filter(None, map(regex.search, list(self.lines))), None)

        def find() -> re.Match[str] | None:
            if (match := first()) is not None or self.popen.poll() is None:
                return match
            self._reader.join(5)  # it exited: its last lines may be in flight
            if (match := first()) is not None:
                return match
            raise AssertionError(
                f"exited {self.popen.returncode} before {pattern!r}:\n" + self.stderr
            )

        match: re.Match[str] = poll_for(find, timeout=timeout, interval=0.02)
        return match

    def count(self, pattern: str) -> int:
        regex = re.compile(pattern)
        return sum(1 for line in list(self.lines) if regex.search(line))

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Sends ``sig`` and returns the exit code."""
        self.popen.send_signal(sig)
        code = self.popen.wait(timeout)
        self._reader.join(5)
        return code

    def kill_group(self) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)


@contextmanager
def zmqdata(
    *args: str,
    prefix: Sequence[str] = (),
    module: str = "zmqdata",
    python: Sequence[str] = (sys.executable,),
) -> Iterator[Proc]:
    """Runs ``zmqdata ARGS`` (see ``Proc``); on exit terminates it, kills its group."""
    proc = Proc(args, prefix, module, python)
    try:
        yield proc
    finally:
        if proc.popen.poll() is None:
            proc.popen.terminate()
            with suppress(subprocess.TimeoutExpired):
                proc.popen.wait(10)
        proc.kill_group()
        for stream in (proc.popen.stdout, proc.popen.stderr):
            if stream is not None:
                stream.close()


def run(
    *args: str, timeout: float = 30.0, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """Runs ``zmqdata ARGS`` to completion (``prefix``: see ``Proc``)."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "zmqdata", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
