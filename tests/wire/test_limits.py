"""Decoding untrusted frames: claimed sizes and counts are checked before allocating.

Each bomb is measured: the growth of this process's peak RSS while it is
decoded, and the time it takes (``pytest -s`` prints the figures).
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import msgpack
import numpy as np
import pytest

from tests.bombs import (
    MiB,
    count_bomb_frames,
    describe,
    measure,
    zstd_bomb,
    zstd_bomb_frames,
)
from zmqdata._dataset.specs import decode_spec, encode_spec
from zmqdata._version import PROTOCOL_VERSION
from zmqdata._wire import limits, messages
from zmqdata._wire.budget import COUNT_FROM
from zmqdata._wire.codec import decompress
from zmqdata._wire.frames import (
    DEFAULT_LIMITS,
    Limits,
    decode,
    decode_messages,
    decode_sized,
    encode,
)
from zmqdata.errors import InvalidArgumentError

GROWTH_BOUND = 64 * MiB
STALL_BOUND_S = 0.5


def refused(frames: list[Any], match: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Decodes ``frames``, which must be refused; returns the figures measured."""

    def attempt() -> None:
        with pytest.raises(InvalidArgumentError, match=match):
            decode(frames, limits)

    _, growth, seconds = measure(attempt)
    figures = describe(f"{sum(len(f) for f in frames)} B refused", growth, seconds)
    print(figures)
    assert growth < GROWTH_BOUND, figures
    assert seconds < STALL_BOUND_S, figures
    return figures


def test_decompress_refuses_a_size_over_max_size_before_allocating() -> None:
    bomb = zstd_bomb(1 << 31)
    assert len(bomb) < 70_000

    def attempt() -> None:
        with pytest.raises(InvalidArgumentError, match="over the cap of 1048576"):
            decompress("zstd", bomb, max_size=1 << 20)

    _, growth, _ = measure(attempt)
    assert growth < GROWTH_BOUND


def test_a_2_gib_zstd_bomb_in_65_kib_is_refused() -> None:
    refused(zstd_bomb_frames(1 << 31), "declare 2147483648 bytes .* cap of 268435456")


def test_a_20_m_count_bomb_in_under_1_kib_is_refused() -> None:
    frames = count_bomb_frames(20_000_000)
    assert sum(len(f) for f in frames) < 1024
    refused(frames, "20000000 elements .* forged element count")


def test_raw_buffers_over_max_bytes_are_refused() -> None:
    frames = encode([np.zeros(1 << 20, np.uint8)])
    refused(frames, "over the cap of 1000", Limits(max_bytes=1000))
    refused([bytes(200)], "header of 200 bytes", Limits(max_bytes=100))


def test_compressed_buffers_count_together() -> None:
    arrays = [np.zeros(300_000, np.uint8) for _ in range(4)]
    frames = encode(arrays, compression_level=3)
    limits = Limits(max_decompressed=1_000_000)
    refused(frames, "declare 1200000 bytes", limits)
    assert len(decode(frames, Limits(max_decompressed=1_200_000))[0]) == 4


def test_limits_let_a_big_compressed_element_through_when_asked() -> None:
    frames = zstd_bomb_frames(300 * MiB)
    refused(frames, "cap of 268435456")
    (array,), _, nbytes = decode_sized(frames, Limits(max_decompressed=300 * MiB))
    assert array.nbytes == nbytes - len(frames[0]) == 300 * MiB


def test_forged_count_over_raw_bytes_is_refused() -> None:
    """Uncompressed, too: 100 k elements of one byte and 9 empty arrays each."""
    column = ["a", "<f4", [0], b""]
    spec = ["T", [["s", "|u1", bytes(100_000)], *[column] * 9]]
    header = {"v": 1, "n": 100_000, "m": {}, "c": spec, "b": []}
    refused([msgpack.packb(header)], "1100000 objects")


def test_big_legitimate_batches_still_round_trip() -> None:
    pairs = [(np.uint8(i % 7), np.uint8(1)) for i in range(100_000)]
    got, _ = decode(encode(pairs))
    assert got[:7] == pairs[:7]
    assert len(got) == len(pairs)


def test_batches_of_many_objects_per_byte_travel_as_rows() -> None:
    element = {f"k{i}": np.zeros(0, np.float32) for i in range(40)} | {"b": True}
    frames = encode([element] * 2_000)
    assert "r" in msgpack.unpackb(frames[0])
    got, _ = decode(frames)
    assert len(got) == 2_000
    assert list(got[-1]) == list(element)


