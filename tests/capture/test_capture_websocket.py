"""MQTT over WebSocket in captures (mqttwire/capture/websocket.py): synthetic sessions
with frames split and joined every way, control frames and masking, each rule's bad
bytes; and real captures of paho-mqtt talking MQTT 3.1.1 to amqtt's WebSocket listener
and MQTT 5.0 to examples/broker.py behind the websockets package (ws_broker.py)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from capture_helpers import Sent, conversation, encode_all, frames_for, read, write
from local_servers import free_port, stop, wait_for_log
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from test_capture_live import maker  # the live tests' tcpdump

import mqttwire
from mqttwire.capture import Record, read_capture
from mqttwire.capture.writers import (
    Segment,
    TcpFlow,
    websocket_frame,
    websocket_request,
    websocket_response,
)

WS_PORT = 8080  # not an MQTT port of these reads: found by its Upgrade
MQTT_PORT = 1883
PING, PONG, CLOSE = 9, 10, 8


@dataclass
class Expected:
    """A packet as sent over WebSocket: its side, the packet, its MQTT bytes, and the TCP
    stream offset of the frame holding its first byte."""

    side: int
    packet: Any
    wire: bytes
    frame_offset: int


class WsSession:
    """A WebSocket connection built side by side: the handshake, then frames; keeps each
    side's TCP stream length and the segments in order."""

    def __init__(self, port: int = WS_PORT, *, request: bytes | None = None,
                 response: bytes | None = None, sizes: tuple[int, ...] = (1460,),
                 seed: int = 1) -> None:
        self.flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", port))
        self.segs: list[Segment] = self.flow.open()
        self.sizes = sizes
        self.length = [0, 0]
        self.streams = (bytearray(), bytearray())  # each side's TCP stream
        self.rng = random.Random(seed)
        self.send(0, websocket_request() if request is None else request)
        self.send(1, websocket_response() if response is None else response)
        self.handshake = len(self.segs)  # the segments up to the handshake's end

    def send(self, side: int, data: bytes) -> int:
        """Send ``data`` from ``side``; returns its TCP stream offset."""
        at = self.length[side]
        self.segs += self.flow.send(side, data, self.sizes)
        self.segs.append(self.flow.ack(1 - side))
        self.length[side] += len(data)
        self.streams[side].extend(data)
        return at

    def mask(self, side: int) -> bytes | None:
        return self.rng.randbytes(4) if side == 0 else None

    def frame(self, side: int, payload: bytes, **kw: Any) -> bytes:
        kw.setdefault("mask", self.mask(side))
        return websocket_frame(payload, **kw)

    def capture(self, *, close: bool = True) -> bytes:
        segs = self.segs + (self.flow.close() if close else [])
        return write(frames_for(self.flow, segs))


def _cuts(run: bytes, starts: list[int], style: str) -> list[int]:
    """Where the frames of a run of packets (starting at ``starts`` in ``run``) end."""
    ends = sorted(set(starts[1:]) | {len(run)})
    if style == "one":  # a frame per packet
        return ends
    if style == "joined":  # one frame for the run
        return [len(run)]
    # "split", "fragmented": a packet's first byte alone (as MQTT Explorer sends it),
    # the rest in pieces of at most 50 bytes
    cuts = set(ends)
    for start, end in zip(starts, ends):
        cuts.add(start + 1)
        cuts.update(range(start + 1, end, 50))
    return sorted(c for c in cuts if 0 < c <= len(run))


def send_packets(ws: WsSession, sent: list[Any], style: str) -> list[Expected]:
    """Send the packets ``sent`` (capture_helpers.Sent) over ``ws``: each run of one
    side's packets as frames cut by ``style``; "fragmented" sends each run as one
    fragmented message with a ping (client) or pong (server) between its frames."""
    out: list[Expected] = []
    i = 0
    while i < len(sent):
        side = sent[i].side
        run = b""
        starts: list[int] = []
        first = i
        while i < len(sent) and sent[i].side == side:
            starts.append(len(run))
            run += sent[i].wire
            i += 1
        data = b""
        header_at: list[tuple[int, int]] = []  # (run offset of payload, frame offset)
        prev = 0
        cuts = _cuts(run, starts, style)
        for k, cut in enumerate(cuts):
            base = ws.length[side] + len(data)
            header_at.append((prev, base))
            if style == "fragmented":
                last = k == len(cuts) - 1
                data += ws.frame(side, run[prev:cut], opcode=0 if k else 2, fin=last)
                if k == 0:
                    data += ws.frame(side, b"hi", opcode=PING if side == 0 else PONG)
            else:
                data += ws.frame(side, run[prev:cut])
            prev = cut
        ws.send(side, data)
        for j, start in enumerate(starts):
            offset = max(at for payload, at in header_at if payload <= start)
            s = sent[first + j]
            out.append(Expected(side, s.packet, s.wire, offset))
    return out


def _packets(records: list[Record]) -> list[Record]:
    return [r for r in records if r.kind == "packet"]


