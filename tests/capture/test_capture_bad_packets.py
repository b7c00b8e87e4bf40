"""A bad packet inside valid framing costs only itself: one error record, then the next
packet decoded as usual, in both directions (direction.py); broken framing resynchronises.
The bad bytes are built by hand here, each with the rule it breaks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest
from capture_helpers import check_accounting, frames_for, read, tshark_packets, write

from mqttwire._constants import PacketType
from mqttwire.capture.writers import Segment, TcpFlow

CLIENT = ("10.0.0.1", 50000)
SERVER = ("10.0.0.2", 1883)

# Each: (the bad packet, its type's name, the rule or words in the error, the level of
# the connection, whether the bad packet is the CONNECT).
BAD = {
    # PUBLISH with both QoS bits set [MQTT-3.3.1-4]: topic "t", packet id 1.
    "publish-qos3": (bytes([0x36, 5, 0, 1]) + b"t" + bytes([0, 1]), "PUBLISH",
                     "[MQTT-3.3.1-4]", 4, False),
    # Packet type 0 is reserved (MQTT 3.1.1 §2.2.1, MQTT 5.0 §2.1.2).
    "reserved-type-0": (bytes([0x00, 0]), "RESERVED", "type 0", 4, False),
    # A 5.0 CONNECT (clean start, keep alive 60) whose property length, 5, runs past the
    # 3 bytes left in its Remaining Length of 14 (the client id "c").
    "connect-properties-overrun": (
        bytes([0x10, 14, 0, 4]) + b"MQTT" + bytes([5, 0x02, 0, 60, 5, 0, 1]) + b"c",
        "CONNECT", "property block runs past", 5, True),
    # A 5.0 CONNECT with a Will whose Payload Format Indicator (property 0x01) is 144:
    # only 0 and 1 are defined (MQTT 5.0 §3.1.3.2.3).  Flags 0x06: Will, clean start.
    "will-payload-format-144": (
        bytes([0x10, 23, 0, 4]) + b"MQTT" + bytes([5, 0x06, 0, 60, 0, 0, 1]) + b"c"
        + bytes([2, 0x01, 144, 0, 1]) + b"w" + bytes([0, 1]) + b"x",
        "CONNECT", "payload format indicator is 144", 5, True),
}


def _session(codec: ModuleType, name: str, sizes: list[int]) -> tuple[list[Segment], TcpFlow]:
    """A session whose client sends the bad packet in the middle of good ones."""
    bad, _, _, level, is_connect = BAD[name]
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    segs = flow.open()
    if not is_connect:
        segs += flow.send(0, mw.Connect("c", protocol_version=level).encode(level), sizes)
    else:
        segs += flow.send(0, bad, sizes)
    segs += flow.send(1, mw.ConnAck().encode(level))
    before = mw.Publish("a/b", b"1", qos=1, packet_id=2).encode(level)
    after = [mw.Subscribe(3, [mw.Subscription("a/#", qos=1)]).encode(level),
             mw.Publish("a/c", b"2" * 3000).encode(level), mw.Disconnect().encode(level)]
    # The bad packet between two good ones, in the same run of bytes.
    middle = b"" if is_connect else bad
    segs += flow.send(0, before + middle + b"".join(after), sizes)
    segs += flow.send(1, mw.PubAck(2).encode(level) + mw.SubAck(3, [1]).encode(level), sizes)
    return segs + flow.close(), flow


@pytest.mark.parametrize("sizes", [[1460], [3]], ids=["whole", "in-3-byte-segments"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_packet_costs_only_itself(codec: ModuleType, name: str, sizes: list[int]) -> None:
    bad, type_name, words, level, is_connect = BAD[name]
    segs, flow = _session(codec, name, sizes)
    records = read(write(frames_for(flow, segs)), codec)
    errors = [r for r in records if r.kind != "packet"]
    assert len(errors) == 1, errors
    (err,) = errors
    assert (err.kind, err.direction, err.packet_type, err.length) == (
        "error", "c2s", type_name, len(bad))
    assert words in err.error  # type: ignore[operator]
    assert err.reason_code is not None and err.error_offset is not None
    assert err.stream_offset <= err.error_offset < err.stream_offset + len(bad)  # type: ignore[operator]
    c2s = [r.packet_type for r in records if r.direction == "c2s" and r.kind == "packet"]
    expected = ["PUBLISH", "SUBSCRIBE", "PUBLISH", "DISCONNECT"]
    assert c2s == (expected if is_connect else ["CONNECT", *expected])
    s2c = [r.packet_type for r in records if r.direction == "s2c"]
    assert s2c == ["CONNACK", "PUBACK", "SUBACK"]
    # The level is kept: from the CONNECT, or from the bad CONNECT's level byte when its
    # first 16 bytes came in one segment (else it is inferred from the traffic after it).
    source = "inferred" if is_connect and sizes == [3] else "connect"
    assert {(r.protocol_version, r.version_source) for r in records if r.kind == "packet"} == {
        (level, source)}
    check_accounting(records)


@pytest.mark.interop
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_packet_against_tshark(codec: ModuleType, name: str, tmp_path: Path) -> None:
    """tshark reports the bad packet and goes on: so do we, packet type by packet type."""
    segs, flow = _session(codec, name, [1460])
    path = tmp_path / f"{name}.pcapng"
    path.write_bytes(write(frames_for(flow, segs)))
    ours = Counter(int(PacketType[r.packet_type]) if r.packet_type != "RESERVED" else 0
                   for r in read(path.read_bytes(), codec))
    theirs = Counter(t for t, _ in tshark_packets(path, 1883))
    assert ours == theirs


def test_invalid_remaining_length_resynchronises(codec: ModuleType) -> None:
    """Five bytes of Remaining Length [MQTT-1.5.5-1... §2.2.3]: the framing is lost, so
    the rest of that segment is skipped, and decoding resumes at the next segment that
    starts with a packet."""
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    broken = bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]) + b"junk"
    segs = (flow.open() + flow.send(0, mw.Connect("c", protocol_version=4).encode(4))
            + flow.send(1, mw.ConnAck().encode(4)) + flow.send(0, broken)
            + flow.send(0, mw.PingReq().encode(4)) + flow.send(1, mw.PingResp().encode(4))
            + flow.close())
    records = read(write(frames_for(flow, segs)), codec)
    c2s = [(r.kind, r.packet_type, r.length) for r in records if r.direction == "c2s"]
    assert c2s == [("packet", "CONNECT", 15), ("error", None, len(broken)),
                   ("packet", "PINGREQ", 2)]
    err = next(r for r in records if r.kind == "error")
    assert "Remaining Length" in err.error  # type: ignore[operator]
    check_accounting(records)


@pytest.mark.parametrize("sizes", [[1460], [3]], ids=["whole", "in-3-byte-segments"])
def test_oversized_bad_packet_resynchronises(codec: ModuleType, sizes: list[int]) -> None:
    """A bad packet claiming more than resync_limit bytes (1 MiB by default): its length
    is not trusted, and the bytes up to the next trusted boundary are skipped, saying
    why."""
    mw = codec
    flow = TcpFlow(CLIENT, SERVER)
    # A PUBLISH with QoS 3 [MQTT-3.3.1-4] that claims 2,000,000 bytes: 0x80 0x89 0x7A
    # is 0 + 9 * 128 + 122 * 128**2.
    bad = bytes([0x36, 0x80, 0x89, 0x7A]) + bytes(96)
    segs = (flow.open() + flow.send(0, mw.Connect("c", protocol_version=4).encode(4))
            + flow.send(1, mw.ConnAck().encode(4)) + flow.send(0, bad, sizes)
            + flow.send(0, bytes(50), sizes) + flow.send(0, mw.PingReq().encode(4))
            + flow.close())
    records = read(write(frames_for(flow, segs)), codec)
    c2s = [r for r in records if r.direction == "c2s"]
    assert [r.kind for r in c2s] == ["packet", "error", "error", "packet"]
    # The bad packet's error covers what had come when its length was known (the whole
    # first segment, or the two 3-byte segments that hold its header); the rest, to the
    # PINGREQ's segment, is skipped.
    assert c2s[1].length == (100 if sizes == [1460] else 6)
    assert c2s[1].length + c2s[2].length == 150  # type: ignore[operator]
    assert "[MQTT-3.3.1-4]" in c2s[1].error  # type: ignore[operator]
    assert c2s[2].error == ("skipped: no trusted packet boundary after a packet whose "
                            "length could not be trusted")
    check_accounting(records)
