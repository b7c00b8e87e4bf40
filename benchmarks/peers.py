"""The packets of the peer benchmarks, and one small adapter per codec.

Every codec gets the same bytes (encoded once by mqttwire._pure) and is called on its own
best path; where a peer's API forces extra work (framing by hand, an async reader, a client
object) the adapter says so.  An adapter answers, per operation:

- ``decoder(op)``: a function ``bytes -> native packet``, or None when the peer cannot
  decode that packet type or protocol level (reported as n/a);
- ``view(kind, native)``: the fields that the correctness check compares with mqttwire's;
- ``encoder(op)``: ``(function, native packet)`` with ``function(native) -> bytes``, or None;
- ``streamer(level)``: a function ``list of chunks -> number of packets``, or None;
- ``reader(op)``: decode, then read every field that ``view`` compares (what a consumer
  of the packet pays, whatever the codec builds at decode time and what on access), or
  None when the peer does not decode the packet.

A peer is timed on an operation only after it decoded (or encoded) that packet correctly:
``check_decode`` / ``check_encode`` return None when it did, else what went wrong.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import struct
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mqttwire import Properties, _pure

Decoder = Callable[[bytes], Any]
Encoder = Callable[[Any], bytes]
Streamer = Callable[[list], int]


@dataclass(frozen=True)
class Op:
    """One packet of the benchmark at one protocol level."""

    name: str  # e.g. "publish-qos0-small"
    kind: str  # "publish", "connect", "puback" or "subscribe"
    level: int  # 4 (MQTT 3.1.1) or 5 (MQTT 5.0)

    @property
    def id(self) -> str:
        return f"{self.name} v{self.level}"

    def packet(self, m: ModuleType = _pure) -> Any:
        """The packet built with mqttwire module ``m``."""
        return _BUILDERS[self.name](m, self.level)

    def wire(self) -> bytes:
        return self.packet().encode(self.level)


_BUILDERS: dict[str, Callable[[ModuleType, int], Any]] = {
    "publish-qos0-small": lambda m, v: m.Publish("sensors/temp", b"22.5"),
    "publish-qos1-1KiB": lambda m, v: m.Publish(
        "fleet/truck/42/telemetry", b"x" * 1024, qos=1, packet_id=7
    ),
    "publish-v5-props": lambda m, v: m.Publish(
        "request/42",
        b'{"cmd":"status"}',
        properties=Properties(
            message_expiry_interval=300,
            response_topic="response/42",
            correlation_data=b"\x00\x01corr",
            user_properties=[("trace", "7f3a"), ("unit", "C")],
        ),
    ),
    "connect-will-v5": lambda m, v: m.Connect(
        "client-0001",
        protocol_version=5,
        keep_alive=30,
        username="u",
        password=b"secret",
        will=m.Will(
            "status/client-0001",
            b"offline",
            qos=1,
            retain=True,
            properties=Properties(will_delay_interval=10),
        ),
        properties=Properties(session_expiry_interval=3600, receive_maximum=100),
    ),
    "puback": lambda m, v: m.PubAck(0x644A),
    "subscribe-3-filters": lambda m, v: m.Subscribe(
        10, [m.Subscription("a/b"), m.Subscription("c/+/d", qos=1), m.Subscription("e/#", qos=2)]
    ),
}

OPS = [
    Op("publish-qos0-small", "publish", 4),
    Op("publish-qos0-small", "publish", 5),
    Op("publish-qos1-1KiB", "publish", 4),
    Op("publish-qos1-1KiB", "publish", 5),
    Op("publish-v5-props", "publish", 5),
    Op("connect-will-v5", "connect", 5),
    Op("puback", "puback", 4),
    Op("puback", "puback", 5),
    Op("subscribe-3-filters", "subscribe", 4),
    Op("subscribe-3-filters", "subscribe", 5),
]
STREAM_OP = {4: Op("publish-qos0-small", "publish", 4), 5: Op("publish-qos0-small", "publish", 5)}

#: Decode and encode operations per timed call (bench_peers.py, peers_paired.py): one
#: timer read and one call of the harness's for many operations.
PER_CALL = 100


def batched(fn: Callable[[Any], Any], arg: Any) -> Callable[[], Any]:
    """A function that calls ``fn(arg)`` PER_CALL times, returning the last result."""
    loop = range(PER_CALL)

    def run() -> Any:
        for _ in loop:
            result = fn(arg)
        return result

    return run


def reference_view(kind: str, p: Any) -> tuple:
    """The fields every peer must reproduce, read from an mqttwire packet.

    Also mqttwire's own view in the "decode and read" rows.  Like every peer's view, it
    reads each field as a consumer does and converts only what would not compare equal
    otherwise (mqtt5's QoS object, paho's topic bytes): every peer's decoded payload is
    bytes already, so ``bytes(payload)`` would time a call no consumer makes (about 1,000
    instructions, a tenth of the v5 PUBLISH row; peers.md, "The views convert nothing")."""
    if kind == "publish":
        pr = p.properties
        if pr is None:
            return (p.topic, p.payload, p.qos, p.packet_id, None, None, None, ())
        return (
            p.topic,
            p.payload,
            p.qos,
            p.packet_id,
            pr.message_expiry_interval,
            pr.response_topic,
            pr.correlation_data,
            tuple(pr.user_properties or ()),
        )
    if kind == "puback":
        return (p.packet_id,)
    if kind == "subscribe":
        return (p.packet_id, tuple((s.topic_filter, s.qos) for s in p.subscriptions))
    w, pr = p.will, p.properties
    return (
        p.client_id,
        p.keep_alive,
        p.username,
        p.password,
        w.topic,
        w.payload,
        w.qos,
        w.retain,
        w.properties.will_delay_interval,
        pr.session_expiry_interval,
        pr.receive_maximum,
    )


def _varint_header(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int] | None:
    """(body start, body end) of the packet at ``pos``, None if incomplete; no checks.

    For peers whose decoders take the body only (paho) and for the struct floor."""
    n = len(data)
    length = mult = 0
    i = pos + 1
    while True:
        if i >= n:
            return None
        b = data[i]
        length += (b & 0x7F) << mult
        i += 1
        if not b & 0x80:
            break
        mult += 7
    end = i + length
    return (i, end) if end <= n else None


class Peer:
    """Base adapter: everything n/a."""

    name = "?"
    dist = ""  # PyPI distribution, for the version
    pure_python = True
    levels: tuple[int, ...] = (4, 5)
    module: str = ""  # importable module; missing -> the peer is skipped

    def available(self) -> bool:
        try:
            importlib.import_module(self.module)
        except ImportError:
            return False
        return True

    def version(self) -> str:
        return importlib.metadata.version(self.dist) if self.dist else "-"

    def decoder(self, op: Op) -> Decoder | None:
        return None

    def view(self, kind: str, native: Any) -> tuple:
        return reference_view(kind, native)

    def encoder(self, op: Op) -> tuple[Encoder, Any] | None:
        return None

    def streamer(self, level: int) -> Streamer | None:
        return None

    def reader(self, op: Op) -> Decoder | None:
        decode = self.decoder(op) if op.level in self.levels else None
        if decode is None:
            return None
        view, kind = self.view, op.kind
        return lambda data: view(kind, decode(data))


class MqttWire(Peer):
    """mqttwire: ``decode`` / ``pkt.encode`` / ``StreamDecoder.feed``."""

    def __init__(self, module: str, label: str, pure: bool) -> None:
        self.module, self.name, self.pure_python = module, label, pure

    def version(self) -> str:
        return importlib.metadata.version("mqttwire") if _installed("mqttwire") else "source tree"

    def decoder(self, op: Op) -> Decoder:
        decode, level = importlib.import_module(self.module).decode, op.level
        return lambda data: decode(data, version=level)

    def encoder(self, op: Op) -> tuple[Encoder, Any]:
        level = op.level
        return (lambda pkt: pkt.encode(level)), op.packet(importlib.import_module(self.module))

    def streamer(self, level: int) -> Streamer:
        m = importlib.import_module(self.module)

        def run(chunks: list) -> int:
            feed = m.StreamDecoder(level).feed
            return sum(len(feed(c)) for c in chunks)

        return run


class StructFloor(Peer):
    """Plain Python, ``struct`` and slicing, no validation at all: the floor for a pure-Python
    PUBLISH decoder.  It returns a tuple; MQTT 5.0 properties come back as raw bytes, so the
    v5 check compares topic, payload, QoS and packet id only (and the v5-with-properties
    packet is n/a)."""

    name, module = "struct floor (no validation)", "struct"

    def decoder(self, op: Op) -> Decoder | None:
        if op.kind != "publish" or op.name == "publish-v5-props":
            return None
        floor = _floor_v5 if op.level == 5 else _floor_v4
        # Through an adapter lambda, as every codec is called, so that the ratios compare
        # the decoders and not the call shapes (one Python call: 264 against 292 ns for
        # the small v3.1.1 PUBLISH in the runs of peers.md before and after this change).
        return lambda data: floor(data)

    def view(self, kind: str, native: Any) -> tuple:
        return native + (None, None, None, ())

    def encoder(self, op: Op) -> tuple[Encoder, Any] | None:
        if op.kind != "publish" or op.name == "publish-v5-props":
            return None
        p = op.packet()
        native = (p.topic, p.payload, p.qos, p.packet_id)
        floor = _floor_encode_v5 if op.level == 5 else _floor_encode_v4
        return (lambda t: floor(t)), native  # an adapter lambda, as in decoder()

    def streamer(self, level: int) -> Streamer:
        decode = _floor_v5 if level == 5 else _floor_v4
        return lambda chunks: _framed_stream(chunks, decode)


_unpack_h = struct.Struct("!H").unpack_from


def _floor_v4(data: bytes) -> tuple:
    # Remaining Length assumed to be one byte when it fits (the usual small packet).
    pos = 2 if data[1] < 0x80 else _varint_header(data, 0)[0]  # type: ignore[index]
    (tlen,) = _unpack_h(data, pos)
    topic = data[pos + 2 : pos + 2 + tlen].decode()
    pos += 2 + tlen
    qos = (data[0] >> 1) & 3
    pid = None
    if qos:
        (pid,) = _unpack_h(data, pos)
        pos += 2
    return (topic, data[pos:], qos, pid)


def _floor_v5(data: bytes) -> tuple:
    pos = 2 if data[1] < 0x80 else _varint_header(data, 0)[0]  # type: ignore[index]
    (tlen,) = _unpack_h(data, pos)
    topic = data[pos + 2 : pos + 2 + tlen].decode()
    pos += 2 + tlen
    qos = (data[0] >> 1) & 3
    pid = None
    if qos:
        (pid,) = _unpack_h(data, pos)
        pos += 2
    plen = data[pos]  # property length, one byte in these packets
    return (topic, data[pos + 1 + plen :], qos, pid)


def _floor_encode(p: tuple, props: bytes) -> bytes:
    topic, payload, qos, pid = p
    t = topic.encode()
    body = (
        struct.pack("!H", len(t)) + t + (struct.pack("!H", pid) if qos else b"") + props + payload
    )
    n, rl = len(body), bytearray()
    while True:
        n, b = n >> 7, n & 0x7F
        rl.append(b | 0x80 if n else b)
        if not n:
            break
    return bytes((0x30 | qos << 1,)) + bytes(rl) + body


def _floor_encode_v4(p: tuple) -> bytes:
    return _floor_encode(p, b"")


def _floor_encode_v5(p: tuple) -> bytes:
    return _floor_encode(p, b"\x00")


def _framed_stream(chunks: list, decode: Callable[[bytes], Any]) -> int:
    """Stream loop for decoders that take one whole packet: frame by hand in a bytearray."""
    buf, count = bytearray(), 0
    for chunk in chunks:
        buf += chunk
        pos = 0
        while (span := _varint_header(buf, pos)) is not None:
            decode(bytes(buf[pos : span[1]]))
            count += 1
            pos = span[1]
        del buf[:pos]
    return count


class Mqtt5(Peer):
    """mqtt5 (Rust, PyO3), MQTT 5.0 only: ``mqtt5.read(buffer) -> (packet, size)`` and
    ``packet.write()``.  It has no stream decoder: the stream adapter keeps a bytearray and
    treats ``IndexError("Not enough bytes")`` as "incomplete"."""

    name, dist, module, pure_python, levels = "mqtt5 (Rust)", "mqtt5", "mqtt5", False, (5,)

    def decoder(self, op: Op) -> Decoder | None:
        if op.level != 5:
            return None
        read = importlib.import_module("mqtt5").read
        return lambda data: read(data)[0]

    def view(self, kind: str, n: Any) -> tuple:
        if kind == "publish":
            return (
                n.topic,
                n.payload,
                int(n.qos),
                n.packet_id,
                n.message_expiry_interval,
                n.response_topic,
                n.correlation_data,
                tuple(n.user_properties),
            )
        if kind == "puback":
            return (n.packet_id,)
        if kind == "subscribe":
            return (n.packet_id, tuple((f.pattern, int(f.max_qos)) for f in n.topic_filters))
        w = n.will
        return (
            n.client_id,
            n.keep_alive,
            n.username,
            n.password,
            w.topic,
            w.payload,
            int(w.qos),
            w.retain,
            w.will_delay_interval,
            n.session_expiry_interval,
            n.receive_max,
        )

    def encoder(self, op: Op) -> tuple[Encoder, Any] | None:
        if op.level != 5:
            return None
        m, p = importlib.import_module("mqtt5"), op.packet()
        if op.kind == "publish":
            pr = p.properties
            kw = (
                {}
                if pr is None
                else dict(
                    message_expiry_interval=pr.message_expiry_interval,
                    response_topic=pr.response_topic,
                    correlation_data=pr.correlation_data,
                    user_properties=list(pr.user_properties),
                )
            )
            native = m.PublishPacket(
                p.topic, p.payload, qos=m.QoS(p.qos), packet_id=p.packet_id, **kw
            )
        elif op.kind == "puback":
            native = m.PubAckPacket(p.packet_id)
        elif op.kind == "subscribe":
            native = m.SubscribePacket(
                p.packet_id,
                [
                    m.TopicFilter(s.topic_filter, max_qos=m.QoS(s.qos), retain_as_published=False)
                    for s in p.subscriptions
                ],
            )
        else:
            w = p.will
            native = m.ConnectPacket(
                p.client_id,
                username=p.username,
                password=p.password,
                clean_start=True,
                keep_alive=p.keep_alive,
                session_expiry_interval=3600,
                receive_max=100,
                will=m.Will(
                    w.topic,
                    payload=w.payload,
                    qos=m.QoS(w.qos),
                    retain=w.retain,
                    will_delay_interval=10,
                ),
            )
        return (lambda pkt: pkt.write()), native

    def streamer(self, level: int) -> Streamer | None:
        if level != 5:
            return None
        read = importlib.import_module("mqtt5").read

        def run(chunks: list) -> int:
            buf, count = bytearray(), 0
            for chunk in chunks:
                buf += chunk
                view, pos = memoryview(buf), 0
                try:
                    while True:
                        _, size = read(view[pos:])
                        pos += size
                        count += 1
                except IndexError:  # "Not enough bytes": wait for the next chunk
                    pass
                view.release()
                del buf[:pos]
            return count

        return run


class Zmqtt(Peer):
    """zmqtt's I/O-free codec: ``codec.decode(buf, version=) -> (packet, size) | None``,
    ``codec.encode(packet, version=)``, and ``reader.PacketBuffer`` for streams."""

    name, dist, module = "zmqtt", "zmqtt", "zmqtt"

    @staticmethod
    def _v(level: int) -> str:
        return "5.0" if level == 5 else "3.1.1"

    def decoder(self, op: Op) -> Decoder:
        from zmqtt._internal.packets.codec import decode

        v = self._v(op.level)
        return lambda data: decode(data, version=v)[0]  # type: ignore[index]

    def view(self, kind: str, n: Any) -> tuple:
        if kind == "publish":
            pr = n.properties
            return (
                n.topic,
                n.payload,
                int(n.qos),
                n.packet_id,
                pr.message_expiry_interval if pr else None,
                pr.response_topic if pr else None,
                pr.correlation_data if pr else None,
                tuple(pr.user_properties) if pr else (),
            )
        if kind == "puback":
            return (n.packet_id,)
        if kind == "subscribe":
            return (n.packet_id, tuple((s.topic_filter, int(s.qos)) for s in n.subscriptions))
        w, pr = n.will, n.properties
        return (
            n.client_id,
            n.keepalive,
            n.username,
            n.password,
            w.topic,
            w.payload,
            int(w.qos),
            w.retain,
            w.properties.will_delay_interval,
            pr.session_expiry_interval,
            pr.receive_maximum,
        )

    def encoder(self, op: Op) -> tuple[Encoder, Any]:
        from zmqtt import QoS
        from zmqtt._internal.packets import codec, connect, publish, subscribe
        from zmqtt._internal.packets import properties as zp

        p, v = op.packet(), self._v(op.level)
        if op.kind == "publish":
            pr = p.properties
            props = (
                None
                if pr is None
                else zp.PublishProperties(
                    message_expiry_interval=pr.message_expiry_interval,
                    response_topic=pr.response_topic,
                    correlation_data=pr.correlation_data,
                    user_properties=tuple(pr.user_properties),
                )
            )
            native = publish.Publish(
                topic=p.topic,
                payload=p.payload,
                qos=QoS(p.qos),
                retain=False,
                dup=False,
                packet_id=p.packet_id,
                properties=props,
            )
        elif op.kind == "puback":
            native = publish.PubAck(packet_id=p.packet_id)
        elif op.kind == "subscribe":
            native = subscribe.Subscribe(
                packet_id=p.packet_id,
                subscriptions=tuple(
                    subscribe.SubscriptionRequest(topic_filter=s.topic_filter, qos=QoS(s.qos))
                    for s in p.subscriptions
                ),
            )
        else:
            w = p.will
            native = connect.Connect(
                client_id=p.client_id,
                clean_session=True,
                keepalive=p.keep_alive,
                username=p.username,
                password=p.password,
                will=connect.Will(
                    topic=w.topic,
                    payload=w.payload,
                    qos=QoS(w.qos),
                    retain=w.retain,
                    properties=zp.WillProperties(will_delay_interval=10),
                ),
                properties=zp.ConnectProperties(session_expiry_interval=3600, receive_maximum=100),
            )
        encode = codec.encode
        return (lambda pkt: encode(pkt, version=v)), native

    def streamer(self, level: int) -> Streamer:
        from zmqtt._internal.packets.reader import PacketBuffer

        v = self._v(level)

        def run(chunks: list) -> int:
            pb, count = PacketBuffer(v), 0
            for chunk in chunks:
                pb.feed(chunk)
                for _ in pb:
                    count += 1
            return count

        return run


class Paho(Peer):
    """paho-mqtt's internal decoders (``paho.mqtt._packet.decode_publish`` / ``decode_puback``),
    which take the first byte and the body: the adapter finds the body itself (paho does that
    inside ``Client._packet_read`` on the socket).  paho is a client, so it decodes only what a
    server sends (no CONNECT, no SUBSCRIBE), and its encoders are ``Client._send_*`` methods that
    queue on the socket: encode is n/a."""

    name, dist, module = "paho-mqtt (internal)", "paho-mqtt", "paho.mqtt._packet"

    def decoder(self, op: Op) -> Decoder | None:
        if op.kind not in ("publish", "puback"):
            return None
        from paho.mqtt import _packet
        from paho.mqtt.enums import MQTTProtocolVersion

        fn = _packet.decode_publish if op.kind == "publish" else _packet.decode_puback
        proto = MQTTProtocolVersion.MQTTv5 if op.level == 5 else MQTTProtocolVersion.MQTTv311

        def decode(data: bytes) -> Any:
            start, end = _varint_header(data, 0)  # type: ignore[misc]
            return fn(data[0], data[start:end], proto)

        return decode

    def view(self, kind: str, n: Any) -> tuple:
        if kind == "puback":
            return (n.mid,)
        pr = n.properties

        def get(name: str) -> Any:
            return getattr(pr, name, None) if pr is not None else None

        return (
            n.topic.decode(),
            n.payload,
            n.qos,
            n.mid or None,
            get("MessageExpiryInterval"),
            get("ResponseTopic"),
            get("CorrelationData"),
            tuple(get("UserProperty") or ()),
        )

    def streamer(self, level: int) -> Streamer:
        decode = self.decoder(STREAM_OP[level])
        return lambda chunks: _framed_stream(chunks, decode)  # type: ignore[arg-type]


class Amqtt(Peer):
    """amqtt (broker and client), MQTT 3.1.1 only.  Its decoders are coroutines reading an
    async stream (``XPacket.from_stream(reader)``); the adapter drives the coroutine with
    ``send(None)`` over an in-memory ``BufferReader`` (it never suspends there), which is
    cheaper than an event loop.  The stream adapter joins the chunks first (amqtt reads from an
    asyncio StreamReader, no incremental bytes-in API)."""

    name, dist, module, levels = "amqtt", "amqtt", "amqtt.mqtt", (4,)

    _CLASSES = {
        "publish": "publish.PublishPacket",
        "puback": "puback.PubackPacket",
        "subscribe": "subscribe.SubscribePacket",
        "connect": "connect.ConnectPacket",
    }

    def _cls(self, kind: str) -> Any:
        mod, cls = self._CLASSES[kind].split(".")
        return getattr(importlib.import_module(f"amqtt.mqtt.{mod}"), cls)

    def decoder(self, op: Op) -> Decoder | None:
        if op.level != 4:
            return None
        from amqtt.adapters import BufferReader

        from_stream = self._cls(op.kind).from_stream
        return lambda data: _run(from_stream(BufferReader(data)))

    def view(self, kind: str, n: Any) -> tuple:
        if kind == "publish":
            return (n.topic_name, n.data, n.qos, n.packet_id, None, None, None, ())
        if kind == "puback":
            return (n.packet_id,)
        return (n.variable_header.packet_id, tuple(tuple(t) for t in n.payload.topics))

    def encoder(self, op: Op) -> tuple[Encoder, Any] | None:
        if op.level != 4 or op.kind == "connect":
            return None
        p = op.packet()
        if op.kind == "publish":
            native = self._cls("publish").build(
                p.topic, p.payload, p.packet_id, False, p.qos, False
            )
        elif op.kind == "puback":
            native = self._cls("puback").build(p.packet_id)
        else:
            native = self._cls("subscribe").build(
                [(s.topic_filter, s.qos) for s in p.subscriptions], p.packet_id
            )
        return (lambda pkt: pkt.to_bytes()), native

    def streamer(self, level: int) -> Streamer | None:
        if level != 4:
            return None
        from amqtt.adapters import BufferReader

        from_stream = self._cls("publish").from_stream

        def run(chunks: list) -> int:
            data = b"".join(chunks)
            reader, count = BufferReader(data), 0
            while count < len(data) and _run(from_stream(reader)) is not None:
                count += 1
                if reader._stream.tell() == len(data):
                    break
            return count

        return run


def _run(coro: Any) -> Any:
    """Run a coroutine that never suspends, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended")