def _check(records: list[Record], expected: list[Expected], version: int) -> None:
    got = _packets(records)
    assert [r for r in records if r.kind not in ("packet", "end")] == []
    assert [(r.direction, r.packet) for r in got] == [
        ("c2s" if e.side == 0 else "s2c", e.packet) for e in expected]
    assert [(r.stream_offset, r.length) for r in got] == [
        (e.frame_offset, len(e.wire)) for e in expected]
    assert {(r.transport, r.protocol_version) for r in got} == {("websocket", version)}


# ---------------------------------------------------------------------------------------
# Synthetic sessions


@pytest.mark.parametrize("style", ["one", "joined", "split", "fragmented"])
@pytest.mark.parametrize("version", [3, 4, 5])
def test_every_framing_decodes(codec: ModuleType, style: str,
                               version: int) -> None:
    protocol = "mqttv3.1" if version == 3 else "mqtt"
    ws = WsSession(request=websocket_request(f"{protocol}, other"),
                   response=websocket_response(protocol), sizes=(7, 300, 1))
    expected = send_packets(ws, encode_all(conversation(codec, version), version), style)
    ws.send(0, ws.frame(0, b"\x03\xe8", opcode=CLOSE))
    ws.send(1, ws.frame(1, b"\x03\xe8", opcode=CLOSE))
    records = read(ws.capture(), codec, stream_ends=True, payload_limit=4096)
    _check(records, expected, version)
    _check_offsets(records, ws)
    ends = [(r.direction, r.stream_offset, r.transport) for r in records if r.kind == "end"]
    assert sorted(ends) == [("c2s", ws.length[0], "websocket"),
                            ("s2c", ws.length[1], "websocket")]
    assert records[-1].kind == "end"


@pytest.mark.parametrize("port", [WS_PORT, MQTT_PORT])
def test_on_any_port_and_on_the_mqtt_port(codec: ModuleType,
                                          port: int) -> None:
    ws = WsSession(port, sizes=(5, 64))
    expected = send_packets(ws, encode_all(conversation(codec, 5), 5), "one")
    _check(read(ws.capture(), codec, ports=[MQTT_PORT]), expected, 5)


@pytest.mark.parametrize("style", ["one", "split", "joined"])
def test_decoded_as_the_same_bytes_on_tcp(codec: ModuleType, style: str) -> None:
    """Bad packets included: the records of a WebSocket connection are those of the same
    MQTT bytes on plain TCP, their stream_offset the frame holding the first byte,
    error_offset that byte in the TCP stream."""
    sent = encode_all(conversation(codec, 4), 4)
    qos3 = bytes([0x36, 5, 0, 1]) + b"t" + bytes([0, 1])  # [MQTT-3.3.1-4]
    utf8 = bytes([0x30, 4, 0, 1, 0xFF, 0x41])  # topic "\xff": found at its byte 4
    bad = [Sent(0, None, qos3, 0), Sent(1, None, bytes([0x00, 0]), 0),  # type 0: reserved
           Sent(0, None, utf8, 0)]
    sent = sent[:5] + bad[:1] + sent[5:8] + bad[1:] + sent[8:]
    ws = WsSession(sizes=(9, 700))
    expected = send_packets(ws, sent, style)
    over_ws = read(ws.capture(), codec)
    tcp = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", MQTT_PORT))
    segs = tcp.open()
    for s in sent:
        segs += tcp.send(s.side, s.wire) + [tcp.ack(1 - s.side)]
    over_tcp = read(write(frames_for(tcp, segs)), codec)
    assert len(over_ws) == len(over_tcp) == len(sent)
    same = ("kind", "direction", "length", "packet_type", "flags", "packet", "error",
            "reason_code", "client_id", "protocol_version")
    # The TCP records' offsets are MQTT offsets; the frames that hold them, by side.
    handshake = (len(websocket_request()), len(websocket_response()))
    frames = [_unframe(bytes(ws.streams[side]), handshake[side])[1] for side in (0, 1)]
    errors = 0
    for w, t, e in zip(over_ws, over_tcp, expected):
        assert [getattr(w, f) for f in same] == [getattr(t, f) for f in same]
        assert (w.transport, t.transport, w.stream_offset) == ("websocket", "tcp",
                                                               e.frame_offset)
        if t.error_offset is not None:  # the same byte, in the frame that holds it
            first, _, payload = max(f for f in frames[e.side] if f[0] <= t.error_offset)
            assert w.error_offset == payload + t.error_offset - first
            errors += 1
    assert errors == 3


def _check_offsets(records: list[Record], ws: WsSession) -> None:
    """Each direction's packet and error records, in order, tile the MQTT bytes of its
    binary messages, each at the header of the frame holding its first byte (the test's
    own reading of the frames, _unframe)."""
    for side, name in enumerate(("c2s", "s2c")):
        stream = bytes(ws.streams[side])
        mqtt_bytes, frames = _unframe(stream, stream.index(b"\r\n\r\n") + 4)
        pos = 0
        for rec in records:
            if rec.direction == name and rec.kind in ("packet", "error"):
                assert rec.stream_offset == max(f for f in frames if f[0] <= pos)[1], rec
                pos += rec.length  # type: ignore[operator]
        assert pos == len(mqtt_bytes)


