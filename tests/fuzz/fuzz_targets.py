"""The fuzz targets: one per entry point, each a function of one ``bytes`` input.

Every target feeds the same input to both implementations (``mqttwire._speedups`` and
``mqttwire._pure``) and checks that they agree; a target returns normally when the input
was handled correctly (decoded, or refused with the documented error) and raises
``AssertionError`` (or lets any other exception out) when it finds a bug.  The same
functions serve three drivers:

- ``run.py fuzz TARGET`` runs one under atheris (coverage-guided libFuzzer);
- ``run.py replay TARGET DIR...`` runs one over saved inputs (corpora, crash files), without
  atheris, for the sanitizer build and for reproducing a finding;
- ``tests/codec/test_fuzz_bounded.py`` runs each over a few thousand mutated seeds in the suite.

Input layouts (the first bytes configure the call, the rest is the hostile data):

=============  ===========================================================================
target         input
=============  ===========================================================================
decode_from    ``[v] data``: ``decode`` and ``decode_from`` of ``data`` at level
               ``(3, 4, 5)[v % 3]`` (so a byte 3, 4 or 5 means that level)
stream         ``[cfg] [seed] data``: ``StreamDecoder(version, max_packet_size)`` from
               ``cfg``, fed ``data`` whole and in random chunks drawn from ``seed``
body           ``[b0] [cfg] body``: a fixed header for first byte ``b0`` with the right
               Remaining Length, then ``body``, at level ``(3, 4, 5)[(cfg & 0x7F) % 3]``
               (``cfg & 0x80`` corrects the flags of ``b0``): every packet type's body
               decoder, directly
topics         ``[v] filter 0xFF name``: validation, ``parse_shared``, ``topic_matches``
               and ``TopicTree`` on two arbitrary strings (UTF-8, bad bytes as lone
               surrogates)
capture        a pcap or pcapng file: ``iter_frames`` and ``read_capture``
reassembler    ``[cfg]`` then segments ``[flags] [side|len] [seq16] [ack16] payload``: the
               TCP reassembler, alone and under ``MqttStreams``
=============  ===========================================================================
"""

from __future__ import annotations

import dataclasses
import io
import random
import struct
from collections.abc import Callable
from types import ModuleType
from typing import Any

from mqttwire import MQTTWireError, _pure, _speedups
from mqttwire.capture import (
    CaptureFormatError,
    MqttStreams,
    TcpReassembler,
    TcpSegment,
    iter_frames,
    read_capture,
)

CODECS: tuple[ModuleType, ModuleType] = (_speedups, _pure)
LEVELS = (3, 4, 5)

#: StreamDecoder settings chosen by the ``stream`` target's first byte.
STREAM_VERSIONS = (None, 3, 4, 5)
STREAM_LIMITS = (None, 2, 5, 16, 64, 128, 300, 1024)


# ---------------------------------------------------------------------------------------
# Outcomes: what a call made of the input, comparable across the implementations.
# Packets of the two implementations compare equal when their fields do (the twins'
# __eq__ compares fields, not classes).


def error_outcome(exc: MQTTWireError) -> tuple[Any, ...]:
    """Everything an MQTTWireError says: class, reason code, offset, rule, message."""
    return ("error", type(exc).__name__, exc.reason_code, exc.offset, exc.rule, str(exc))


def decode_outcome(m: ModuleType, data: bytes, version: int) -> tuple[Any, ...]:
    """``m.decode(data)``: ("packet", packet) or the error."""
    try:
        return ("packet", m.decode(data, version=version))
    except MQTTWireError as exc:
        return error_outcome(exc)


def decode_from_outcome(m: ModuleType, data: bytes, offset: int,
                        version: int) -> tuple[Any, ...]:
    """``m.decode_from(data, offset)``: ("packet", packet, end), ("none",) or the error."""
    try:
        found = m.decode_from(data, offset, version=version)
    except MQTTWireError as exc:
        return error_outcome(exc)
    return ("none",) if found is None else ("packet", found[0], found[1])


def round_trip(packet_cy: Any, packet_py: Any, version: int, wire_length: int) -> None:
    """A decoded packet re-encodes, in both implementations, to the same bytes, no longer
    than the bytes it came from (encoding writes the shortest form), which decode to an
    equal packet."""
    encoded = []
    for m, packet in zip(CODECS, (packet_cy, packet_py)):
        try:
            data = m.encode(packet, version=version)
        except ValueError as exc:
            raise AssertionError(
                f"{m.__name__}: decoded {packet!r} but cannot encode it: {exc}"
            ) from exc
        again = m.decode(data, version=version)
        assert again == packet, (m.__name__, packet, data.hex(), again)
        encoded.append(data)
    assert encoded[0] == encoded[1], ("encodings differ", encoded[0].hex(), encoded[1].hex())
    assert len(encoded[0]) <= wire_length, ("re-encoding is longer", encoded[0].hex())


