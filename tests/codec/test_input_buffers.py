"""Input types and buffers: bytes, bytearray and memoryviews of any layout or format
decode alike; decode_from offsets; encode_into appends.

The packets are the hand-checked corpus of ``tests/vectors/valid.json``; ``decode()`` of
plain bytes is the reference (test_vectors.py checks it against the expected packets).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mqttwire import MQTT5, MQTT311, ProtocolError

CORPUS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "vectors" / "valid.json").read_text()
)
NAMES = sorted(CORPUS)


def vec(name: str) -> tuple[bytes, int]:
    """(bytes, protocol level) of a corpus vector."""
    entry = CORPUS[name]
    return bytes.fromhex(entry["hex"]), entry["version"]


def non_contiguous(data: bytes) -> memoryview:
    """A strided view holding ``data``: every other byte of a buffer twice as long."""
    spaced = bytearray(2 * len(data))
    spaced[::2] = data
    spaced[1::2] = b"\xee" * len(data)
    view = memoryview(spaced)[::2]
    assert (len(data) < 2 or not view.c_contiguous) and view.tobytes() == data
    return view


#: Ways to present the same bytes; each returns an object whose buffer holds ``data``.
PRESENTATIONS: dict[str, Callable[[bytes], Any]] = {
    "bytes": bytes,
    "bytearray": bytearray,
    "memoryview": memoryview,
    "memoryview-of-bytearray": lambda d: memoryview(bytearray(d)),
    "memoryview-slice": lambda d: memoryview(b"\xff\xff" + d + b"\xff")[2:-1],
    "memoryview-non-contiguous": non_contiguous,
    # format "b": the bytes 0x80-0xff read as negative numbers through the view
    "memoryview-signed-char": lambda d: memoryview(d).cast("b"),
    "memoryview-char": lambda d: memoryview(d).cast("c"),
    # two dimensions, one row
    "memoryview-2d": lambda d: memoryview(d).cast("B", [1, len(d)]),
}


def present(how: str, data: bytes) -> Any:
    return PRESENTATIONS[how](data)


@pytest.mark.parametrize("how", list(PRESENTATIONS))
def test_decode_any_buffer(codec: ModuleType, how: str) -> None:
    for name in NAMES:
        data, version = vec(name)
        expected = codec.decode(data, version=version)
        assert codec.decode(present(how, data), version=version) == expected, name
        assert codec.decode_from(present(how, data), version=version) == (
            expected, len(data)
        ), name


@pytest.mark.parametrize("how", list(PRESENTATIONS))
def test_feed_any_buffer(codec: ModuleType, how: str) -> None:
    for name in NAMES:
        data, version = vec(name)
        dec = codec.StreamDecoder(None if data[0] >> 4 == 1 else version)
        half = len(data) // 2
        got = dec.feed(present(how, data[:half])) + dec.feed(present(how, data[half:]))
        assert got == [codec.decode(data, version=version)], name


def test_decode_wider_formats(codec: ModuleType) -> None:
    """A memoryview of 2- and 4-byte items is read as its bytes."""
    # PUBLISH v4 to "ab" with payload "cdefgh": RL = 2 + 2 + 6 = 10 = 0x0A; 12 bytes in all.
    data = bytes.fromhex("300a 0002") + b"abcdefgh"
    assert len(data) % 4 == 0
    expected = codec.Publish("ab", b"cdefgh")
    for fmt in ("H", "I", "f"):
        view = memoryview(data).cast(fmt)
        assert codec.decode(view, version=4) == expected, fmt
        assert codec.decode_from(view, version=4) == (expected, 12), fmt
        assert codec.StreamDecoder(4).feed(view) == [expected], fmt


def test_errors_are_alike_for_every_buffer(codec: ModuleType) -> None:
    """The same bad bytes give the same error, offset included, whatever holds them."""
    bad = bytes.fromhex("32 05 00 01") + b"t" + b"\x00\x00"  # packet id 0 at offset 5
    for how in PRESENTATIONS:
        with pytest.raises(ProtocolError) as info:
            codec.decode(present(how, bad), version=4)
        assert info.value.offset == 5, how


def test_other_objects_are_refused(codec: ModuleType) -> None:
    for obj in ("30 02 00 00", [0xC0, 0x00], None, 12):
        with pytest.raises(TypeError):
            codec.decode(obj, version=4)


# ---------------------------------------------------------------------------------------
# The decoded packet owns its bytes.


def test_packet_does_not_share_the_input_buffer(codec: ModuleType) -> None:
    """Changing a bytearray after decoding does not change the packet."""
    data, version = vec("publish-v5-all-properties")
    buf = bytearray(data)
    packet = codec.decode(buf, version=version)
    view_packet = codec.decode(memoryview(buf), version=version)
    expected = codec.decode(data, version=version)
    buf[:] = b"\x00" * len(buf)
    assert packet == expected
    assert view_packet == expected
    assert type(packet.payload) is bytes
    assert type(packet.properties.correlation_data) is bytes


def test_stream_decoder_copies_what_it_keeps(codec: ModuleType) -> None:
    """A partial packet is kept, not a view of the caller's (reused) buffer."""
    data, version = vec("publish-v5-all-properties")
    dec = codec.StreamDecoder(version)
    chunk = bytearray(data[:20])
    assert dec.feed(chunk) == []
    chunk[:] = b"\xff" * 20  # the caller reuses its receive buffer
    assert dec.feed(bytearray(data[20:])) == [codec.decode(data, version=version)]