def test_a_long_connection_and_a_resynchronisation(codec: ModuleType) -> None:
    """Thousands of frames (websocket.py forgets the old ones as decoding moves on), then
    a Remaining Length that is not valid: the MQTT decoding looks for a trusted packet
    start at later frames, past 2,000 frames of bytes that start none."""
    conv = [(0, codec.Connect("long", protocol_version=4)), (1, codec.ConnAck())]
    conv += [(0, codec.Publish(f"t/{i}", b"x")) for i in range(3000)]
    ws = WsSession(sizes=(1460,))
    send_packets(ws, encode_all(conv, 4), "one")
    ws.send(0, ws.frame(0, bytes([0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])))
    ws.send(0, b"".join(ws.frame(0, b"\x00\x00") for _ in range(2000)))
    ws.send(0, b"".join(ws.frame(0, codec.PingReq().encode(4)) for _ in range(3)))
    records = read(ws.capture(), codec)
    kinds = [(r.kind, r.packet_type) for r in records if r.direction == "c2s"]
    assert kinds[:3001] == [("packet", "CONNECT")] + [("packet", "PUBLISH")] * 3000
    assert [k for k, _ in kinds[3001:-3]] == ["error", "error"]
    assert kinds[-3:] == [("packet", "PINGREQ")] * 3
    _check_offsets(records, ws)


def test_a_large_packet_across_frames_and_segments(codec: ModuleType) -> None:
    payload = bytes(range(256)) * 1000
    conv = [(0, codec.Connect("big", protocol_version=4)), (1, codec.ConnAck()),
            (0, codec.Publish("big/one", payload, qos=1, packet_id=1)), (1, codec.PubAck(1)),
            (1, codec.Publish("big/two", payload[:70000]))]
    ws = WsSession(sizes=(1460, 65483))
    expected = send_packets(ws, encode_all(conv, 4), "one")
    records = read(ws.capture(), codec, payload_limit=1 << 20)
    _check(records, expected, 4)
    assert [r.payload for r in _packets(records) if r.topic] == [payload, payload[:70000]]


def test_plain_mqtt_beside_websocket(codec: ModuleType) -> None:
    """Both transports in one capture, each connection with its own."""
    ws = WsSession()
    send_packets(ws, encode_all(conversation(codec, 4)[:2], 4), "one")
    plain = TcpFlow(("10.0.0.3", 50001), ("10.0.0.2", MQTT_PORT))
    segs = plain.open() + plain.send(0, codec.Connect("tcp", protocol_version=4).encode(4))
    raw = write(frames_for(ws.flow, ws.segs) + frames_for(plain, segs, start=100))
    records = read(raw, codec)
    assert {(r.client_id, r.transport) for r in records} == {("client", "websocket"),
                                                             ("tcp", "tcp")}


# ---------------------------------------------------------------------------------------
# What is not an Upgrade to MQTT


def test_a_websocket_for_something_else_is_ignored(codec: ModuleType) -> None:
    ws = WsSession(request=websocket_request("chat"), response=websocket_response("chat"))
    send_packets(ws, encode_all(conversation(codec, 4), 4), "one")
    assert read(ws.capture(), codec) == []


@pytest.mark.parametrize("request_bytes", [
    websocket_request().replace(b"HTTP/1.1", b"HTTP/1.0"),  # RFC 6455 §4.1: 1.1 or later
    websocket_request().replace(b"Upgrade: websocket\r\n", b""),
    websocket_request().replace(b"Sec-WebSocket-Key: ", b"X-Key: "),
    websocket_request("MQTT"),  # subprotocol names are compared as they are
    websocket_request().replace(b"GET ", b"POST "),
    b"GET /mqtt HTTP/1.1\r\nUpgrade websocket\r\n\r\n",  # no colon: no HTTP head
], ids=["http-1.0", "no-upgrade", "no-key", "MQTT", "post", "no-colon"])
def test_a_request_that_is_no_upgrade_to_mqtt(codec: ModuleType, request_bytes: bytes) -> None:
    ws = WsSession(request=request_bytes)
    send_packets(ws, encode_all(conversation(codec, 4), 4), "one")
    assert read(ws.capture(), codec) == []


def test_http_on_the_mqtt_port_is_decoded_as_mqtt(codec: ModuleType) -> None:
    """On an MQTT port, a request that is no Upgrade to MQTT is bytes that are not MQTT:
    error records (as any such bytes there), never a crash."""
    ws = WsSession(MQTT_PORT, request=websocket_request(None),
                   response=websocket_response(None))
    records = read(ws.capture(), codec)
    assert records and {(r.kind, r.transport) for r in records} == {("error", "tcp")}