def forward_outcome(m: ModuleType, data: bytes) -> tuple[Any, ...]:
    """A v5 PUBLISH decoded afresh (its properties not read: the extension still holds the
    bare block) and forwarded with PreparedPublish to a v5 and a v4 subscriber: the
    copies, or the error."""
    try:
        prepared = m.PreparedPublish(m.decode(data, version=5))
        return ("forwarded",
                prepared.encode(5, qos=1, packet_id=9, subscription_identifiers=[3, 200],
                                message_expiry_interval=10),
                prepared.encode(5),
                prepared.encode(4, qos=2, packet_id=1))
    except MQTTWireError as exc:
        return error_outcome(exc)


def check_packet_bytes(data: bytes, version: int) -> None:
    """``decode`` and ``decode_from`` agree in both implementations; whatever decodes
    round-trips; a v5 PUBLISH is forwarded alike from its decoded property block."""
    if version == 5 and data[:1] and data[0] >> 4 == 3:
        forwarded = [forward_outcome(m, data) for m in CODECS]
        assert forwarded[0] == forwarded[1], ("forward", data.hex(), forwarded)
    whole = [decode_outcome(m, data, version) for m in CODECS]
    assert whole[0] == whole[1], ("decode", version, data.hex(), whole)
    # decode_from at an offset, with a PINGREQ before and after: the same packet, or the
    # same error two bytes further on.
    framed = b"\xc0\x00" + data + b"\xc0\x00"
    part = [decode_from_outcome(m, framed, 2, version) for m in CODECS]
    assert part[0] == part[1], ("decode_from", version, data.hex(), part)
    if whole[1][0] == "packet":
        assert part[1] == ("packet", whole[1][1], 2 + len(data)), (data.hex(), part[1])
        round_trip(whole[0][1], whole[1][1], version, len(data))
    elif part[1][0] == "error" and whole[1][1] != "IncompletePacket":
        # The same bad bytes are found at the same place, two bytes further on.
        shifted = None if whole[1][3] is None else whole[1][3] + 2
        assert part[1][1] == whole[1][1] and part[1][3] == shifted, (
            data.hex(), whole[1], part[1])


# ---------------------------------------------------------------------------------------
# Targets


def target_decode_from(data: bytes) -> None:
    """``decode``/``decode_from`` of arbitrary bytes."""
    if not data:
        return
    check_packet_bytes(data[1:], LEVELS[data[0] % 3])


def encode_varint(n: int) -> bytes:
    """The Remaining Length encoding of ``n`` (MQTT 5.0 §1.5.5), written here rather than
    taken from the codec under test."""
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


# The flags each packet type must carry (MQTT 5.0 §2.1.3): PUBREL, SUBSCRIBE and
# UNSUBSCRIBE 0b0010, PUBLISH its own, all others 0.
_FLAGS = {6: 0x2, 8: 0x2, 10: 0x2}


def target_body(data: bytes) -> None:
    """Every packet type's body decoder, reached directly: a correct fixed header is built
    around the fuzzed body, so the fuzzer need not find the Remaining Length."""
    if len(data) < 2:
        return
    b0, cfg, body = data[0], data[1], data[2:]
    if cfg & 0x80 and b0 >> 4 != 3:
        b0 = (b0 & 0xF0) | _FLAGS.get(b0 >> 4, 0)  # mostly-valid first bytes
    check_packet_bytes(bytes([b0]) + encode_varint(len(body)) + body, LEVELS[(cfg & 0x7F) % 3])


def chunks(data: bytes, seed: int) -> list[bytes]:
    """``data`` cut at random points drawn from ``seed`` (single bytes included)."""
    rng = random.Random(seed)
    out, pos = [], 0
    while pos < len(data):
        size = rng.choice((1, 1, 2, 3, rng.randint(1, 64), rng.randint(1, 4096)))
        out.append(data[pos : pos + size])
        pos += size
    return out


