"""Elements cross the service bit-exact: nested structures, every dtype, big arrays."""

from __future__ import annotations

import numpy as np
import pytest

import zmqdata as zd
from tests.dataset.checks import assert_bit_equal
from tests.helpers import poll_for
from zmqdata import service
from zmqdata._client import credit


def mixed(i: int) -> dict:
    rng = np.random.default_rng(i)
    return {
        "bool": np.array([True, False, i % 2 == 0]),
        "unicode": np.array(["héllo", "wörld", "✓" * (i + 1)]),
        "bytes_array": np.array([b"ab", b"\x00\xff"]),
        "ints": (
            np.int8(-i),
            np.arange(4, dtype=np.uint8),
            np.arange(3, dtype=">i2"),
            np.full((2, 2), -(2**31), dtype=np.int32),
            np.arange(5, dtype=np.uint64) * (2**63 // 5),
            np.int64(2**62 + i),
        ),
        "floats": [
            np.float16(0.5),
            rng.standard_normal((3, 4)).astype(np.float32),
            np.array([np.nan, -0.0, np.inf, 1e-310]),
            np.array(1.5 + 2j, dtype=np.complex128),
        ],
        "zero_d": np.array(7, dtype=np.int16),
        "empty": np.zeros((0, 3), dtype=np.float64),
        "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
        "python": ("text ✓", b"\x00raw", i, -(2**62), 2.5, True, None),
        "big": rng.standard_normal(20_000),  # > 64 KiB: encoded and compressed
        "nested": {"list": [np.arange(i + 1), {"deep": (np.bool_(False),)}]},
    }


def mixed_elements(n: int):
    return [mixed(i) for i in range(n)]


# In-process workers are read over inproc unless the consumer asks for tcp.
WIRES = [("AUTO", None), ("AUTO", "tcp"), (None, "tcp")]


@pytest.mark.parametrize(("compression", "protocol"), WIRES)
@pytest.mark.parametrize("mode", ["parallel_epochs", "distributed_epoch"])
def test_mixed_structures_arrive_bit_exact(cluster, compression, protocol, mode):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(4).map(lambda i: mixed(int(i)))
    ds = ds.apply(
        service.distribute(
            mode, c.target, compression=compression, data_transfer_protocol=protocol
        )
    )
    assert_bit_equal(list(ds), mixed_elements(4))


@pytest.mark.parametrize(("compression", "protocol"), WIRES)
def test_generator_structures_arrive_bit_exact(cluster, compression, protocol):
    c = cluster(num_workers=1)
    ds = zd.Dataset.from_generator(lambda: iter(mixed_elements(3)))
    ds = ds.apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            compression=compression,
            data_transfer_protocol=protocol,
        )
    )
    assert_bit_equal(list(ds), mixed_elements(3))


def test_tensor_slices_with_constants_arrive_bit_exact(cluster):
    c = cluster(num_workers=1)
    data = {
        "a": np.arange(24, dtype=np.float32).reshape(6, 4),
        "b": np.array(list("abcdef")),
        "c": np.arange(6, dtype=np.int8),
    }
    source = zd.Dataset.from_tensor_slices(data)
    ds = source.apply(service.distribute("distributed_epoch", c.target))
    assert_bit_equal(list(ds), list(source))


def big_array(i: int, nbytes: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + i)
    half = rng.integers(0, 256, nbytes // 2, dtype=np.uint8)  # incompressible
    return np.concatenate([half, np.zeros(nbytes - half.size, np.uint8)])


@pytest.mark.parametrize("nbytes", [8 * 2**20, 64 * 2**20], ids=["8MB", "64MB"])
@pytest.mark.parametrize(("compression", "protocol"), WIRES)
def test_big_elements_arrive_bit_exact(cluster, nbytes, compression, protocol):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(1).map(lambda i: (i, big_array(int(i), nbytes)))
    ds = ds.apply(
        service.distribute(
            "parallel_epochs",
            c.target,
            compression=compression,
            data_transfer_protocol=protocol,
        )
    )
    [(index, got)] = list(ds)
    assert index == 0
    want = big_array(0, nbytes)
    assert got.dtype == want.dtype
    assert got.shape == want.shape == (nbytes,)
    assert np.array_equal(got, want)


@pytest.fixture
def small_requests(monkeypatch):
    """One element per request, two requests in flight per task: the last
    request of a finished task is answered by an empty end-of-input reply."""
    monkeypatch.setattr(credit, "REQUEST_BYTES", 1)


def numbered(i) -> np.ndarray:
    return np.full(25_000, i, np.int32)  # 100 kB


def test_large_elements_are_pipelined_in_order_and_end(cluster, small_requests):
    c = cluster(num_workers=1)
    ds = zd.Dataset.range(120).map(numbered)
    ds = ds.apply(service.distribute("parallel_epochs", c.target, compression=None))
    got = [int(array[0]) for array in ds]
    assert got == list(range(120))


def test_large_elements_pipelined_from_two_workers_exactly_once(
    cluster, small_requests
):
    c = cluster(num_workers=2)
    ds = zd.Dataset.range(200).map(numbered)
    ds = ds.apply(service.distribute("distributed_epoch", c.target, compression=None))
    assert sorted(int(array[0]) for array in ds) == list(range(200))


def test_the_default_byte_cap_counts_decoded_bytes_not_wire_bytes(cluster, monkeypatch):
    monkeypatch.setattr(credit, "DEFAULT_MAX_BUFFERED_BYTES", 8 * 2**20)
    c = cluster(num_workers=1)
    zeros = zd.Dataset.range(100).map(lambda i: np.zeros(2**20, np.uint8))  # 1 MiB
    ds = zeros.apply(service.distribute("parallel_epochs", c.target))  # zstd: ~100 B
    with iter(ds) as iterator:
        next(iterator)
        counters = iterator._counters
        poll_for(lambda: counters.starved)  # it stopped asking: the cap is reached
        # Held: what the trainer has not taken yet, decoded (~1 MiB each).
        held = counters.received - counters.consumed
        assert held <= 9, counters