@pytest.mark.parametrize("port", [WS_PORT, MQTT_PORT])
def test_a_request_cut_by_the_end(codec: ModuleType, port: int) -> None:
    """An Upgrade request that never completes: elsewhere ignored; on an MQTT port, its
    bytes are what they are there, bytes that are not MQTT."""
    flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", port))
    segs = flow.open() + flow.send(0, websocket_request()[:60], (7,)) + flow.close()
    records = read(write(frames_for(flow, segs)), codec, ports=[MQTT_PORT], stream_ends=True)
    if port == WS_PORT:
        assert records == []
    else:
        assert [(r.kind, r.transport) for r in records] == [
            ("error", "tcp"), ("end", "tcp"), ("end", "tcp")]
        assert (records[0].stream_offset, records[0].length) == (0, 60)


@pytest.mark.parametrize("port", [WS_PORT, MQTT_PORT])
def test_joined_inside_websocket_framing_is_not_decoded(codec: ModuleType,
                                                        port: int) -> None:
    """No Upgrade in the capture: ignored elsewhere; on an MQTT port, decoded as MQTT on
    TCP, mostly errors (a frame's bytes may happen to frame as a packet)."""
    ws = WsSession(port)
    send_packets(ws, encode_all(conversation(codec, 4), 4), "one")
    records = read(write(frames_for(ws.flow, ws.segs[5:])), codec, ports=[MQTT_PORT])
    if port == WS_PORT:
        assert records == []
    else:
        assert {r.transport for r in records} == {"tcp"}
        assert "error" in {r.kind for r in records}


# ---------------------------------------------------------------------------------------
# The handshake's rules


@pytest.mark.parametrize(("response", "error"), [
    (websocket_response(status="404 Not Found") + b"no such path",
     "a status other than 101 fails the handshake (RFC 6455 §4.1)"),
    (websocket_response(accept="AAAAAAAAAAAAAAAAAAAAAAAAAAA="),
     "does not answer the client's key (RFC 6455 §4.1, §4.2.2)"),
    (websocket_response(None), "it must select 'mqtt' [MQTT-6.0.0-4]"),
    (websocket_response("mqttv3.1"), "one the client offered (RFC 6455 §4.1)"),
    (websocket_response(upgrade=False), "lacks 'Upgrade: websocket' (RFC 6455 §4.1)"),
    (websocket_response().replace(b"Connection: Upgrade\r\n", b""),
     "lacks 'Connection: Upgrade' (RFC 6455 §4.1)"),
    (websocket_response(extra="Sec-WebSocket-Extensions: permessage-deflate\r\n"),
     "extension 'permessage-deflate': its frames are not decoded here"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n",
     "the server's response is not complete: cut short by the end of the stream"),
    (b"x" * 20000, "no HTTP head of at most 16384 bytes"),
])
def test_a_bad_upgrade_response(codec: ModuleType, response: bytes,
                                error: str) -> None:
    ws = WsSession(response=response)
    send_packets(ws, encode_all(conversation(codec, 4)[:4], 4), "one")
    records = read(ws.capture(), codec)
    assert records and {(r.kind, r.transport) for r in records} == {("error", "websocket")}
    s2c = [r for r in records if r.direction == "s2c"]
    first, *rest = s2c
    assert first.stream_offset == 0
    assert first.error.startswith("WebSocket handshake: ") and error in first.error
    if b"\r\n\r\n" in response:
        assert first.length == response.index(b"\r\n\r\n") + 4
    # The rest of each direction: skipped, in one record each (the client's bytes after
    # its request, the server's after its response).
    skipped = "skipped: not decoded after a failed WebSocket handshake"
    assert [r.error for r in rest] == [skipped] * len(rest)
    assert [r.length for r in s2c] and sum(r.length for r in s2c) == ws.length[1]
    request = len(websocket_request())
    (c2s,) = [r for r in records if r.direction == "c2s"]
    assert (c2s.stream_offset, c2s.length) == (request, ws.length[0] - request)
    assert c2s.error == skipped or c2s.error.startswith(
        "skipped: the server's WebSocket handshake response had not come")


def test_client_bytes_before_the_response_are_held_within_a_limit(codec: ModuleType) -> None:
    ws = WsSession(response=b"", sizes=(65000,))
    request = len(websocket_request())
    ws.send(0, ws.frame(0, b"\x00" * 2_000_000))
    # 1 MiB is held: the 17th segment of 65,000 bytes goes past it.
    over = request + 17 * 65000
    records = read(ws.capture(), codec)
    assert [(r.kind, r.direction, r.stream_offset, r.length) for r in records] == [
        ("error", "c2s", request, over - request), ("error", "c2s", over, ws.length[0] - over)]
    assert "without the server's answer; it must wait for the answer (RFC 6455 §4.1)" in (
        records[0].error)
    assert records[1].error == "skipped: after a WebSocket protocol error"


def test_client_frames_before_the_response_wait_for_it(codec: ModuleType) -> None:
    """Client bytes that arrive before the 101 (as the capture orders them) are held and
    decoded once the handshake completes."""
    sent = encode_all(conversation(codec, 4), 4)
    flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", WS_PORT))
    connect = websocket_frame(sent[0].wire, mask=b"\x01\x02\x03\x04")
    request = websocket_request()
    segs = flow.open() + flow.send(0, request + connect) + flow.send(1, websocket_response())
    records = read(write(frames_for(flow, segs)), codec)
    assert [(r.kind, r.packet_type, r.stream_offset) for r in records] == [
        ("packet", "CONNECT", len(request))]