# ---------------------------------------------------------------------------------------
# decode_from offsets


def test_decode_from_walks_a_buffer(codec: ModuleType) -> None:
    names = [n for n in NAMES if CORPUS[n]["version"] == 5 and CORPUS[n]["hex"][0] != "1"]
    packets = [vec(n)[0] for n in names]
    buf = b"".join(packets)
    for how in ("bytes", "bytearray", "memoryview", "memoryview-non-contiguous"):
        data = present(how, buf)
        offset = 0
        for raw in packets:
            packet, after = codec.decode_from(data, offset, version=5)
            assert packet == codec.decode(raw, version=5)
            assert after == offset + len(raw)
            offset = after
        assert offset == len(buf)
        assert codec.decode_from(data, offset, version=5) is None
        # a cut inside the last packet: None, not an error
        assert codec.decode_from(present(how, buf[:-1]), offset - len(packets[-1]),
                                 version=5) is None


def test_decode_from_error_offsets_count_from_the_input_start(codec: ModuleType) -> None:
    # PINGREQ (2 bytes), then a PUBACK with packet id 0 (id at 2 + 2 = 4).
    with pytest.raises(ProtocolError) as info:
        codec.decode_from(b"\xc0\x00\x40\x02\x00\x00", 2, version=4)
    assert info.value.offset == 4
    assert "at offset 4" in str(info.value)


def test_decode_from_default_offset_and_keyword(codec: ModuleType) -> None:
    data = b"\xc0\x00\xd0\x00"
    assert codec.decode_from(data) == (codec.PingReq(), 2)
    assert codec.decode_from(data, offset=2) == (codec.PingResp(), 4)
    assert codec.decode_from(data, 2, version=3) == (codec.PingResp(), 4)


# ---------------------------------------------------------------------------------------
# Encoding: encode_into appends; ProtocolVersion members work like ints.


def test_encode_into_appends(codec: ModuleType) -> None:
    buf = bytearray(b"prefix")
    expected = bytearray(b"prefix")
    for name in NAMES:
        data, version = vec(name)
        packet = codec.decode(data, version=version)
        encoded = codec.encode(packet, version=version)
        written = packet.encode_into(buf, version=version)
        expected += encoded
        assert written == len(encoded), name
        assert buf == expected, name


def test_encode_into_defaults_to_level_5(codec: ModuleType) -> None:
    buf = bytearray(b"\x01")
    assert codec.PubAck(1, reason_code=0x10).encode_into(buf) == 5
    assert buf == b"\x01\x40\x03\x00\x01\x10"  # RL = 2 (packet id) + 1 (reason code)


def test_encode_into_needs_a_bytearray(codec: ModuleType) -> None:
    """bytes cannot be appended to: refusing beats returning a count of bytes that were
    written nowhere."""
    with pytest.raises(TypeError):
        codec.PingReq().encode_into(b"", version=4)


def test_protocol_version_members(codec: ModuleType) -> None:
    packet = codec.PubAck(1, reason_code=0x10)
    assert codec.encode(packet, version=MQTT5) == codec.encode(packet, version=5)
    assert codec.decode(b"\x40\x02\x00\x01", version=MQTT311) == codec.PubAck(1)
    assert codec.StreamDecoder(MQTT311).feed(b"\x40\x02\x00\x01") == [codec.PubAck(1)]


@pytest.mark.parametrize("version", [0, 2, 6, None, "5"])
def test_unknown_version_is_refused(codec: ModuleType, version: Any) -> None:
    """Only levels 3, 4 and 5 exist; anything else is a caller's mistake (ValueError or
    TypeError), never a silent guess."""
    with pytest.raises((ValueError, TypeError)):
        codec.decode(b"\xc0\x00", version=version)
    with pytest.raises((ValueError, TypeError)):
        codec.PingReq().encode(version=version)
