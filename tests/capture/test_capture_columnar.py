"""The columnar path of a decoding task (mqttwire/spark/columnar.py: the compiled loop's
Arrow columns and the derived tables fed without a Record per packet) against the
reference (the pure loop's Records, CaptureTables.add record by record, ``pa.array``).

Every read of tests/capture also compares the two (its conftest.py); here, traffic made
to exercise the QoS exchanges and the retained store: packet ids reused and repeated,
acknowledgements missing, out of turn and failing, retransmissions, retained PUBLISHes
and their removal, several connections interleaved, some joined mid-stream, and a
pipeline task's shares."""

from __future__ import annotations

import io
from typing import Any

import pytest
from capture_helpers import T0, write
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_checks import check_decoded, cython_codec

from mqttwire.capture.writers import Frame, TcpFlow
from mqttwire.spark.connection_shares import Share

pytestmark = pytest.mark.c_extension  # the columnar path is the compiled loop's


@st.composite
def exchanges(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """One to three connections of PUBLISHes and acknowledgements drawn at random (few
    packet ids and topics, so that they collide), interleaved frame by frame."""
    mw = cython_codec()
    flows = []
    for n in range(draw(st.integers(1, 3))):
        version = draw(st.sampled_from([4, 5]))
        flow = TcpFlow((f"10.1.0.{n + 1}", 41000 + n), ("10.1.0.99", 1883))
        packets: list[tuple[int, Any]] = []
        mid_stream = draw(st.integers(0, 4)) == 0
        if not mid_stream:
            packets += [(0, mw.Connect(f"c{n}", protocol_version=version)), (1, mw.ConnAck())]
        for _ in range(draw(st.integers(0, 40))):
            side = draw(st.integers(0, 1))
            pid = draw(st.integers(1, 3))
            what = draw(st.sampled_from(["pub0", "pub1", "pub1", "pub2", "puback", "puback",
                                         "pubrec", "pubrel", "pubcomp"]))
            if what.startswith("pub") and what[3:].isdigit():
                qos = int(what[3:])
                packets.append((side, mw.Publish(
                    draw(st.sampled_from(["a", "b/c", "d"])),
                    draw(st.sampled_from([b"", b"x", b"payload"])), qos=qos,
                    packet_id=pid if qos else None,
                    retain=draw(st.integers(0, 3)) == 0,
                    dup=bool(qos) and draw(st.integers(0, 4)) == 0)))
            else:
                cls = {"puback": mw.PubAck, "pubrec": mw.PubRec, "pubrel": mw.PubRel,
                       "pubcomp": mw.PubComp}[what]
                code = (draw(st.sampled_from([0, 0, 0, 0x80 if what in ("puback", "pubrec")
                                              else 0x92])) if version == 5 else 0)
                packets.append((side, cls(pid, reason_code=code)))
        if draw(st.booleans()):
            packets.append((0, mw.Disconnect()))
        segs = [] if mid_stream else flow.open()
        for side, packet in packets:
            segs += flow.send(side, packet.encode(version))
            if draw(st.integers(0, 3)) == 0:
                segs.append(flow.ack(1 - side))
        ending = draw(st.sampled_from(["fin", "rst", "none"]))
        if ending == "fin":
            segs += flow.close(first=draw(st.integers(0, 1)))
        elif ending == "rst":
            segs.append(flow.reset(draw(st.integers(0, 1))))
        flows.append((flow, segs))
    frames: list[Frame] = []
    while any(segs for _, segs in flows):
        flow, segs = draw(st.sampled_from([f for f in flows if f[1]]))
        frames.append(Frame(T0 + len(frames) * 997, flow.ip(segs.pop(0))))
    raw = write(frames, draw(st.sampled_from(["pcap", "pcapng"])))
    return raw, {"payload_limit": draw(st.sampled_from([None, 0, 4, 1 << 20])),
                 "version": draw(st.sampled_from([None, None, 4, 5]))}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(capture=exchanges(), share=st.sampled_from([None, (0, 2), (1, 2), (2, 3)]))
def test_exchanges_columnar_equals_reference(capture: tuple[bytes, dict[str, Any]],
                                             share: tuple[int, int] | None) -> None:
    raw, options = capture
    check_decoded(raw, None, "x.pcap", [1883], options["payload_limit"], options["version"],
                  None if share is None else Share(*share))


def test_the_common_packets_make_no_record() -> None:
    """Of a connection's PUBLISH (QoS 0 and 1) and PUBACK packets, none is made a
    Record for the derived tables (the compiled path of both takes them); its CONNECT,
    CONNACK and DISCONNECT and its stream ends are the pure code's."""
    from mqttwire.spark import columnar, decoding

    mw = cython_codec()
    flow = TcpFlow(("10.2.0.1", 42000), ("10.2.0.99", 1883))
    segs = flow.open()
    packets: list[tuple[int, Any]] = [(0, mw.Connect("cc", protocol_version=4)),
                                      (1, mw.ConnAck())]
    for i in range(300):
        packets.append((0, mw.Publish("t", b"v", qos=i % 2, packet_id=(i % 50) + 1 if i % 2
                                      else None)))
        if i % 2:
            packets.append((1, mw.PubAck((i % 50) + 1)))
    packets.append((0, mw.Disconnect()))
    for side, packet in packets:
        segs += flow.send(side, packet.encode(4))
    segs += flow.close()
    raw = write([Frame(T0 + i * 1000, flow.ip(s)) for i, s in enumerate(segs)])
    check_decoded(raw, None, "y.pcap", [1883], None, None)
    list(decoding.decode_capture(io.BytesIO(raw), "y.pcap"))
    counts = columnar.last_counts
    # 300 PUBLISH and 150 PUBACK, all taken in compiled code (the CONNECT opened the
    # connection and set its first time).
    assert counts.fast == 450
    assert counts.fallbacks == 0
    assert counts.side == 3 + 2  # CONNECT, CONNACK, DISCONNECT; two stream ends
