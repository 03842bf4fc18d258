"""``zmqdata status`` against real daemons: ages, a killed worker, ``--watch``."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import zmqdata as zd
from tests.cli.procs import run, zmqdata
from tests.cli.test_daemons import address_of
from tests.helpers import poll_for
from tests.service.cluster import free_port
from zmqdata import service

pytestmark = pytest.mark.timeout(120)


def worker_rows(address: str) -> list[list[str]]:
    """The WORKERS rows (cells) of ``zmqdata status``, header left out."""
    shown = run("status", "--dispatcher", address, "--timeout", "2")
    assert shown.returncode == 0, shown.stderr
    if "\nWORKERS: none\n" in shown.stdout:
        return []
    block = shown.stdout.split("\nWORKERS\n", 1)[1].split("\n\n", 1)[0]
    return [re.split(r" {2,}", line.strip()) for line in block.splitlines()[1:]]


def age(cell: str) -> float:
    """Seconds in a HEARTBEAT cell (``0.4s``, ``12s``, ``6.3s LATE``)."""
    match = re.fullmatch(r"([\d.]+)s( LATE)?", cell)
    assert match, cell
    return float(match.group(1))


BUFFER = r"\d+% \(\d+/\d+ el, [\d.]+ [KMG]?i?B\)"
"""A buffer cell: fill in percent, then elements and bytes in units."""


def test_status_shows_a_reading_job_and_a_fresh_heartbeat():
    with zmqdata("dispatcher", "--port", "0") as dispatcher:
        target = address_of(dispatcher)
        beat = ("--heartbeat-interval-ms", "100")
        with zmqdata("worker", "--dispatcher", target, *beat) as worker:
            address_of(worker)
            ds = zd.Dataset.range(100_000).apply(
                service.distribute("distributed_epoch", target, job_name="train")
            )
            with iter(ds) as reading:
                next(reading)  # the job reads while status runs
                # A fresh heartbeat that reports the task's buffer shows (the
                # first beats may come before the task; a loaded machine may
                # delay one).
                [row] = poll_for(
                    lambda: [
                        r
                        for r in worker_rows(target)
                        if age(r[-1]) < 1.0
                        and "LATE" not in r[-1]
                        and re.fullmatch(BUFFER, r[6])
                    ],
                    timeout=20,
                )
                shown = run("status", "--dispatcher", target).stdout
            assert row[5].endswith("/s")  # DATA/S, in units
            assert "1 worker, 1 dataset, 1 job (1 reading)" in shown.splitlines()[0]
            assert re.search(r"train\s+distributed_epoch\s+-\s+1\s+\d+% \(", shown)
            assert worker.stop() == 0
        assert dispatcher.stop() == 0


def test_a_killed_worker_shows_a_growing_age_then_late_then_goes(tmp_path):
    config = tmp_path / "d.yaml"
    config.write_text("dispatcher: {port: 0, worker_timeout_ms: 6000}\n")
    with zmqdata("dispatcher", "--config", str(config)) as dispatcher:
        target = address_of(dispatcher)
        beat = ("--heartbeat-interval-ms", "200")
        with zmqdata("worker", "--dispatcher", target, *beat) as worker:
            address_of(worker)
            poll_for(lambda: [r for r in worker_rows(target) if age(r[-1]) < 1], 20)
            worker.kill_group()  # kill -9: no goodbye
            [late] = poll_for(lambda: worker_rows(target)[-1:], timeout=1)
            first = age(late[-1])
            [late] = poll_for(
                lambda: [r for r in worker_rows(target) if r[-1].endswith("LATE")],
                timeout=5,
            )
            assert age(late[-1]) > first  # the age grows while it is silent
            poll_for(lambda: worker_rows(target) == [], timeout=20)  # then it goes
        assert dispatcher.stop() == 0


class Watch:
    """``zmqdata status --watch`` with its stdout collected (not a terminal)."""

    def __init__(self, *args: str) -> None:
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "zmqdata", "status", "--watch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.out.append(line)

    @property
    def text(self) -> str:
        return "".join(self.out)

    def seen(self, pattern: str, after: int = 0) -> int:
        """Where ``pattern`` is first found at or after ``after`` (0: not yet)."""
        position = self.text.find(pattern, after)
        return position + 1 if position >= 0 else 0


@contextmanager
def watching(*args: str) -> Iterator[Watch]:
    watch = Watch(*args)
    try:
        yield watch
    finally:
        if watch.popen.poll() is None:
            watch.popen.kill()
        watch.popen.wait(10)
        watch._reader.join(5)
        for stream in (watch.popen.stdout, watch.popen.stderr):
            if stream is not None:
                stream.close()


def test_watch_keeps_polling_across_a_dispatcher_restart():
    port = free_port()
    target = f"127.0.0.1:{port}"
    with zmqdata("dispatcher", "--port", str(port)) as first:
        address_of(first)
        with watching("0.2", "--dispatcher", target, "--timeout", "0.5") as watch:
            shown = f"dispatcher {target}, zmqdata"
            poll_for(lambda: watch.seen(shown), timeout=20)
            first.kill_group()  # kill -9
            down = poll_for(lambda: watch.seen("dispatcher unreachable (retrying): "))
            with zmqdata("dispatcher", "--port", str(port)) as second:
                address_of(second)
                poll_for(lambda: watch.seen(shown, after=down), timeout=20)
                watch.popen.send_signal(signal.SIGINT)
                assert watch.popen.wait(10) == 0  # Ctrl-C ends it cleanly
                assert second.stop() == 0
    text = watch.text
    assert "\x1b" not in text  # not a terminal: no control characters
    assert "\nWORKERS: none\n" in text
    frames = text.split("\n\nevery 0.2s, ")  # snapshots separated by a blank line
    assert len(frames) >= 3
    assert "Traceback" not in text


def test_watch_exits_non_zero_on_a_bad_address():
    completed = run("status", "--watch", "0.2", "--dispatcher", "tcp://h:notaport")
    assert completed.returncode == 1
    assert "expected host:port" in completed.stderr


def test_watch_redraws_in_place_on_a_terminal():
    main, child = pty.openpty()
    target = f"127.0.0.1:{free_port()}"  # nobody there: it keeps retrying
    command = ["status", "--watch", "0.2", "--dispatcher", target, "--timeout", "0.2"]
    popen = subprocess.Popen(
        [sys.executable, "-m", "zmqdata", *command],
        stdout=child,
        stderr=subprocess.DEVNULL,
    )
    os.close(child)
    seen = bytearray()
    try:

        def two_frames() -> bool:
            if select.select([main], [], [], 0.1)[0]:
                seen.extend(os.read(main, 65536))
            return seen.count(b"\x1b[H") >= 2

        poll_for(two_frames, timeout=20)
        popen.send_signal(signal.SIGINT)
        assert popen.wait(10) == 0
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait(10)
        os.close(main)
    assert b"dispatcher unreachable (retrying): " in seen
    assert b"\x1b[J" in seen  # what the last frame left below is cleared
