"""Hostile payloads (zstd and count bombs) and a peak-memory probe for the tests."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TypeVar

import msgpack
import pytest
import zstandard

T = TypeVar("T")

_STATUS = "/proc/self/status"


@functools.cache
def zstd_bomb(size: int) -> bytes:
    """A zstd frame of ``size`` zero bytes (it declares its size): 2 GiB in 65 KiB."""
    compressor = zstandard.ZstdCompressor(level=19 if size <= 64 << 20 else 1)
    stream = compressor.compressobj(size=size)
    chunk = bytes(min(size, 1 << 24))
    parts = [stream.compress(chunk) for _ in range(size // len(chunk))]
    parts.append(stream.compress(bytes(size % len(chunk))))
    parts.append(stream.flush())
    return b"".join(parts)


def zstd_bomb_frames(size: int) -> list[bytes]:
    """A frames message of one ``size``-byte array, sent as a zstd bomb."""
    header = {
        "v": 1,
        "n": 1,
        "m": {},
        "r": [["a", "|u1", [size], 0]],
        "b": [["zstd", size]],
    }
    return [msgpack.packb(header), zstd_bomb(size)]


def count_bomb_frames(count: int) -> list[bytes]:
    """A frames message of ``count`` one-byte scalars, in under 1 KiB for 20 M."""
    header = {"v": 1, "n": count, "m": {}, "c": ["s", "|u1", 0], "b": [["zstd", count]]}
    return [msgpack.packb(header), zstd_bomb(count)]


def _status_bytes(field: str) -> int:
    with open(_STATUS) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"{field} not in {_STATUS}")


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pytest.skip("cannot reset the peak RSS here")


def measure(fn: Callable[[], T]) -> tuple[T, int, float]:
    """``fn()``, the growth of this process's peak RSS while it ran, and its seconds.

    The growth is ``VmHWM`` after minus ``VmRSS`` before, the peak reset first.
    """
    _reset_peak()
    before = _status_bytes("VmRSS")
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    return result, _status_bytes("VmHWM") - before, seconds


MiB = 1 << 20


def describe(what: str, growth: int, seconds: float) -> str:
    """A line for assertion messages and ``-s`` runs: the figures measured."""
    return f"{what}: peak RSS +{growth / MiB:.1f} MiB, {seconds:.3f} s"