class Gmqtt(Peer):
    """gmqtt (asyncio client).  Its encoders are ``PackageFactory.build_package`` class methods
    that take a protocol object (for the level and the packet id generator: the adapter passes
    a stub that hands out the packet's id).  Its PUBLISH decoder is the client's handler method
    ``MqttPackageHandler._handle_publish_packet(cmd, body)``, which ends by calling
    ``on_message(topic, payload, qos, properties)``: the adapter calls it on a handler with a
    capturing callback, after finding the body itself.  QoS > 0 decode is n/a (the handler
    then sends PUBACK through the connection)."""

    name, dist, module = "gmqtt", "gmqtt", "gmqtt"

    def decoder(self, op: Op) -> Decoder | None:
        if op.kind != "publish" or op.packet().qos:
            return None
        import logging

        from gmqtt.mqtt.handler import MqttPackageHandler

        h = object.__new__(MqttPackageHandler)
        h._connection_state = _Stub(protocol_version=op.level)
        h._server_topics_aliases = {}
        h._logger = logging.getLogger("gmqtt-bench")
        out: list = []
        h._on_message_callback = lambda *args: out.append(args)
        handle = h._handle_publish_packet

        def decode(data: bytes) -> Any:
            start, end = _varint_header(data, 0)  # type: ignore[misc]
            handle(data[0], data[start:end])
            return out.pop() if out else None  # the handler drops some packets silently

        return decode

    def view(self, kind: str, n: Any) -> tuple:
        topic, payload, qos, props = n

        def one(name: str) -> Any:
            return props.get(name, [None])[0]

        return (
            topic,
            payload,
            qos,
            None,
            one("message_expiry_interval"),
            one("response_topic"),
            one("correlation_data"),
            tuple(props.get("user_property", ())),
        )

    def encoder(self, op: Op) -> tuple[Encoder, Any] | None:
        from gmqtt.client import Message
        from gmqtt.mqtt import package
        from gmqtt.subscription import Subscription

        p = op.packet()
        proto = _Stub(
            proto_ver=op.level,
            id_generator=_Stub(next_id=lambda: getattr(p, "packet_id", None) or 1),
        )
        if op.kind == "publish":
            pr = p.properties
            kw = (
                {}
                if pr is None
                else dict(
                    message_expiry_interval=pr.message_expiry_interval,
                    response_topic=pr.response_topic,
                    correlation_data=pr.correlation_data,
                    user_property=list(pr.user_properties),
                )
            )
            native = Message(p.topic, p.payload, qos=p.qos, **kw)
            build = package.PublishPacket.build_package
            return (lambda msg: bytes(build(msg, proto)[1])), native
        if op.kind == "puback":
            cmd = package.CommandWithMidPacket.build_package
            return (lambda mid: cmd(0x40, mid, False, proto_ver=op.level)), p.packet_id
        if op.kind == "subscribe":
            subs = [Subscription(s.topic_filter, qos=s.qos) for s in p.subscriptions]
            build_sub = package.SubscribePacket.build_package
            return (lambda s: bytes(build_sub(s, proto)[1])), subs
        return None