# ---------------------------------------------------------------------------------------
# The frames' rules: each bad frame is one error record naming its rule, the rest of its
# direction one "skipped" record; the other direction goes on.

BAD_FRAMES = [
    ("text", 0, dict(opcode=1), "a text frame: MQTT packets travel in binary frames only "
                                "[MQTT-6.0.0-1] (MQTT 3.1.1 §6, MQTT 5.0 §6)"),
    ("unmasked client", 0, dict(mask=None), "an unmasked frame from the client: client "
                                            "frames are masked (RFC 6455 §5.1, §5.3)"),
    ("masked server", 1, dict(mask=b"abcd"), "a masked frame from the server: server "
                                             "frames are not masked (RFC 6455 §5.1)"),
    ("reserved opcode", 0, dict(opcode=3), "reserved opcode 3 (RFC 6455 §5.2)"),
    ("reserved control opcode", 1, dict(opcode=11), "reserved opcode 11 (RFC 6455 §5.2)"),
    ("rsv", 0, dict(rsv=0x40), "RSV bits 0x40 set, and no extension was negotiated "
                               "(RFC 6455 §5.2)"),
    ("long form", 1, dict(length_size=2), "a payload length not in its minimal form "
                                          "(RFC 6455 §5.2)"),
    ("fragmented ping", 0, dict(opcode=PING, fin=False),
     "a fragmented control frame (RFC 6455 §5.5)"),
    ("continuation", 0, dict(opcode=0), "a continuation frame with no fragmented message "
                                        "to continue (RFC 6455 §5.4)"),
]


def _bad_session(codec: ModuleType) -> tuple[WsSession, list[Expected]]:
    ws = WsSession(sizes=(3, 1460))
    return ws, send_packets(ws, encode_all(conversation(codec, 4)[:4], 4), "one")


def _check_violation(records: list[Record], side: int, at: int, end: int,
                     error: str) -> None:
    """The frame at TCP offset ``at`` of ``side`` broke the rule ``error``: its record
    runs to the end of its segment, and one more (if any bytes follow) to ``end``."""
    name = "c2s" if side == 0 else "s2c"
    bad = [r for r in records if r.kind == "error"]
    assert bad[0].direction == name and bad[0].transport == "websocket"
    assert bad[0].stream_offset == at
    assert bad[0].error == (f"WebSocket protocol error: {error}; the rest of this direction "
                            "is not decoded")
    rest = at + bad[0].length
    assert [(r.direction, r.stream_offset, r.length, r.error) for r in bad[1:]] == (
        [(name, rest, end - rest, "skipped: after a WebSocket protocol error")]
        if rest < end else [])


@pytest.mark.parametrize(("side", "kw", "error"), [b[1:] for b in BAD_FRAMES],
                         ids=[b[0] for b in BAD_FRAMES])
def test_a_bad_frame(codec: ModuleType, side: int, kw: dict[str, Any],
                     error: str) -> None:
    ws, expected = _bad_session(codec)
    kw = dict(kw)
    kw.setdefault("mask", ws.mask(side))
    bad = websocket_frame(codec.PingReq().encode(4) if side == 0 else codec.PingResp().encode(4),
                          **kw)
    at = ws.send(side, bad)
    ws.send(side, ws.frame(side, codec.PingReq().encode(4) if side == 0
                           else codec.PingResp().encode(4)))  # skipped
    # The other direction goes on.
    ws.send(1 - side, ws.frame(1 - side, codec.PingReq().encode(4) if side else
                               codec.PingResp().encode(4)))
    records = read(ws.capture(), codec)
    assert [r.packet for r in _packets(records)][:4] == [e.packet for e in expected]
    assert [r.packet_type for r in _packets(records)][4:] == [
        "PINGREQ" if side else "PINGRESP"]
    _check_violation(records, side, at, ws.length[side], error)


@pytest.mark.parametrize(("frames", "error"), [
    ([dict(opcode=2, fin=False), dict(opcode=2)],
     "a binary frame inside a fragmented message (RFC 6455 §5.4)"),
    ([dict(opcode=CLOSE), dict(opcode=PONG), dict(opcode=2)],
     "a data frame after the close frame (RFC 6455 §5.5.1)"),
    ([dict(opcode=PING, payload=b"x" * 126)], "a control frame of 126 bytes, over 125 "
                                              "(RFC 6455 §5.5)"),
])
def test_frames_out_of_order(codec: ModuleType, frames: list[dict[str, Any]],
                             error: str) -> None:
    ws, _ = _bad_session(codec)
    at = 0
    for kw in frames:
        kw = dict(kw)  # the parameter's dict is shared by the codecs' runs
        at = ws.send(0, ws.frame(0, kw.pop("payload", b""), **kw))
    records = read(ws.capture(), codec)
    _check_violation(records, 0, at, ws.length[0], error)


