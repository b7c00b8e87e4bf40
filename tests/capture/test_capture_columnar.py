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
from loop_checks import check_decoded, cython_codec, reference_packets_table

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


def _odd_packets(mw: Any, version: int) -> list[bytes]:
    """Packets the compiled loop's direct reading leaves to the decoder (each whole and
    valid, or bad in a way the decoder reports), as the bytes of one client's stream."""
    odd = [mw.Publish("t/ü", b"non-ASCII topic").encode(version),
           mw.Publish("t", b"dup", qos=1, packet_id=7, dup=True).encode(version),
           mw.Publish("t", b"qos 2", qos=2, packet_id=8).encode(version),
           mw.PubRec(9).encode(version),
           # a Remaining Length not in its shortest form: 0x82 0x00 [MQTT-1.5.5-1]
           b"\x30\x82\x00" + mw.Publish("t", b"").encode(version)[2:],
           # a wildcard in a topic name [MQTT-3.3.2-2]
           b"\x30\x05\x00\x03a/+" + (b"\x00" if version == 5 else b""),
           # a packet identifier of 0 [MQTT-2.2.1-3]
           b"\x40\x02\x00\x00"]
    if version == 5:
        odd += [mw.Publish("t", b"props", properties=mw.Properties(content_type="a")
                           ).encode(5),
                mw.PubAck(10, reason_code=0x10,
                          properties=mw.Properties(reason_string="r")).encode(5),
                b"\x40\x03\x00\x0b\x01",  # reason code 0x01: not a PUBACK's
                b"\x40\x04\x00\x0c\x00\x00"]  # an empty property block
    return odd


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example])
@given(data=st.data(), version=st.sampled_from([3, 4, 5]),
       limit=st.sampled_from([None, 0, 3]))
def test_segments_the_direct_reading_hands_over(data: st.DataObject, version: int,
                                                limit: int | None) -> None:
    """Several packets to a segment, the common ones (which the loop reads without the
    decoder) mixed with others (which it leaves to the decoder from there on, errors
    included): the tables are the reference's, and the common packets before the first
    other one of each segment were read directly."""
    from mqttwire.spark import columnar, decoding

    mw = cython_codec()
    odd = _odd_packets(mw, version)
    flow = TcpFlow(("10.3.0.1", 43000), ("10.3.0.99", 1883))
    segs = flow.open()
    segs += flow.send(0, mw.Connect("cd", protocol_version=version).encode(version))
    segs += flow.send(1, mw.ConnAck().encode(version))
    common = 0  # packets the direct reading must take
    for _ in range(data.draw(st.integers(1, 8))):
        packets = []
        leading = True
        for _ in range(data.draw(st.integers(1, 6))):
            kind = data.draw(st.sampled_from(["pub0", "pub1", "puback", "odd"]))
            if kind == "odd":
                packets.append(data.draw(st.sampled_from(odd)))
                leading = False
                continue
            pid = data.draw(st.integers(1, 3))
            if kind == "puback":
                code = data.draw(st.sampled_from([0, 0x10, 0x80])) if version == 5 else 0
                packets.append(mw.PubAck(pid, reason_code=code).encode(version))
            else:
                qos = int(kind[3])
                packets.append(mw.Publish(data.draw(st.sampled_from(["a", "b/c"])),
                                          b"xyz", qos=qos, packet_id=pid if qos else None,
                                          retain=data.draw(st.booleans())).encode(version))
            common += leading
        segs += flow.send(0, b"".join(packets), sizes=[1 << 16])
    segs += flow.close()
    raw = write([Frame(T0 + i * 1000, flow.ip(s)) for i, s in enumerate(segs)])
    check_decoded(raw, None, "z.pcap", [1883], limit, None)
    list(decoding.decode_capture(io.BytesIO(raw), "z.pcap", payload_limit=limit))
    # A bad packet ends the decoding of the stream, so later segments may be the pure
    # code's: at least the first segment's leading common packets were read directly.
    assert columnar.last_counts.direct <= common