def stream_outcome(m: ModuleType, pieces: list[bytes], version: int | None,
                   limit: int | None) -> tuple[Any, ...]:
    """Feed ``pieces`` to a fresh StreamDecoder: (packets, error or None)."""
    dec = m.StreamDecoder(version, max_packet_size=limit)
    packets: list[Any] = []
    for piece in pieces:
        try:
            packets += dec.feed(piece)
        except MQTTWireError as exc:
            packets += exc.packets
            # A failed stream stays failed: the same error again, with no packets.
            try:
                dec.feed(b"\xc0\x00")
            except MQTTWireError as again:
                assert again is exc or error_outcome(again) == error_outcome(exc)
                assert again.packets == []
            else:
                raise AssertionError(f"{m.__name__}: feed() after an error did not raise")
            return packets, error_outcome(exc)
        # Memory stays bounded: one incomplete packet (at most max_packet_size bytes, or
        # the five bytes of a fixed header that cannot be judged yet).
        if limit is not None:
            assert dec.buffered <= max(limit, 5), (m.__name__, dec.buffered, limit)
    return packets, None


def target_stream(data: bytes) -> None:
    """StreamDecoder: the same packets and error whole and in random chunks, in both."""
    if len(data) < 2:
        return
    cfg, seed, rest = data[0], data[1], data[2:]
    version, limit = STREAM_VERSIONS[cfg & 3], STREAM_LIMITS[(cfg >> 2) & 7]
    pieces = chunks(rest, seed)
    whole = [stream_outcome(m, [rest], version, limit) for m in CODECS]
    assert whole[0] == whole[1], ("stream whole", cfg, rest.hex(), whole)
    split = [stream_outcome(m, pieces, version, limit) for m in CODECS]
    assert split[0] == split[1], ("stream split", cfg, seed, rest.hex(), split)
    assert split[1] == whole[1], ("chunking changed the outcome", cfg, seed, rest.hex(),
                                  whole[1], split[1])


def _call(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, ...]:
    """A call's result, or its error (class and message): comparable across the twins."""
    try:
        return ("ok", f(*args, **kwargs))
    except MQTTWireError as exc:
        return error_outcome(exc)


def target_topics(data: bytes) -> None:
    """Topic validation, shared-subscription parsing, matching and the TopicTree."""
    if not data:
        return
    version = LEVELS[data[0] % 3]
    # 0xFF never occurs in UTF-8, so it can separate the two strings; other undecodable
    # bytes become lone surrogates, which validation must refuse (not crash on).
    filter_, _, name = data[1:].decode("utf-8", "surrogateescape").partition("\udcff")
    results = []
    for m in CODECS:
        name_ok = _call(m.validate_topic_name, name, version=version)
        filter_ok = _call(m.validate_topic_filter, filter_, version=version)
        shared = _call(m.parse_shared, filter_)
        matches = m.topic_matches(filter_, name)
        assert isinstance(matches, bool)
        tree_found = None
        # The tree takes MQTT 5.0 filters (where "$share/..." is a Shared Subscription).
        if name_ok[0] == "ok" and _call(m.validate_topic_filter, filter_)[0] == "ok":
            tree = m.TopicTree()
            tree.insert(filter_, "key", 1)
            found = tree.match(name)
            tree_found = (dict(found.subscribers), {k: dict(v) for k, v in found.shared.items()})
            # The tree finds the subscription exactly when topic_matches says it matches.
            assert bool(found.subscribers or found.shared) == matches, (
                m.__name__, filter_, name, found, matches)
            assert len(tree) == 1 and tree.remove(filter_, "key") and len(tree) == 0
        results.append((name_ok, filter_ok, shared, matches, tree_found))
    assert results[0] == results[1], (version, filter_, name, results)


def _records(records: list[Any]) -> list[tuple[Any, ...]]:
    """Every field of every record, grouped by connection and direction, in order within
    each group.  Grouped because the order in which the end of the capture closes several
    open connections is not deterministic (finding F1 in tests/fuzz/README.md, regression
    test test_capture_end_records_in_connection_order); within a direction the order is
    compared exactly."""
    rows = [tuple(getattr(r, f.name) for f in dataclasses.fields(r)) for r in records]
    return sorted(rows, key=lambda row: (str(row[4]), str(row[5])))  # stable sort


def target_capture(data: bytes) -> None:
    """A capture file: frames or a CaptureFormatError; records equal in both codecs."""
    frames = 0
    try:
        for frame in iter_frames(io.BytesIO(data), "fuzz"):
            frames += 1
            assert len(frame.data) <= len(data)
    except CaptureFormatError as exc:
        assert 0 <= exc.offset <= len(data), (exc.offset, len(data))
    out = []
    for m in CODECS:
        records = list(read_capture(io.BytesIO(data), codec=m, name="fuzz", version=None,
                                    payload_limit=16, stream_ends=True))
        # Only the last record may be a capture_error.
        assert all(r.kind != "capture_error" for r in records[:-1])
        out.append(_records(records))
    assert out[0] == out[1], ("capture records differ", data.hex())
    # read_capture with an assumed level: the codecs agree too.
    with_level = [_records(list(read_capture(io.BytesIO(data), codec=m, name="fuzz",
                                             version=4))) for m in CODECS]
    assert with_level[0] == with_level[1], ("capture records differ (version=4)", data.hex())