def test_a_64_bit_length_with_its_top_bit_set(codec: ModuleType) -> None:
    ws, _ = _bad_session(codec)
    at = ws.send(1, bytes([0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1]) + b"more")
    records = read(ws.capture(), codec)
    _check_violation(records, 1, at, ws.length[1], "a 64-bit payload length with its most "
                                                   "significant bit set (RFC 6455 §5.2)")


def test_a_packet_cut_by_a_bad_frame(codec: ModuleType) -> None:
    ws, _ = _bad_session(codec)
    wire = codec.Publish("a/b", b"x" * 40).encode(4)
    start = ws.send(0, ws.frame(0, wire[:10]))
    at = ws.send(0, ws.frame(0, wire[10:], opcode=1))
    records = read(ws.capture(), codec)
    cut, bad = [r for r in records if r.kind == "error"]
    assert (cut.stream_offset, cut.length, cut.error) == (
        start, 10, "incomplete packet: cut short by a WebSocket protocol error")
    assert bad.stream_offset == at and "[MQTT-6.0.0-1]" in bad.error


def test_lost_bytes_end_the_framing(codec: ModuleType) -> None:
    """After a gap, WebSocket framing is not resynchronised: the gap, then the rest of
    the direction skipped; the other direction goes on."""
    ws, _ = _bad_session(codec)
    ws.sizes = (1460,)
    lost = ws.send(0, ws.frame(0, codec.Publish("a/b", b"x" * 40).encode(4)))
    lost_seg = len(ws.segs) - 2
    after = ws.send(0, ws.frame(0, codec.PingReq().encode(4)))
    ws.send(1, ws.frame(1, codec.PingResp().encode(4)))
    segs = ws.segs[:lost_seg] + ws.segs[lost_seg + 1:] + ws.flow.close()
    records = read(write(frames_for(ws.flow, segs)), codec)
    rest = [(r.kind, r.direction, r.stream_offset, r.length, r.error, r.transport)
            for r in records if r.kind != "packet"]
    assert rest == [
        ("gap", "c2s", lost, after - lost, "bytes missing from the capture", "websocket"),
        ("error", "c2s", after, ws.length[0] - after,
         "skipped: WebSocket framing is not resynchronised after lost bytes", "websocket"),
    ]
    assert _packets(records)[-1].packet_type == "PINGRESP"


def test_a_frame_header_cut_by_the_end(codec: ModuleType) -> None:
    ws, _ = _bad_session(codec)
    at = ws.send(0, ws.frame(0, b"\xc0\x00")[:3])  # a masked frame's header is 6 bytes
    records = read(ws.capture(), codec)
    (cut,) = [r for r in records if r.kind == "error"]
    assert (cut.direction, cut.stream_offset, cut.length, cut.error) == (
        "c2s", at, 3, "incomplete WebSocket frame header: cut short by the end of the "
                      "stream (fin)")


@pytest.mark.parametrize("seed", range(12))
def test_random_bytes_and_lost_segments_never_crash(codec: ModuleType, seed: int) -> None:
    """Garbage after a valid handshake, or a valid session with segments lost: records
    (the conftest compares both loops'), never an exception or a hang."""
    rng = random.Random(seed)
    ws = WsSession(sizes=(rng.randint(1, 40),), seed=seed)
    if seed % 2:
        for _ in range(8):
            side = rng.randint(0, 1)
            ws.send(side, rng.randbytes(rng.randint(1, 200)))
        segs = ws.segs
    else:
        send_packets(ws, encode_all(conversation(codec, 5), 5),
                     rng.choice(["one", "joined", "split", "fragmented"]))
        segs = ws.segs[: ws.handshake] + [g for g in ws.segs[ws.handshake :]
                                          if not g.payload or rng.random() > 0.1]
    records = read(write(frames_for(ws.flow, segs + ws.flow.close())), codec,
                   stream_ends=True)
    assert {r.transport for r in records} == {"websocket"}
    assert sorted(r.direction for r in records if r.kind == "end") == ["c2s", "s2c"]


# ---------------------------------------------------------------------------------------
# Real captures: paho-mqtt over WebSocket, on 127.0.0.1, to amqtt's WebSocket listener at
# MQTT 3.1.1, and to the project's example broker behind the websockets package
# (ws_broker.py) at MQTT 5.0


@dataclass
class RealSession:
    """A capture of paho-mqtt clients talking MQTT over WebSocket to a broker, and what
    they sent and received."""

    path: Path
    port: int
    version: int
    sent: list[tuple[str, bytes, int]]  # (topic, payload, QoS) as published
    received: list[tuple[str, bytes, int]]  # as the subscriber's paho delivered them


SUB, PUB = "ws-sub", "ws-pub"
TOPIC_FILTER = "ws/#"
BROKERS = {"amqtt": 4, "example": 5}  # the broker, and the level its clients speak


