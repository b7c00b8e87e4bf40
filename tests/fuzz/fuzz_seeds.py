"""Seed inputs for the fuzz targets, built from the valid corpus tests/vectors/valid.json.

Each seed is laid out as its target expects (see fuzz_targets.py): the vectors themselves
for ``decode_from`` and ``body``, sessions of them for ``stream``, the topic names and
filters they carry for ``topics``, and synthetic pcap/pcapng captures and segment lists of
a session for ``capture`` and ``reassembler``.  Nothing here is written to the repository:
``run.py seed DIR`` writes the seeds to files for atheris, and the bounded test uses them
in memory.
"""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

from mqttwire import _pure as mw
from mqttwire.capture.writers import Frame, TcpFlow, write_pcap, write_pcapng

VECTORS_FILE = Path(__file__).resolve().parent.parent / "vectors" / "valid.json"


def vectors() -> list[tuple[str, bytes, int]]:
    """(name, packet bytes, level) of every vector, in name order."""
    corpus = json.loads(VECTORS_FILE.read_text())
    return [(name, bytes.fromhex(e["hex"]), e["version"]) for name, e in sorted(corpus.items())]


def _header_length(packet: bytes) -> int:
    i = 1
    while packet[i] & 0x80:
        i += 1
    return i + 1


def _session(version: int) -> list[tuple[int, bytes]]:
    """(side, bytes) of a short session at ``version``: client 0, server 1."""
    props = mw.Properties(user_properties=[("k", "v")], topic_alias=3) if version == 5 else None
    packets = [
        (0, mw.Connect("fuzz", protocol_version=version, keep_alive=30)),
        (1, mw.ConnAck()),
        (0, mw.Subscribe(1, [mw.Subscription("a/+/c", qos=1), mw.Subscription("#", qos=2)])),
        (1, mw.SubAck(1, [1, 2])),
        (0, mw.Publish("a/b/c", b"x" * 40, qos=1, packet_id=2, properties=props)),
        (1, mw.PubAck(2)),
        (0, mw.Publish("a/b/c", b"y", qos=2, packet_id=3)),
        (1, mw.PubRec(3)),
        (0, mw.PubRel(3)),
        (1, mw.PubComp(3)),
        (0, mw.PingReq()),
        (1, mw.PingResp()),
        (0, mw.Disconnect()),
    ]
    return [(side, p.encode(version)) for side, p in packets]


def _capture_frames(version: int) -> list[Frame]:
    flow = TcpFlow(("10.0.0.1", 40000), ("10.0.0.2", 1883), isn_client=0xFFFF_FFF0)
    segs = flow.open()
    for side, wire in _session(version):
        segs += flow.send(side, wire, (7, 1460))
        segs.append(flow.ack(1 - side))
    segs += flow.close()
    return [Frame(1_700_000_000_000_000_000 + i * 1000, flow.ip(s)) for i, s in enumerate(segs)]


def _segment_seed(version: int, cfg: int) -> bytes:
    """A session in the reassembler target's segment layout, offsets from each ISN."""
    out = bytearray([cfg])
    sent = [1, 1]  # the SYNs take one sequence number each
    # SYN, SYN-ACK, ACK
    out += struct.pack("!BBHH", 0x02, 0, 0, 0) + struct.pack("!BBHH", 0x12, 0x80, 0, 1)
    out += struct.pack("!BBHH", 0x10, 0, 1, 1)
    for side, wire in _session(version):
        for i in range(0, len(wire), 50):
            piece = wire[i : i + 50]
            out += struct.pack("!BBHH", 0x18, side << 7 | len(piece), sent[side],
                               sent[1 - side]) + piece
            sent[side] += len(piece)
    out += struct.pack("!BBHH", 0x11, 0, sent[0], sent[1])  # FIN from the client
    out += struct.pack("!BBHH", 0x11, 0x80, sent[1], sent[0] + 1)
    return bytes(out)


def seeds(target: str) -> list[bytes]:
    """The seed inputs of ``target``."""
    vecs = vectors()
    if target == "decode_from":
        return [bytes([level]) + data for _, data, level in vecs]
    if target == "body":
        out = []
        for _, data, level in vecs:
            cfg = 0x80 | level  # 0x80 fixes the flags; the rest % 3 picks the level
            out.append(bytes([data[0], cfg]) + data[_header_length(data):])
        return out
    if target == "stream":
        out = []
        for i, level in enumerate((3, 4, 5)):
            session = b"".join(w for _, w in _session(level))
            # cfg: version None (learn from CONNECT), then the level; limits None and 300.
            out += [bytes([0, i]) + session, bytes([(level - 2) | 6 << 2, i]) + session]
        out += [bytes([(level - 2) | 7 << 2, n]) + data
                for n, (_, data, level) in enumerate(vecs)]
        return out
    if target == "topics":
        names = ["a/b/c", "$SYS/x", "", "/", "a//b", "\u00e9/\u4e2d", "a/b/c/d/e/f/g"]
        filters = ["a/+/c", "#", "+/#", "$share/g/a/#", "$share/g/", "a/#/b", "+", "a+/b",
                   "$share//x", "$SYS/#", "a/b/c"]
        return [bytes([v]) + f.encode() + b"\xff" + n.encode()
                for v in (3, 4, 5) for f in filters for n in names]
    if target == "capture":
        out = []
        for level in (4, 5):
            frames = _capture_frames(level)
            for order in "<>":
                for fmt in (write_pcap, write_pcapng):
                    buf = io.BytesIO()
                    fmt(buf, frames, byteorder=order)
                    out.append(buf.getvalue())
        return out
    if target == "reassembler":
        return [_segment_seed(level, cfg) for level in (3, 4, 5) for cfg in (0, 3)]
    raise KeyError(target)