class StreamChecker:
    """A reassembler handler that checks the stream contract: per direction, data and gaps
    cover the stream offsets in order, without holes or overlaps, and nothing follows
    its end; every connection is announced once before its data."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}  # id(stream) -> next offset expected
        self.ended: set[int] = set()
        self.connections: set[int] = set()
        self.streams: dict[int, Any] = {}  # keeps the streams alive, so ids stay unique

    def on_connection(self, conn: Any) -> bool:
        assert id(conn) not in self.connections
        self.connections.add(id(conn))
        return True

    def _at(self, stream: Any, offset: int, length: int) -> None:
        key = id(stream)
        self.streams[key] = stream
        assert id(stream.conn) in self.connections
        assert key not in self.ended, "data after the end"
        expected = self.next.get(key, offset)
        assert offset == expected, ("hole or overlap", offset, expected)
        assert length > 0
        self.next[key] = offset + length

    def on_data(self, stream: Any, offset: int, data: Any, ts: int, boundary: bool) -> None:
        self._at(stream, offset, len(data))

    def on_gap(self, stream: Any, offset: int, length: int, ts: int) -> None:
        self._at(stream, offset, length)

    def on_end(self, stream: Any, ts: int, reason: str) -> None:
        assert reason in ("fin", "rst", "eof")
        assert id(stream) not in self.ended, "ended twice"
        self.streams[id(stream)] = stream
        self.ended.add(id(stream))



_CLIENT = (bytes([10, 0, 0, 1]), 40000)
_SERVER = (bytes([10, 0, 0, 2]), 1883)
_ISN = (0xFFFF_FF00, 7)  # the client's sequence numbers wrap around 2**32


def segments(data: bytes) -> tuple[int, list[TcpSegment]]:
    """``[cfg]`` then segments of ``[flags] [side<<7 | len] [seq: u16] [ack: u16]
    payload``: (max_pending, segments).  seq and ack are offsets from each side's ISN."""
    if not data:
        return 64, []
    max_pending = (16, 64, 1024, 1 << 20)[data[0] & 3]
    out, pos = [], 1
    while len(data) - pos >= 6:
        flags, sl, seq, ack = struct.unpack_from("!BBHH", data, pos)
        pos += 6
        side, length = sl >> 7, sl & 0x7F
        payload = data[pos : pos + length]
        pos += length
        src, dst = (_CLIENT, _SERVER)[side], (_SERVER, _CLIENT)[side]
        out.append(TcpSegment(
            src[0], dst[0], src[1], dst[1], (_ISN[side] + seq) & 0xFFFFFFFF,
            (_ISN[1 - side] + ack) & 0xFFFFFFFF, flags, memoryview(payload),
            len(payload) + (flags >> 6 & 1) * 3,  # flag 0x40 (ECE): "cut by the snaplen"
        ))
    return max_pending, out


def target_reassembler(data: bytes) -> None:
    """TcpReassembler: the stream contract holds; MqttStreams gives the same records with
    either codec."""
    max_pending, segs = segments(data)
    checker = StreamChecker()
    reassembler = TcpReassembler(checker, max_pending=max_pending)
    for ts, seg in enumerate(segs):
        reassembler.add(ts, seg)
        for stream in checker.streams.values():
            # Held data is bounded by max_pending, as documented (finding F2, fixed).
            assert stream.pending_bytes <= max_pending, (stream.pending_bytes, max_pending)
    reassembler.flush(len(segs))
    out = []
    for m in CODECS:
        handler = MqttStreams("fuzz", ports=(1883,), codec=m, payload_limit=8,
                              max_pending=max_pending, stream_ends=True)
        records = []
        for ts, seg in enumerate(segs):
            handler.frame = ts + 1
            handler.reassembler.add(ts, seg)
            records += handler.out
            handler.out.clear()
        handler.reassembler.flush(len(segs))
        records += handler.out
        out.append(_records(records))
    assert out[0] == out[1], ("reassembled records differ", data.hex())


TARGETS: dict[str, Callable[[bytes], None]] = {
    "decode_from": target_decode_from,
    "stream": target_stream,
    "body": target_body,
    "topics": target_topics,
    "capture": target_capture,
    "reassembler": target_reassembler,
}