@contextlib.contextmanager
def ws_broker(name: str, workdir: Path) -> Iterator[int]:
    """A broker with a WebSocket listener on a free port of 127.0.0.1, anonymous clients
    allowed: amqtt, or examples/broker.py behind ws_broker.py.  Yields the port.

    Ready when its log says it listens, not when the port answers: the free port may be
    taken meanwhile by another test's server, which would answer; amqtt then logs that
    its start failed and lives on, serving nothing.  So three tries, on new ports."""
    # The broker imports the mqttwire that this test imported, not another installed one.
    path = os.pathsep.join(filter(None, [str(Path(mqttwire.__file__).parents[1]),
                                         os.environ.get("PYTHONPATH")]))
    log = workdir / f"{name}.log"
    for _ in range(3):
        port = free_port()
        if name == "amqtt":
            conf = workdir / "amqtt.yaml"
            conf.write_text(
                f"listeners:\n  default:\n    type: ws\n    bind: 127.0.0.1:{port}\n"
                "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
                "    allow_anonymous: true\n")
            cmd = [sys.executable, "-c",
                   "from amqtt.scripts.broker_script import main; main()", "-c", str(conf)]
            ready, failed = [f"Listener 'default' bind to 127.0.0.1:{port}"], "startup failed"
        else:
            cmd = [sys.executable, str(Path(__file__).with_name("ws_broker.py")), str(port)]
            ready, failed = ["listening on"], None
        with log.open("wb") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": path})
        if wait_for_log(proc, log, ready, failed=failed):
            break
        stop(proc)
    else:
        pytest.fail(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        yield port
    finally:
        stop(proc)


def _paho(client_id: str, port: int, version: int) -> Any:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         transport="websockets",
                         protocol=mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311)
    client.ws_set_options(path="/mqtt")
    client.connect("127.0.0.1", port, keepalive=30)
    client.loop_start()
    return client


def _run_clients(port: int, version: int,
                 sent: list[tuple[str, bytes, int]]) -> list[tuple[str, bytes, int]]:
    received: list[tuple[str, bytes, int]] = []
    sub = _paho(SUB, port, version)
    sub.on_message = lambda _c, _u, m: received.append((m.topic, m.payload, m.qos))
    subscribed = threading.Event()
    sub.on_subscribe = lambda *_: subscribed.set()
    sub.subscribe(TOPIC_FILTER, qos=2)
    assert subscribed.wait(10), "no SUBACK"
    pub = _paho(PUB, port, version)
    props = None
    if version == 5:
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = ("via", "websocket")
    for topic, payload, qos in sent:
        pub.publish(topic, payload, qos=qos, properties=props).wait_for_publish(10)
    deadline = time.monotonic() + 20
    while len(received) < len(sent) and time.monotonic() < deadline:
        time.sleep(0.05)
    for client in (pub, sub):
        client.disconnect()
        client.loop_stop()
    return received


