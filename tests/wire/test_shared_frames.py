"""Frames whose buffers sit in a shared-memory segment: round trip, and forged headers.

Forged headers go through the real ``shm.claim``: each is refused with an
``InvalidArgumentError`` before anything is mapped.
"""

from __future__ import annotations

import os
from typing import Any

import msgpack
import numpy as np
import pytest

from tests.dataset.checks import assert_bit_equal
from zmqdata._runtime import shm
from zmqdata._wire import frames
from zmqdata.errors import InvalidArgumentError

pytestmark = pytest.mark.skipif(not shm.enabled(), reason="no /dev/shm here")


def element(seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {
        "image": rng.standard_normal((64, 32, 3)).astype(np.float32),
        "big": np.arange(100_000, dtype=">i4"),
        "fortran": np.asfortranarray(
            np.arange(40_000, dtype=np.int16).reshape(200, 200)
        ),
        "small": np.arange(3),
        "label": seed,
    }


def shared(value: Any) -> frames.SharedFrames:
    encoded = frames.encode_shared([value], shm.store)
    assert isinstance(encoded, frames.SharedFrames)
    return encoded


def test_shared_frames_decode_bit_exact_and_outlive_the_file() -> None:
    value = element(1)
    encoded = shared(value)
    path = os.path.join(shm.DIRECTORY, encoded.segment)
    assert os.path.exists(path)
    # The big arrays (480 kB) are in the segment; only the small ones inline.
    assert sum(len(f) for f in encoded.described) < 30_000
    (decoded,), _ = frames.decode(encoded.described, segments=shm.claim)
    assert_bit_equal(decoded, value)
    assert decoded["big"].flags.writeable  # copy-on-write, as read from a socket
    shm.unlink(encoded.segment)  # as its writer does once it is given back
    assert not os.path.exists(path)
    decoded["big"][0] = 7  # the mapping lives on with the arrays
    assert_bit_equal(decoded["fortran"], value["fortran"])


def test_inband_form_decodes_without_shared_memory() -> None:
    value = element(2)
    encoded = shared(value)
    mapping = memoryview(shm.read_back(encoded.segment))
    shm.unlink(encoded.segment)
    parts = [encoded.inband_header]
    parts += [mapping[offset : offset + n] for offset, n in encoded.spans]
    (decoded,), _ = frames.decode(parts)
    assert_bit_equal(decoded, value)


def test_small_elements_need_no_segment() -> None:
    assert isinstance(frames.encode_shared([np.arange(10)], shm.store), list)


def test_no_room_falls_back_to_frames() -> None:
    encoded = frames.encode_shared([np.arange(100_000)], lambda size, parts: None)
    assert isinstance(encoded, list)
    assert_bit_equal(frames.decode(encoded)[0][0], np.arange(100_000))


def test_a_reader_that_did_not_ask_refuses_shared_buffers() -> None:
    encoded = shared(element(3))
    try:
        with pytest.raises(InvalidArgumentError, match="did not ask"):
            frames.decode(encoded.described)
        assert os.path.exists(os.path.join(shm.DIRECTORY, encoded.segment))
    finally:
        shm.unlink(encoded.segment)


def forged(encoded: frames.SharedFrames, **changes: Any) -> list[Any]:
    header = msgpack.unpackb(encoded.described[0])
    header.update(changes)
    return [msgpack.packb(header), *encoded.described[1:]]


def claims(calls: list[str]) -> Any:
    def claim(name: str, extent: int) -> Any:
        calls.append(name)
        return shm.claim(name, extent)

    return claim


@pytest.mark.parametrize(
    "name",
    [
        "../../etc/passwd",
        "zmqdata-1-" + "0" * 32 + "-0/..",
        "/dev/shm/zmqdata-1-" + "0" * 32 + "-0",
        "zmqdata-1-" + "0" * 31 + "-0",
        7,
    ],
)
def test_a_bad_segment_name_is_refused_before_opening(name: Any) -> None:
    encoded = shared(element(4))
    calls: list[str] = []
    try:
        with pytest.raises(InvalidArgumentError, match="segment name"):
            frames.decode(forged(encoded, s=name), segments=claims(calls))
        assert calls == []
    finally:
        shm.unlink(encoded.segment)


def test_a_segment_smaller_than_claimed_is_refused_before_mapping() -> None:
    encoded = shared(element(5))
    path = os.path.join(shm.DIRECTORY, encoded.segment)
    os.truncate(path, 100)
    try:
        with pytest.raises(InvalidArgumentError, match="holds 100 bytes"):
            frames.decode(encoded.described, segments=shm.claim)
    finally:
        shm.unlink(encoded.segment)


def test_a_link_out_of_dev_shm_is_refused(tmp_path: Any) -> None:
    target = tmp_path / "secret"
    target.write_bytes(bytes(1 << 20))
    encoded = shared(element(6))
    path = os.path.join(shm.DIRECTORY, encoded.segment)
    os.unlink(path)
    os.symlink(target, path)
    try:
        with pytest.raises(InvalidArgumentError, match="cannot open"):
            frames.decode(encoded.described, segments=shm.claim)
    finally:
        os.unlink(path)


def test_a_missing_segment_says_so() -> None:
    encoded = shared(element(7))
    shm.unlink(encoded.segment)
    with pytest.raises(InvalidArgumentError, match="gone"):
        frames.decode(encoded.described, segments=shm.claim)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda parts: [parts[0], b"\x00" * 7, *parts[2:]], "8-byte offset"),
        (lambda parts: [*parts[:2], parts[1], *parts[3:]], "overlap"),
        (
            lambda parts: [parts[0], (1 << 40).to_bytes(8, "little"), *parts[2:]],
            "span",
        ),
    ],
)
def test_forged_offsets_are_refused_before_mapping(change: Any, message: str) -> None:
    encoded = shared(element(8))
    calls: list[str] = []
    try:
        with pytest.raises(InvalidArgumentError, match=message):
            frames.decode(change(list(encoded.described)), segments=claims(calls))
        assert calls == []
    finally:
        shm.unlink(encoded.segment)


def test_a_segment_named_without_shared_buffers_is_refused() -> None:
    plain = frames.encode([np.arange(100_000)])
    header = msgpack.unpackb(plain[0])
    header["s"] = "zmqdata-1-" + "0" * 32 + "-0"
    with pytest.raises(InvalidArgumentError, match="no buffer is in it"):
        frames.decode([msgpack.packb(header), *plain[1:]], segments=shm.claim)
