"""Segments and presence files in /dev/shm: claimed once, swept only when their owner died."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from zmqdata._runtime import shm

pytestmark = pytest.mark.skipif(not shm.enabled(), reason="no /dev/shm here")

_OWNER = """
import sys
from zmqdata._runtime import shm
name = shm.store(4096, [(0, memoryview(b"x" * 4096))])
print(shm.presence(), name, flush=True)
sys.stdin.read()
"""


def files_of(owner: str) -> list[str]:
    return sorted(f for f in os.listdir(shm.DIRECTORY) if f.startswith(owner))


def start_owner() -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _OWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    presence, segment = proc.stdout.readline().split()
    return proc, presence, segment


def test_a_live_owners_files_are_kept_a_dead_ones_swept() -> None:
    proc, presence, segment = start_owner()
    try:
        shm.sweep()
        assert files_of(presence) == [presence, segment]
        assert shm.same_host(presence)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        for stream in (proc.stdin, proc.stdout):
            assert stream is not None
            stream.close()
    assert files_of(presence) == [presence, segment]  # -9: nothing ran at exit
    assert shm.sweep() >= 2
    assert files_of(presence) == []
    assert not shm.same_host(presence)


@pytest.mark.exclusive  # readers and workers of other tests sweep dead owners' files
def test_a_clean_exit_removes_the_presence_file() -> None:
    proc, presence, segment = start_owner()
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.close()
    proc.wait(10)
    proc.stdout.close()
    assert files_of(presence) == [segment]  # a segment a reader never claimed...
    shm.sweep()
    assert files_of(presence) == []  # ... goes with the next sweep


def test_this_process_keeps_its_own_files_through_a_sweep() -> None:
    name = shm.store(10, [(0, memoryview(b"0123456789"))])
    assert name is not None
    shm.sweep()
    assert os.path.exists(os.path.join(shm.DIRECTORY, name))
    assert bytes(shm.claim(name, 10)) == b"0123456789"
    shm.unlink(name)
    assert not os.path.exists(os.path.join(shm.DIRECTORY, name))


@pytest.mark.parametrize("probe", ["", "zmqdata-0", "../tmp", "zmqdata-1-" + "a" * 32])
def test_same_host_needs_an_existing_presence_file(probe: str) -> None:
    assert not shm.same_host(probe)


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_variable_turns_it_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(shm.ENV, value)
    assert not shm.enabled()


def test_a_bad_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shm.ENV, "maybe")
    with pytest.raises(
        ValueError, match="ZMQDATA_SHARED_MEMORY must be 0 or 1, got 'maybe'"
    ):
        shm.enabled()