@pytest.fixture(scope="module", params=list(BROKERS))
def real(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> RealSession:
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump is not installed")
    name = request.param
    version = BROKERS[name]
    workdir = tmp_path_factory.mktemp(f"websocket-{name}")
    path = workdir / "websocket.pcap"
    sent = [("ws/qos0", b"zero", 0), ("ws/qos1", b"one", 1), ("ws/qos2", b"two", 2),
            ("ws/large", bytes(range(256)) * 400, 1)]  # 100 KiB: frames across segments
    with ws_broker(name, workdir) as port:
        try:
            with maker.tcpdump(str(path), port):
                received = _run_clients(port, version, sent)
        except RuntimeError as exc:  # tcpdump cannot capture here (no permission, no lo)
            pytest.skip(str(exc))
    return RealSession(path, port, version, sent, received)


@pytest.mark.interop
def test_real_capture_matches_what_was_sent(codec: ModuleType, real: RealSession) -> None:
    records = list(read_capture(real.path, codec=codec, payload_limit=1 << 20))
    assert records, "nothing decoded"
    assert [r for r in records if r.kind != "packet"] == []
    assert {r.transport for r in records} == {"websocket"}
    assert {r.protocol_version for r in records} == {real.version}
    # The same records when the broker's port is an MQTT port of the read.
    same = list(read_capture(real.path, codec=codec, payload_limit=1 << 20,
                             ports=[real.port]))
    assert [repr(r) for r in same] == [repr(r) for r in records]

    def kinds(client_id: str, direction: str) -> list[str]:
        return [r.packet_type for r in records  # type: ignore[misc]
                if r.client_id == client_id and r.direction == direction]

    published = [r for r in records if r.client_id == PUB and r.packet_type == "PUBLISH"]
    assert [(r.topic, r.payload, r.qos) for r in published] == real.sent
    if real.version == 5:
        assert {tuple(r.properties.user_properties) for r in published} == {
            (("via", "websocket"),)}
    assert kinds(PUB, "c2s") == ["CONNECT", "PUBLISH", "PUBLISH", "PUBLISH", "PUBREL",
                                 "PUBLISH", "DISCONNECT"]
    assert kinds(PUB, "s2c") == ["CONNACK", "PUBACK", "PUBREC", "PUBCOMP", "PUBACK"]
    (subscribe,) = [r for r in records if r.packet_type == "SUBSCRIBE"]
    assert (subscribe.client_id, subscribe.topic_filters) == (SUB, [TOPIC_FILTER])
    # What the subscriber received, in the order the broker sent it, which is the
    # publishing order (each publication completed before the next); paho hands an
    # incoming QoS 2 message over at its PUBREL, so its callbacks may come in another.
    delivered = [r for r in records if r.client_id == SUB and r.packet_type == "PUBLISH"]
    assert [(r.topic, r.payload) for r in delivered] == [(t, p) for t, p, _ in real.sent]
    assert sorted((r.topic, r.payload, r.qos) for r in delivered) == sorted(real.received)


def _follow(path: Path, index: int) -> tuple[bytes, bytes]:
    """The client's and the server's TCP stream of connection ``index`` (from 0), as
    tshark reassembles them (follow,tcp,raw: the server's lines are indented)."""
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    out = subprocess.run(["tshark", "-r", str(path), "-q", "-z", f"follow,tcp,raw,{index}"],
                         capture_output=True, check=True, timeout=120).stdout.decode()
    sides: tuple[list[bytes], list[bytes]] = ([], [])
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Node 1:")) + 1
    for line in lines[start:]:
        if line.startswith("="):
            break
        sides[line.startswith("\t")].append(bytes.fromhex(line.strip()))
    return b"".join(sides[0]), b"".join(sides[1])


@pytest.mark.interop
def _unframe(stream: bytes, start: int) -> tuple[bytes, list[tuple[int, int, int]]]:
    """The MQTT bytes of the binary messages in a WebSocket byte ``stream`` from offset
    ``start`` (after the handshake), and (MQTT offset, frame header's offset, payload's
    offset) of each frame with MQTT bytes: the test's own reading of RFC 6455 §5.2, for
    valid frames."""
    mqtt_bytes = bytearray()
    frames = []
    pos = start
    while pos < len(stream):
        b0, b1 = stream[pos], stream[pos + 1]
        n7 = b1 & 0x7F
        size = 2 + {126: 2, 127: 8}.get(n7, 0)
        length = int.from_bytes(stream[pos + 2 : pos + size], "big") if size > 2 else n7
        key = stream[pos + size : pos + size + 4] if b1 & 0x80 else b"\0\0\0\0"
        size += 4 if b1 & 0x80 else 0
        payload = bytes(c ^ key[i % 4] for i, c in enumerate(stream[pos + size :
                                                                    pos + size + length]))
        if b0 & 0x0F in (0, 2) and payload:
            frames.append((len(mqtt_bytes), pos, pos + size))
            mqtt_bytes += payload
        pos += size + length
    return bytes(mqtt_bytes), frames


def test_real_capture_offsets_point_at_frames(codec: ModuleType, real: RealSession) -> None:
    """In each direction's TCP stream as tshark reassembles it: the packet records, in
    order, tile the MQTT bytes of its binary messages, each packet's first byte is the
    one its type names, and its stream_offset is the header of the frame that holds
    that byte."""
    records = list(read_capture(real.path, codec=codec))
    checked = 0
    for conn_id in sorted({r.connection_id for r in records}):  # type: ignore[type-var]
        index = int(conn_id.split("#")[1]) - 1  # type: ignore[union-attr]
        streams = _follow(real.path, index)
        for side, name in enumerate(("c2s", "s2c")):
            stream = streams[side]
            mqtt_bytes, frames = _unframe(stream, stream.index(b"\r\n\r\n") + 4)
            pos = 0
            for rec in records:
                if rec.connection_id != conn_id or rec.direction != name:
                    continue
                holder = max(f for f in frames if f[0] <= pos)[1]
                assert rec.stream_offset == holder, rec
                assert mqtt_bytes[pos] == rec.packet.encode(rec.protocol_version)[0], rec
                pos += rec.length  # type: ignore[operator]
                checked += 1
            assert pos == len(mqtt_bytes)
    assert checked == len(records) >= 20


@pytest.mark.spark
@pytest.mark.interop
@pytest.mark.once
def test_real_capture_pipeline(real: RealSession, tmp_path: Path) -> None:
    """`mqttwire pipeline` on a real WebSocket capture (local[1], a process of its own):
    every row says websocket, the packets are those read_capture gives, and summary.md
    counts the WebSocket connections."""
    import pyarrow.dataset as ds

    from mqttwire.spark import JavaMissing, find_java

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "mqttwire", "pipeline", str(real.path), "--out",
                    str(out), "--master", "local[1]", "--progress", "0"],
                   check=True, timeout=600, capture_output=True)
    packets = ds.dataset(out / "packets", format="parquet", partitioning="hive")
    rows = packets.to_table().to_pylist()
    assert {(r["kind"], r["transport"]) for r in rows} == {("packet", "websocket")}
    records = list(read_capture(real.path))
    assert sorted((r["connection_id"], r["direction"], r["stream_offset"], r["length"])
                  for r in rows) == sorted((r.connection_id, r.direction, r.stream_offset,
                                            r.length) for r in records)
    connections = ds.dataset(out / "connections", format="parquet").to_table().to_pylist()
    assert sorted((c["client_id"], c["transport"]) for c in connections) == [
        (PUB, "websocket"), (SUB, "websocket")]
    assert "2 MQTT connections (2 over WebSocket)" in (out / "summary.md").read_text()
