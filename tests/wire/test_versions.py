"""Protocol versions: encoding for an older peer, accepting it, falling back to it."""

from __future__ import annotations

import os
import subprocess
import sys

import msgpack
import pytest

from zmqdata._version import OLDEST_PROTOCOL_VERSION as OLD
from zmqdata._version import PROTOCOL_VERSION as NEW
from zmqdata._wire import messages as m
from zmqdata._wire import versions
from zmqdata._wire.versions import PeerVersion, Spoken, refused_by
from zmqdata.errors import FailedPreconditionError, InvalidArgumentError

SPLIT = m.GetSplit(request_id=3, iteration_id=1, repetition=0, counts=[7, 2])


def wire(data: bytes) -> dict[str, object]:
    body: dict[str, object] = msgpack.unpackb(data)
    return body


@pytest.fixture
def counts_added_in_new(monkeypatch):
    """``get_split.counts`` as if this version had added it."""
    monkeypatch.setitem(m.ADDED_IN, "get_split.counts", NEW)


def refusal_by_old(request_id: int = 0) -> bytes:
    """What a server of the oldest version answers to a message of this one."""
    error = m.Error(
        request_id=request_id,
        code="FAILED_PRECONDITION",
        message=m.refusal(NEW, own=OLD),
    )
    return m.encode(error, OLD)


# ------------------------------------------------------------------ encode, decode


@pytest.mark.parametrize("version", [OLD, NEW])
def test_each_accepted_version_round_trips_and_says_its_version(version):
    data = m.encode(SPLIT, version)
    assert wire(data)["v"] == version
    assert m.decode_versioned(data) == (SPLIT, version)


def test_encoding_for_an_older_peer_leaves_out_what_came_later(counts_added_in_new):
    old, new = wire(m.encode(SPLIT, OLD)), wire(m.encode(SPLIT))
    assert "counts" not in old
    assert new["counts"] == [7, 2]
    assert m.decode(m.encode(SPLIT, OLD)) == m.GetSplit(
        request_id=3, iteration_id=1, repetition=0
    )


def test_a_message_type_added_later_is_neither_sent_nor_read_at_an_older_version(
    monkeypatch,
):
    monkeypatch.setitem(m.ADDED_IN, "get_status", NEW)
    with pytest.raises(FailedPreconditionError, match=f"added in protocol v{NEW}"):
        m.encode(m.GetStatus(), OLD)
    old = msgpack.packb({"v": OLD, "t": "get_status"})
    with pytest.raises(InvalidArgumentError, match=f"not in protocol v{OLD}"):
        m.decode(old)


@pytest.mark.parametrize("version", [OLD - 1, NEW + 1])
def test_versions_outside_the_accepted_ones_are_refused_with_both_named(version):
    data = msgpack.packb({"v": version, "t": "ok"})
    with pytest.raises(FailedPreconditionError) as caught:
        m.decode(data)
    assert caught.value.message == (
        f"peer speaks protocol v{version}, this process speaks v{NEW}"
    )
    with pytest.raises(ValueError, match=f"protocol v{version}"):
        m.encode(m.Ok(), version)


# ------------------------------------------------------------------ a requester


def test_absent_is_not_found_to_and_from_a_peer_before_it() -> None:
    absent = m.Error(
        request_id=4, code=m.ABSENT, message="task 3 is not on this worker"
    )
    assert m.decode(m.encode(absent, NEW)) == absent
    assert wire(m.encode(absent, 5))["code"] == "NOT_FOUND"
    assert m.decode(m.encode(absent, 5)) == absent  # an old worker's, read here
    for text in ("task 3 was deleted", "split 2 is not held by task 3"):
        assert (
            m.decode(m.encode(m.Error(code="NOT_FOUND", message=text), 5)).code
            == m.ABSENT
        )


def test_an_older_peers_file_not_found_stays_an_error() -> None:
    for text in ("/d/1.tar: no such file or object", "task 3 is not on this worker!"):
        gone = m.Error(code="NOT_FOUND", message=text)
        assert m.decode(m.encode(gone, 5)) == gone
        assert m.decode(m.encode(gone, NEW)) == gone


def test_a_refusal_by_the_older_version_is_recognised_and_nothing_else_is():
    refusal, version = m.decode_versioned(refusal_by_old())
    assert refused_by(refusal, version) == OLD
    # The same text at this version, another code, another text: not a refusal.
    assert refused_by(refusal, NEW) is None
    other = m.Error(code="NOT_FOUND", message=m.refusal(NEW, own=OLD))
    assert refused_by(other, OLD) is None
    older = m.Error(code="FAILED_PRECONDITION", message=m.refusal(NEW, own=OLD - 1))
    assert refused_by(older, OLD - 1) is None


