"""StreamDecoder and decode_from: any chunking of a byte stream gives the same packets.

The packets are the hand-checked corpus of ``tests/vectors/valid.json`` (see
``tests/vectors/README.md``); ``decode()`` of each vector is checked against the expected
packet in test_vectors.py, so here it serves as the reference the stream must agree with.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mqttwire import (
    IncompletePacket,
    MalformedPacket,
    MQTTWireError,
    PacketTooLarge,
    ProtocolError,
)
from mqttwire._codec.framing import frame_header
from mqttwire._errors import rule

CORPUS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "valid.json").read_text()
)
NAMES = sorted(CORPUS)


def vec(name: str) -> tuple[bytes, int]:
    """(bytes, protocol level) of a corpus vector."""
    entry = CORPUS[name]
    return bytes.fromhex(entry["hex"]), entry["version"]


def is_connect(data: bytes) -> bool:
    return data[0] >> 4 == 1


def decoder_for(codec: ModuleType, data: bytes, version: int) -> Any:
    """A decoder that accepts ``data`` as its first packet: one that learns the level
    from a CONNECT, or one told the level for anything else."""
    return codec.StreamDecoder(None if is_connect(data) else version)


PINGREQ = b"\xc0\x00"
PINGRESP = b"\xd0\x00"
# CONNECT, level 4, client id "c": RL = 10 (variable header) + 3 (payload) = 13 = 0x0D.
CONNECT_V4 = bytes.fromhex("100d00044d5154540402003c000163")
# CONNECT, level 5, client id "c": RL = 11 + 3 = 14 = 0x0E.
CONNECT_V5 = bytes.fromhex("100e00044d5154540502003c00000163")
# PUBACK id 1, reason 0x10, RL 3: valid at level 5 only (a v3 PUBACK has RL 2).
PUBACK_V5_REASON = bytes.fromhex("4003000110")


# ---------------------------------------------------------------------------------------
# Chunking


@pytest.mark.parametrize("name", NAMES)
def test_every_split_point(codec: ModuleType, name: str) -> None:
    """The packet fed whole, and in two pieces split at every byte, gives one packet."""
    data, version = vec(name)
    expected = codec.decode(data, version=version)
    dec = decoder_for(codec, data, version)
    assert dec.feed(data) == [expected]
    for i in range(len(data) + 1):
        dec = decoder_for(codec, data, version)
        assert dec.feed(data[:i]) + dec.feed(data[i:]) == [expected], f"split at {i}"


@pytest.mark.parametrize("name", NAMES)
def test_one_byte_at_a_time(codec: ModuleType, name: str) -> None:
    """Fed a byte at a time, nothing comes out until the last byte."""
    data, version = vec(name)
    dec = decoder_for(codec, data, version)
    for i in range(len(data) - 1):
        assert dec.feed(data[i : i + 1]) == [], f"byte {i}"
    assert dec.feed(data[-1:]) == [codec.decode(data, version=version)]
    assert dec.feed(b"") == []


def _session(level: int) -> tuple[bytes, list[bytes]]:
    """A CONNECT at ``level`` followed by every non-CONNECT corpus vector of that level."""
    connect = CONNECT_V5 if level == 5 else CONNECT_V4 if level == 4 else vec(
        "connect-v3-minimal")[0]
    rest = [vec(n)[0] for n in NAMES if vec(n)[1] == level and not is_connect(vec(n)[0])]
    return connect, rest


@pytest.mark.parametrize("level", [3, 4, 5])
def test_many_packets_in_one_chunk(codec: ModuleType, level: int) -> None:
    """All the level's vectors in one chunk come out in order, with the level learnt from
    the CONNECT in front of them (version=None) or given."""
    connect, rest = _session(level)
    expected = [codec.decode(p, version=level) for p in [connect, *rest]]
    dec = codec.StreamDecoder()
    assert dec.feed(connect + b"".join(rest)) == expected
    assert dec.version == level
    dec = codec.StreamDecoder(level)
    assert dec.feed(b"".join(rest)) == expected[1:]


@pytest.mark.parametrize("level", [3, 4, 5])
@pytest.mark.parametrize("seed", range(5))
def test_random_chunking_of_a_session(codec: ModuleType, level: int, seed: int) -> None:
    """Chunks of random sizes (0 to 40 bytes) give the same packets as the whole."""
    connect, rest = _session(level)
    stream = connect + b"".join(rest)
    expected = codec.StreamDecoder().feed(stream)
    rng = random.Random(seed)
    dec = codec.StreamDecoder()
    got: list[Any] = []
    pos = 0
    while pos < len(stream):
        step = rng.randint(0, 40)
        got += dec.feed(stream[pos : pos + step])
        pos += step
    assert got == expected


# The Remaining Length boundaries too long for the corpus file (test_vectors.py has the
# arithmetic): a level 4 QoS 0 PUBLISH to "t" has RL = 2 + 1 + len(payload).
LARGE = [(16383, "ff 7f"), (16384, "80 80 01"), (2_097_151, "ff ff 7f"),
         (2_097_152, "80 80 80 01")]


@pytest.mark.parametrize(("rl", "varint"), LARGE, ids=[str(rl) for rl, _ in LARGE])
def test_large_packets_in_pieces(codec: ModuleType, rl: int, varint: str) -> None:
    payload = b"x" * (rl - 3)
    data = b"\x30" + bytes.fromhex(varint) + b"\x00\x01t" + payload
    expected = [codec.Publish("t", payload)]
    header = 1 + len(bytes.fromhex(varint))
    assert codec.StreamDecoder(4).feed(data) == expected
    for cuts in ([1], [2], [header], [header + 3], [len(data) // 2], [len(data) - 1],
                 [1, 2, header, len(data) - 1]):
        dec = codec.StreamDecoder(4)
        got = []
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            got += dec.feed(data[a:b])
        assert got == expected, cuts
    assert codec.decode_from(data[:-1], version=4) is None
    assert codec.decode_from(data[:header], version=4) is None


# ---------------------------------------------------------------------------------------
# Truncation: decode_from() says None, decode() raises IncompletePacket.


@pytest.mark.parametrize("name", NAMES)
def test_every_proper_prefix_is_incomplete(codec: ModuleType, name: str) -> None:
    data, version = vec(name)
    for i in range(len(data)):
        prefix = data[:i]
        assert codec.decode_from(prefix, version=version) is None, f"prefix of {i} bytes"
        assert codec.decode_from(PINGREQ + prefix, 2, version=version) is None
        with pytest.raises(IncompletePacket) as info:
            codec.decode(prefix, version=version)
        assert info.value.reason_code == 0x81


def test_decode_rejects_bytes_after_the_packet(codec: ModuleType) -> None:
    """decode() takes exactly one packet: anything after it is malformed."""
    for extra in (b"\x00", PINGREQ):
        with pytest.raises(MalformedPacket):
            codec.decode(PINGREQ + extra, version=4)


# ---------------------------------------------------------------------------------------
# max_packet_size: total packet bytes, fixed header included, checked as soon as the
# fixed header is complete and before the body arrives.


def test_max_packet_size_boundary(codec: ModuleType) -> None:
    # The RL 127 vector: 1 + 1 + 127 = 129 bytes.
    data, version = vec("publish-v4-remaining-length-127")
    assert len(data) == 129
    assert codec.StreamDecoder(version, max_packet_size=129).feed(data) == [
        codec.decode(data, version=version)
    ]
    dec = codec.StreamDecoder(version, max_packet_size=128)
    assert dec.feed(data[:1]) == []
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(data[1:2])  # the whole fixed header: 30 7f
    exc = info.value
    assert exc.reason_code == 0x95
    assert exc.offset == 0
    assert exc.packet_type == "PUBLISH"
    assert str(exc).startswith("PUBLISH: ")


def test_max_packet_size_counts_the_fixed_header(codec: ModuleType) -> None:
    # PINGREQ is 2 bytes (RL 0), a v4 PUBACK 4 (RL 2); the RL 128 vector is
    # 1 + 2 + 128 = 131 bytes.
    assert codec.StreamDecoder(4, max_packet_size=2).feed(PINGREQ) == [codec.PingReq()]
    puback = b"\x40\x02\x00\x01"
    assert codec.StreamDecoder(4, max_packet_size=4).feed(puback) == [codec.PubAck(1)]
    with pytest.raises(PacketTooLarge):
        codec.StreamDecoder(4, max_packet_size=3).feed(puback[:2])
    data, version = vec("publish-v4-remaining-length-128")
    assert len(data) == 131
    assert len(codec.StreamDecoder(version, max_packet_size=131).feed(data)) == 1
    with pytest.raises(PacketTooLarge):
        codec.StreamDecoder(version, max_packet_size=130).feed(data[:3])


def test_max_packet_size_before_the_body(codec: ModuleType) -> None:
    """A claimed length of 268,435,455 (ff ff ff 7f) is refused on the header alone, at
    its offset in the stream, with the packets completed before it in the same call."""
    dec = codec.StreamDecoder(5, max_packet_size=1024)
    assert dec.feed(PINGREQ) == [codec.PingReq()]
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(PINGRESP + b"\x30\xff\xff\xff\x7f")
    assert info.value.offset == 4  # PINGREQ (2) + PINGRESP (2)
    assert info.value.packets == [codec.PingResp()]


def test_max_packet_size_header_split_across_feeds(codec: ModuleType) -> None:
    dec = codec.StreamDecoder(5, max_packet_size=100)
    assert dec.feed(b"\x30") == []
    assert dec.feed(b"\xff") == []
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(b"\x7f")  # RL 127 + 3 = 130 > 100; the body never arrives
    assert info.value.offset == 0


# ---------------------------------------------------------------------------------------
# The protocol level: learnt from CONNECT, or given, readable and writable.


def test_version_is_learnt_from_connect(codec: ModuleType) -> None:
    dec = codec.StreamDecoder()
    assert dec.version is None
    assert dec.feed(CONNECT_V4) == [codec.Connect("c", protocol_version=4)]
    assert dec.version == 4
    # After a level 4 CONNECT, a PUBACK is the v3 form: RL 3 is malformed.
    with pytest.raises(MalformedPacket):
        dec.feed(PUBACK_V5_REASON)
    dec = codec.StreamDecoder()
    assert dec.feed(CONNECT_V5 + PUBACK_V5_REASON) == [
        codec.Connect("c"), codec.PubAck(1, reason_code=0x10)
    ]
    assert dec.version == 5


def test_version_given_and_written(codec: ModuleType) -> None:
    dec = codec.StreamDecoder(4)
    assert dec.version == 4
    with pytest.raises(MalformedPacket):
        codec.StreamDecoder(4).feed(PUBACK_V5_REASON)
    dec.version = 5  # a client learns the level from its own CONNECT
    assert dec.version == 5
    assert dec.feed(PUBACK_V5_REASON) == [codec.PubAck(1, reason_code=0x10)]
    assert codec.StreamDecoder(version=3).version == 3


def test_first_packet_must_be_connect(codec: ModuleType) -> None:
    """A decoder that learns the level from CONNECT refuses anything else first
    [MQTT-3.1.0-1]."""
    with pytest.raises(ProtocolError) as info:
        codec.StreamDecoder().feed(PINGREQ)
    exc = info.value
    assert exc.rule == rule("first_packet_connect", 5) == rule("first_packet_connect", 4)
    assert f"[{exc.rule}]" in str(exc)
    assert exc.reason_code == 0x82
    assert exc.offset == 0
    assert str(exc).startswith("PINGREQ: ")


@pytest.mark.parametrize("split", [False, True])
def test_second_connect(codec: ModuleType, split: bool) -> None:
    """A second CONNECT is a protocol error [MQTT-3.1.0-2], at its stream offset."""
    dec = codec.StreamDecoder()
    if split:
        assert dec.feed(CONNECT_V4) == [codec.Connect("c", protocol_version=4)]
        chunk = PINGREQ + CONNECT_V4
    else:
        chunk = CONNECT_V4 + PINGREQ + CONNECT_V4
    with pytest.raises(ProtocolError) as info:
        dec.feed(chunk)
    exc = info.value
    assert exc.rule == rule("second_connect", 4)
    assert f"[{exc.rule}]" in str(exc)
    assert exc.offset == len(CONNECT_V4) + 2
    assert str(exc).startswith("CONNECT: ")
    before = [codec.PingReq()] if split else [codec.Connect("c", protocol_version=4),
                                              codec.PingReq()]
    assert exc.packets == before


# ---------------------------------------------------------------------------------------
# Errors: offsets in the stream, packets completed before the error, stickiness.


def test_error_offset_is_a_stream_offset(codec: ModuleType) -> None:
    dec = codec.StreamDecoder(4)
    assert dec.feed(PINGREQ) == [codec.PingReq()]
    assert dec.feed(PINGRESP[:1]) == []
    assert dec.feed(PINGRESP[1:] + b"\x40\x02") == [codec.PingResp()]
    with pytest.raises(ProtocolError) as info:
        dec.feed(b"\x00\x00")  # PUBACK with packet id 0, id at stream offset 4 + 2 = 6
    assert info.value.offset == 6
    assert info.value.rule == rule("packet_id_nonzero", 4)
    assert info.value.packets == []


def test_errors_are_sticky(codec: ModuleType) -> None:
    """After an error, every feed() raises it again: the stream cannot be resynchronised.
    The first raise carries the packets the failing call completed before the bad bytes."""
    dec = codec.StreamDecoder(4)
    with pytest.raises(MalformedPacket) as info:
        dec.feed(PINGREQ + PINGRESP + b"\x36\x05\x00\x01t\x00\x01" + PINGREQ)  # QoS 3
    first = info.value
    assert first.offset == 4
    assert first.rule == rule("qos_bits", 4)
    assert first.packets == [codec.PingReq(), codec.PingResp()]
    for chunk in (PINGREQ, b"", CONNECT_V4):
        with pytest.raises(MQTTWireError) as again:
            dec.feed(chunk)
        assert type(again.value) is type(first)
        assert str(again.value) == str(first)


def test_too_large_is_sticky(codec: ModuleType) -> None:
    dec = codec.StreamDecoder(4, max_packet_size=16)
    with pytest.raises(PacketTooLarge) as info:
        dec.feed(b"\x30\x20")  # 2 + 32 > 16
    with pytest.raises(PacketTooLarge) as again:
        dec.feed(PINGREQ)
    assert str(again.value) == str(info.value)


def test_incomplete_stream_is_not_an_error(codec: ModuleType) -> None:
    """Half a packet waits for the rest; an empty feed is harmless."""
    dec = codec.StreamDecoder(4)
    assert dec.feed(b"") == []
    assert dec.feed(b"\x30") == []
    assert dec.feed(b"") == []
    assert dec.feed(b"\x03\x00\x01") == []
    assert dec.feed(b"t" + PINGREQ) == [codec.Publish("t"), codec.PingReq()]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x30\x00", (2, 0)),
        (b"\x30\x7f", (2, 127)),
        (b"\x30\x80\x01", (3, 128)),
        (b"\x30\xff\xff\xff\x7f", (5, 268_435_455)),  # the largest (MQTT 5.0 §1.5.5)
        (b"\x30\x80\x00", (3, 0)),  # not the shortest form: framing lets it through
        (b"\x30", None),
        (b"\x30\x80\x80\x80", None),
        (b"\x30\x80\x80\x80\x80", False),  # a fifth byte would be needed
        (b"\x30\x80\x80\x80\x80\x01", False),
    ],
)
def test_frame_header(data: bytes, expected: object) -> None:
    """_codec.framing.frame_header, the one Python reader of the Remaining Length (read_header
    and the capture reader use it): its three outcomes, and the same at an offset."""
    assert frame_header(data, 0, len(data)) == expected
    assert frame_header(b"??" + data + b"\x00", 2, len(data) + 2) == expected
