"""Synthetic MQTT sessions for the capture tests: what was sent, and where it sits."""

from __future__ import annotations

import io
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from local_servers import sample_maker

from mqttwire.capture import Record, read_capture
from mqttwire.capture.link import TcpSegment, parse_frame
from mqttwire.capture.pcap import iter_frames
from mqttwire.capture.writers import Frame, Segment, TcpFlow, write_pcap, write_pcapng

T0 = 1_700_000_000_000_000_000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


#: examples/make_sample_capture.py: its broker, tcpdump and scenario helpers, for the
#: live captures.
maker = sample_maker()


@dataclass
class Sent:
    """A packet as sent: its side (0 client, 1 server), the packet, its bytes, and its
    stream offset in that side's stream."""

    side: int
    packet: Any
    wire: bytes
    offset: int


def conversation(mw: ModuleType, version: int, client_id: str = "client") -> list[tuple[int, Any]]:
    """A session that uses every packet type a 3.x or 5.0 session has."""
    v5 = version == 5
    props = mw.Properties
    conv: list[tuple[int, Any]] = [
        (0, mw.Connect(client_id, protocol_version=version, keep_alive=30)),
        (1, mw.ConnAck()),
        (0, mw.Subscribe(1, [mw.Subscription("sensors/+/temp", qos=1),
                             mw.Subscription("alerts/#", qos=2)])),
        (1, mw.SubAck(1, [1, 2])),
        (0, mw.Publish("sensors/a/temp", b"21.5")),
        (0, mw.Publish("sensors/b/temp", bytes(range(256)) * 12, qos=1, packet_id=2)),
        (1, mw.PubAck(2)),
        (0, mw.Publish("alerts/fire", b"!", qos=2, packet_id=3, retain=True)),
        (1, mw.PubRec(3)),
        (0, mw.PubRel(3)),
        (1, mw.PubComp(3)),
        (1, mw.Publish("sensors/a/temp", b"21.5", qos=1, packet_id=9)),
        (0, mw.PubAck(9)),
    ]
    if v5:
        conv += [
            (0, mw.Publish("alias/topic", b"one",
                           properties=props(topic_alias=4, user_properties=[("k", "v")]))),
            (0, mw.Publish("", b"two", properties=props(topic_alias=4))),
            (1, mw.Publish("down/alias", b"three", properties=props(topic_alias=4))),
            (1, mw.Publish("", b"four", qos=1, packet_id=10, properties=props(topic_alias=4))),
            (0, mw.PubAck(10)),
        ]
    conv += [
        (0, mw.Unsubscribe(4, ["alerts/#"])),
        (1, mw.UnsubAck(4, [0]) if v5 else mw.UnsubAck(4)),
        (0, mw.PingReq()),
        (1, mw.PingResp()),
        (0, mw.Disconnect()),
    ]
    return conv


def encode_all(conv: list[tuple[int, Any]], version: int) -> list[Sent]:
    offsets = [0, 0]
    out = []
    for side, packet in conv:
        wire = packet.encode(version)
        out.append(Sent(side, packet, wire, offsets[side]))
        offsets[side] += len(wire)
    return out


def segments_for(flow: TcpFlow, sent: list[Sent], sizes: Sequence[int] = (1460,)) -> list[Segment]:
    """The session's segments: each run of packets from one side is written as one
    byte string, cut into segments of ``sizes`` (cyclically); the other side ACKs it."""
    segs: list[Segment] = []
    i = 0
    while i < len(sent):
        side = sent[i].side
        run = b""
        while i < len(sent) and sent[i].side == side:
            run += sent[i].wire
            i += 1
        segs += flow.send(side, run, sizes)
        segs.append(flow.ack(1 - side))
    return segs


def stream_offset(flow: TcpFlow, seg: Segment) -> int:
    """The stream offset of ``seg``'s first byte: its distance from ISN + 1, mod 2**32."""
    isn = flow.isn_client if seg.side == 0 else flow.isn_server
    return (seg.seq - isn - 1) & 0xFFFFFFFF


def completing_segment(flow: TcpFlow, segs: list[Segment], side: int, end: int) -> int:
    """Index in ``segs`` of the (in-order) segment of ``side`` holding stream byte end-1."""
    for i, g in enumerate(segs):
        if g.side == side and g.payload:
            start = stream_offset(flow, g)
            if start < end <= start + len(g.payload):
                return i
    raise AssertionError(f"no segment ends the packet at {end}")


def frames_for(flow: TcpFlow, segs: list[Segment], *, start: int = 0, step: int = 1000,
               **frame_kw: Any) -> list[Frame]:
    return [Frame(T0 + (start + i) * step, flow.ip(s), **frame_kw) for i, s in enumerate(segs)]


def write(frames: list[Frame], fmt: str = "pcapng", **kw: Any) -> bytes:
    buf = io.BytesIO()
    (write_pcapng if fmt == "pcapng" else write_pcap)(buf, frames, **kw)
    return buf.getvalue()