@pytest.mark.parametrize(
    ("sizes", "count", "match"),
    [
        ([1, 1], 2, "claimed, 3 frames given"),
        ([1, 1, 1, 1], 3, "claimed, 3 frames given"),
        ([0, 3], 3, "claimed"),
        ([1, 1, "1"], 3, "claimed"),
        ([1, 1, 1], 4, "4 elements claimed, the messages hold 3"),
        ([1, 1, 1], 10**9, "claimed, the messages hold 3"),
    ],
)
def test_decode_messages_checks_the_peer_claims(
    sizes: list[Any], count: int, match: str
) -> None:
    frames = [*encode([1]), *encode([2]), *encode([3])]
    with pytest.raises(InvalidArgumentError, match=match):
        decode_messages(frames, sizes, count)
    assert decode_messages(frames, [1, 1, 1], 3)[0] == [1, 2, 3]


def test_an_element_spec_must_be_one_value_of_its_own_bytes() -> None:
    with pytest.raises(InvalidArgumentError, match="holds 2 values, not 1"):
        decode_spec(bytes(encode([1, 2])[0]))
    with pytest.raises(InvalidArgumentError, match="1 buffers but 0 frames"):
        decode_spec(bytes(encode([np.zeros(1 << 17, np.uint8)])[0]))
    assert decode_spec(encode_spec(None)) is None


CONTROL_BOMBS = {
    "2M empty maps": [{}] * 2_000_000,
    "1M empty lists": [[]] * 1_000_000,
    "2M short strings": ["ab"] * 2_000_000,
    "many lists of 100k": [[None] * 100_000] * 30,
    "1000 lists of 1000 empty maps": [[{}] * 1000] * 1000,
}


@pytest.mark.parametrize("payload", CONTROL_BOMBS.values(), ids=list(CONTROL_BOMBS))
def test_control_messages_of_too_many_values_are_refused(payload: Any) -> None:
    data = msgpack.packb({"v": PROTOCOL_VERSION, "t": "get_status", "x": payload})

    def attempt() -> None:
        with pytest.raises(InvalidArgumentError, match=r"values|max_array_len"):
            messages.decode(data)

    _, growth, seconds = measure(attempt)
    figures = describe(f"control message of {len(data)} B", growth, seconds)
    print(figures)
    assert growth < GROWTH_BOUND, figures


HEADER_BOMBS = {
    "200k empty maps": [{}] * 200_000,
    "200k empty lists": [[]] * 200_000,
    "70k maps of one entry": [{0: 0}] * 70_000,
    "200 lists of 1000 empty maps": [[{}] * 1000] * 200,
}


@pytest.mark.parametrize("payload", HEADER_BOMBS.values(), ids=list(HEADER_BOMBS))
def test_a_frames_header_of_empty_containers_costs_a_bounded_multiple(
    monkeypatch: pytest.MonkeyPatch, payload: Any
) -> None:
    """Before: 64 to 77 times its size; now what ``header_budget`` allows.

    That is its lists and maps, plus the item slots of the list being unpacked
    (8 bytes an item, allocated before the items are). Without the floor, so
    that a small header shows the multiple.
    """
    monkeypatch.setattr(limits, "HEADER_BYTES_FLOOR", 0)
    header = msgpack.packb({"v": 1, "n": 1, "m": {}, "r": [payload], "b": []})
    tracemalloc.start()
    try:
        with pytest.raises(InvalidArgumentError, match="bytes of lists and maps"):
            decode([header])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    print(f"header of {len(header)} B: peak {peak / len(header):.1f} x its size")
    assert peak < (limits.HEADER_BYTES_PER_BYTE + 8) * len(header)


def test_big_legitimate_rows_headers_decode() -> None:
    """Python lists and dicts of every length: the densest headers an encoder makes."""
    elements = [{"a": i, "b": [i] * (i % 7), "c": (None, "x")} for i in range(5_000)]
    frames = encode(elements)
    assert "r" in msgpack.unpackb(frames[0])
    assert len(frames[0]) > 4 * COUNT_FROM
    assert decode(frames)[0] == elements


def test_big_legitimate_control_messages_decode() -> None:
    jobs = [
        {"job_id": i, "dataset_id": str(i), "finished": False} for i in range(50_000)
    ]
    reply = messages.GetStatusReply(request_id=1, status={"jobs": jobs})
    assert messages.decode(messages.encode(reply)) == reply
    pipeline = messages.GetOrRegisterDataset(pipeline=bytes(10 << 20))
    assert messages.decode(messages.encode(pipeline)) == pipeline


def test_messages_of_one_reply_share_the_limits() -> None:
    """Each message under the cap, together over it: refused at the third."""
    bomb = zstd_bomb_frames(16 * MiB)
    limits = Limits(max_decompressed=40 * MiB)

    def attempt() -> None:
        with pytest.raises(InvalidArgumentError, match=r"message 2 of 5: .* cap of"):
            decode_messages(bomb * 5, [2] * 5, 5, limits)

    _, growth, seconds = measure(attempt)
    print(describe("5 x 16 MiB bombs in one reply", growth, seconds))
    assert growth < 48 * MiB
    assert len(decode_messages(bomb * 2, [2, 2], 2, limits)[0]) == 2