def test_a_refused_peer_is_spoken_its_version_and_gets_each_message_once_more():
    peer = PeerVersion()
    sent = [m.ClientHeartbeat(request_id=i, client_id=1) for i in (1, 2)]
    assert [wire(peer.encode(message, 0.0))["v"] for message in sent] == [NEW, NEW]
    # The older server refuses both; the first refusal gives both back.
    first, version = m.decode_versioned(refusal_by_old())
    assert peer.received(first, version, 0.1) == sent
    assert peer.received(first, version, 0.1) == []  # the second: already resent
    assert [wire(peer.encode(message, 0.1))["v"] for message in sent] == [OLD, OLD]
    reply = m.IterationState(client_id=1, iteration_id=1, tasks=[], finished=False)
    assert peer.received(reply, OLD, 0.2) is None
    assert peer.version == OLD


def test_a_server_of_this_version_confirms_it_and_nothing_is_kept():
    peer = PeerVersion()
    peer.encode(m.GetStatus(request_id=1), 0.0)
    assert peer.received(m.GetStatusReply(request_id=1, status={}), NEW, 0.1) is None
    refusal, version = m.decode_versioned(refusal_by_old())
    assert peer.received(refusal, version, 0.2) == []  # nothing unconfirmed to resend
    assert peer.version == OLD


def test_other_errors_go_to_the_caller():
    peer = PeerVersion()
    peer.encode(m.GetStatus(request_id=1), 0.0)
    error = m.Error(request_id=1, code="NOT_FOUND", message="no such job")
    assert peer.received(error, NEW, 0.1) is None
    assert peer.version == NEW


def test_a_downgraded_peer_is_tried_at_this_version_again_later():
    peer = PeerVersion()
    peer.encode(m.GetStatus(request_id=1), 0.0)
    refusal, version = m.decode_versioned(refusal_by_old())
    peer.received(refusal, version, 1.0)
    probe_at = 1.0 + versions.PROBE_AGAIN_S
    assert wire(peer.encode(m.GetStatus(request_id=2), probe_at - 0.1))["v"] == OLD
    assert wire(peer.encode(m.GetStatus(request_id=3), probe_at))["v"] == NEW
    # Upgraded meanwhile: it answers at this version, which sticks.
    reply = m.GetStatusReply(request_id=3, status={})
    assert peer.received(reply, NEW, probe_at) is None
    assert wire(peer.encode(m.GetStatus(request_id=4), probe_at + 1e6))["v"] == NEW


def test_unconfirmed_messages_kept_are_bounded():
    peer = PeerVersion()
    for i in range(versions.UNCONFIRMED_MAX + 10):
        peer.encode(m.GetStatus(request_id=i), 0.0)
    refusal, version = m.decode_versioned(refusal_by_old())
    again = peer.received(refusal, version, 0.1)
    assert again is not None
    assert len(again) == versions.UNCONFIRMED_MAX
    assert again[-1].request_id == versions.UNCONFIRMED_MAX + 9


# ------------------------------------------------------------------ a server


def test_a_server_remembers_the_latest_peers_versions():
    spoken: Spoken[bytes] = Spoken(limit=2)
    spoken.heard(b"a", OLD)
    spoken.heard(b"b", NEW)
    spoken.heard(b"a", OLD)  # heard again: the latest
    spoken.heard(b"c", OLD)  # b, the least recently heard, goes
    assert [spoken.known(p) for p in (b"a", b"b", b"c")] == [OLD, None, OLD]
    assert spoken.of(b"b") == NEW  # unknown: this version
    assert spoken.counts([b"a", b"b", b"c"]) == {f"v{OLD}": 2}
    spoken.keep_only({b"c"})
    spoken.forget(b"c")
    assert spoken.counts([b"a", b"c"]) == {}


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf"])
def test_a_bad_probe_interval_is_refused_naming_it(value):
    code = "import zmqdata._wire.versions"
    env = {**os.environ, "ZMQDATA_PROTOCOL_PROBE_S": value}
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert (
        f"ZMQDATA_PROTOCOL_PROBE_S must be a positive number of seconds, got {value!r}"
        in done.stderr
    )