def read(raw: bytes, codec: ModuleType, name: str = "t.pcapng", **kw: Any) -> list[Record]:
    return list(read_capture(io.BytesIO(raw), codec=codec, name=name, **kw))


def check_accounting(records: list[Record],
                     lengths: dict[tuple[str, str], int] | None = None) -> None:
    """Every byte of every direction is in exactly one packet, error or gap record:
    sorted by offset, the records tile [0, end) without holes or overlaps, and ``end``
    is the stream's length where ``lengths`` gives it."""
    spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for r in records:
        if r.kind in ("packet", "error", "gap"):
            assert r.connection_id and r.direction and r.length and r.length > 0, r
            key = (r.connection_id, r.direction)
            spans.setdefault(key, []).append((r.stream_offset, r.length))  # type: ignore[arg-type]
    for key, items in spans.items():
        items.sort()
        pos = 0
        for offset, length in items:
            assert offset == pos, (key, items)
            pos += length
        if lengths is not None:
            assert pos == lengths[key], (key, pos, lengths[key])


def tshark_packets(path: Path, port: int) -> list[tuple[int, list[str]]]:
    """(message type, topics) of every MQTT packet that tshark's dissector finds in the
    capture at ``path``, in wire order (tshark decodes the MQTT port ``port``)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    # -T pdml keeps each packet's fields together (-T fields can misalign columns when
    # one frame carries several MQTT packets, since each field's column then lists the
    # values of all of them).
    out = subprocess.run(["tshark", "-r", str(path), "-d", f"tcp.port=={port},mqtt",
                          "-T", "pdml"], capture_output=True, check=True, timeout=120).stdout
    found = []
    for proto in ET.fromstring(out).iter("proto"):
        if proto.get("name") == "mqtt":
            fields = list(proto.iter("field"))
            (msgtype,) = [int(f.get("show", "")) for f in fields if f.get("name") == "mqtt.msgtype"]
            topics = [f.get("show", "") for f in fields if f.get("name") == "mqtt.topic"]
            found.append((msgtype, topics))
    return found


def frame_senders(raw: bytes, port: int) -> dict[int, str]:
    """The direction of each frame's TCP segment, by frame number: "c2s" when it was sent
    to ``port`` (the MQTT server's), else "s2c"."""
    senders = {}
    for frame in iter_frames(io.BytesIO(raw)):
        seg = parse_frame(frame.linktype, frame.data)
        if isinstance(seg, TcpSegment):
            senders[frame.number] = "c2s" if seg.dport == port else "s2c"
    return senders


_OTHER = {"c2s": "s2c", "s2c": "c2s"}


def expected_exchanges(records: list[Record], senders: dict[int, str],
                       ) -> tuple[dict[tuple[Any, ...], str], int]:
    """From the packet records in capture order: each QoS 1/2 PUBLISH's status, keyed by
    (connection, direction, stream offset), and the number of acknowledgements that
    follow no PUBLISH of theirs in the capture.  Computed apart from the derived tables.

    Capture order is frame order (``senders``: :func:`frame_senders`), and within a frame
    the records of the direction that did not send it come first: a record has the frame
    of the segment that delivered its last byte, and a direction's bytes held behind a
    hole the capture missed are delivered by the other direction's segment that
    acknowledges the hole (tcp.py), so they were sent before it (stream offsets of the
    two directions say nothing of their order)."""
    packets = sorted((r for r in records if r.kind == "packet"),
                     key=lambda r: (r.frame, r.direction == senders.get(r.frame),
                                    r.stream_offset))
    open_: dict[tuple[Any, ...], dict[str, Any]] = {}
    status: dict[tuple[Any, ...], str] = {}
    unmatched = 0
    want = {1: ["PUBACK"], 2: ["PUBREC", "PUBREL", "PUBCOMP"]}
    for r in packets:
        if r.packet_type == "PUBLISH" and r.qos:
            key = (r.connection_id, r.direction, r.packet_id)
            open_[key] = {"id": (r.connection_id, r.direction, r.stream_offset), "qos": r.qos,
                          "steps": []}
            status[open_[key]["id"]] = "incomplete"
        elif r.packet_type in ("PUBACK", "PUBREC", "PUBREL", "PUBCOMP"):
            publisher = r.direction if r.packet_type == "PUBREL" else _OTHER[r.direction]
            ex = open_.get((r.connection_id, publisher, r.packet_id))
            if ex is None or len(ex["steps"]) >= len(want[ex["qos"]]) \
                    or want[ex["qos"]][len(ex["steps"])] != r.packet_type:
                unmatched += 1
                continue
            ex["steps"].append(r.packet_type)
            if ex["steps"] == want[ex["qos"]]:
                status[ex["id"]] = "complete"
                del open_[(r.connection_id, publisher, r.packet_id)]
    return status, unmatched