def test_the_direct_reading_takes_the_common_packets() -> None:
    """The loop reads the common packets of a stream (PUBLISH of QoS 0 and 1, PUBACK),
    each whole in its segment, without the decoder; a packet cut by a segment's end
    goes through the decoder."""
    from mqttwire.spark import columnar, decoding

    mw = cython_codec()
    for version in (3, 4, 5):
        flow = TcpFlow(("10.4.0.1", 44000), ("10.4.0.99", 1883))
        segs = flow.open()
        segs += flow.send(0, mw.Connect("ce", protocol_version=version).encode(version))
        segs += flow.send(1, mw.ConnAck().encode(version))
        burst = b"".join(mw.Publish("a/b", b"%d" % i, qos=i % 2,
                                    packet_id=i + 1 if i % 2 else None).encode(version)
                         for i in range(10))
        segs += flow.send(0, burst, sizes=[1 << 16])
        segs += flow.send(1, b"".join(mw.PubAck(i + 1).encode(version)
                                      for i in range(1, 10, 2)), sizes=[1 << 16])
        # the same burst again, cut inside its third packet after its fixed header (the
        # decoder then knows the packet's size)
        cut = (len(mw.Publish("a/b", b"0").encode(version))
               + len(mw.Publish("a/b", b"1", qos=1, packet_id=2).encode(version)) + 4)
        segs += flow.send(0, burst, sizes=[cut, 1 << 16])
        segs += flow.close()
        raw = write([Frame(T0 + i * 1000, flow.ip(s)) for i, s in enumerate(segs)])
        check_decoded(raw, None, "d.pcap", [1883], None, None)
        list(decoding.decode_capture(io.BytesIO(raw), "d.pcap"))
        # 10 + 5 + 2 (before the cut) + 7 (after the packet the cut completes)
        assert columnar.last_counts.direct == 24, version
        assert columnar.last_counts.fast == 25


def test_the_direct_rows_layout_is_the_packets_table_s() -> None:
    """The packets columns that the compiled loop's directly read packets are written into
    from C values (arrow_c.DIRECT_LAYOUT) are the packets table's own columns: the sink
    of PACKETS writes them so, and one of another layout writes every row by
    PacketColumns.row."""
    from mqttwire.capture import arrow_c
    from mqttwire.capture.arrow import column_spec, sink
    from mqttwire.spark.schema import ERRORS, PACKETS

    shared = {"capture", "kind", "connection_id", "direction", "transport", "src_ip",
              "src_port", "dst_ip", "dst_port", "client_id", "protocol_version",
              "version_source"}
    assert tuple(s for s in column_spec(PACKETS) if s[0] not in shared) == (
        arrow_c.DIRECT_LAYOUT)
    assert sink(PACKETS).direct_layout
    assert not sink(ERRORS).direct_layout


@pytest.mark.parametrize("limit", [None, 0, 5, 1 << 20])
def test_direct_rows_over_batches(monkeypatch: pytest.MonkeyPatch, limit: int | None) -> None:
    """Many packets read directly (PUBLISH of QoS 0 and 1, retained or not, topics and
    payloads of several sizes, PUBACKs with and without a reason code), several to a
    frame and over many batches of the packets table (their rows written from C values):
    the tables are the reference's, for decode_capture and for packets_table."""
    from mqttwire.capture import read_capture
    from mqttwire.capture.arrow import packets_table
    from mqttwire.spark import columnar, decoding

    monkeypatch.setattr(decoding, "BATCH_ROWS", 700)
    mw = cython_codec()
    frames: list[Frame] = []
    expected_direct = 0
    for n, version in enumerate((3, 4, 5)):
        flow = TcpFlow((f"10.5.0.{n + 1}", 45000 + n), ("10.5.0.99", 1883))
        segs = flow.open()
        segs += flow.send(0, mw.Connect(f"cf{n}", protocol_version=version).encode(version))
        segs += flow.send(1, mw.ConnAck().encode(version))
        for burst in range(60):
            pubs, acks = [], []
            for i in range(12):
                qos = (burst + i) % 2
                pid = (burst * 12 + i) % 65535 + 1
                pubs.append(mw.Publish(f"{'t' * (1 + i % 4)}/{i}",
                                       b"p" * ((burst + i) % 9), qos=qos,
                                       packet_id=pid if qos else None,
                                       retain=i % 5 == 0 and n == 0).encode(version))
                if qos:
                    code = (0x10, 0x80, 0)[i % 3] if version == 5 else 0
                    acks.append(mw.PubAck(pid, reason_code=code).encode(version))
            segs += flow.send(0, b"".join(pubs), sizes=[1 << 16])
            segs += flow.send(1, b"".join(acks), sizes=[1 << 16])
            expected_direct += len(pubs) + len(acks)
        segs += flow.send(0, mw.Disconnect().encode(version))
        segs += flow.close()
        frames += [Frame(T0 + (len(frames) + i) * 1000, flow.ip(s)) for i, s in enumerate(segs)]
    raw = write(frames)
    check_decoded(raw, None, "b.pcap", [1883], limit, None)
    assert columnar.last_counts.direct == expected_direct
    table = packets_table(io.BytesIO(raw), name="b.pcap", codec=mw, payload_limit=limit)
    records = list(read_capture(io.BytesIO(raw), name="b.pcap", codec=mw,
                                payload_limit=limit))
    assert table.equals(reference_packets_table(records))