class _Stub:
    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


PEERS: list[Peer] = [
    MqttWire("mqttwire._speedups", "mqttwire cython", pure=False),
    MqttWire("mqttwire._pure", "mqttwire python", pure=True),
    StructFloor(),
    Mqtt5(),
    Zmqtt(),
    Paho(),
    Gmqtt(),
    Amqtt(),
]


def check_decode(peer: Peer, op: Op) -> str | None:
    """None if ``peer`` decodes ``op``'s bytes to the reference fields, else what differs."""
    decode = peer.decoder(op)
    assert decode is not None
    want = reference_view(op.kind, op.packet())
    try:
        got = peer.view(op.kind, decode(op.wire()))
    except Exception as exc:  # a peer that crashes is reported, not timed
        return f"raised {type(exc).__name__}: {exc}"
    if peer.name.startswith("struct") and op.level == 5:
        want = want[:4] + (None, None, None, ())
    return None if got == want else f"decoded {got!r}, want {want!r}"


def check_encode(peer: Peer, op: Op) -> str | None:
    """None if ``peer``'s encoding decodes (by mqttwire) to the reference packet."""
    enc = peer.encoder(op)
    assert enc is not None
    fn, native = enc
    try:
        got = _pure.decode(fn(native), version=op.level)
    except Exception as exc:
        return f"encoding not accepted by mqttwire: {type(exc).__name__}: {exc}"
    want = op.packet()
    return None if got == want else f"encoded {got!r}, want {want!r}"
