"""The capture reader's output: :class:`Record`, one MQTT packet or one stretch of a
stream that is not a packet, as :mod:`.mqtt_streams` (and the compiled loop, loop_c.pyx)
makes them; and :func:`ip_text`, the addresses' form in a record.

Record is public as ``mqttwire.capture.Record``; ``mqttwire.capture.mqtt_streams.Record``
names it too, so that a pickle made when the class lived there still loads.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

__all__ = ["Record", "ip_text"]


# The compiled loop allocates Records and fills their fields by position: the fields are
# shared_slots.RECORD_FIELDS, in that order (tests/capture/test_capture_shared_slots.py).
@dataclass(slots=True, eq=False)
class Record:
    """One MQTT packet, or one stretch of a stream that is not a packet, in a capture.

    Attributes:
        kind: "packet"; "error" (bytes that did not decode, or were skipped while
            looking for a trusted packet boundary); "gap" (bytes the capture lost);
            "fragment" (an IP fragment, not reassembled: not part of any stream);
            "capture_error" (the capture file is corrupt or truncated here: the last
            record of its file); or "end" (a direction's TCP stream ended, for which see
            ``end_reason``: made only when asked for, with ``read_capture``'s
            ``stream_ends``; it follows every other record of its direction).
        capture: the capture's name (``read_capture``'s ``name``; the commands give a
            file's path from the input it was found through, ``dir/sub/a.pcap``:
            mqttwire/capture/files.py); for a capture read from several files (a set:
            :mod:`.sets`), its first file's.
        ts: integer nanoseconds since the epoch: for a packet, the capture time of the
            segment that completed it; for an error, gap or end, of the segment at which
            it was found (for those found at the end of the capture, the time of its
            last frame).  Bytes that came after a segment the capture missed are held
            until the capture shows the hole will not be filled (a gap; most often the
            other direction acknowledges past it: tcp.py): their packets carry the time
            and frame of the segment that showed it, later than they were sent.
        frame: the number (from 1) of that segment's frame in the capture (in a set,
            counting on from file to file, as in the file ``mergecap -a`` makes of it).
        connection_id: "<capture name>#<n>", n numbering the capture's TCP connections
            from 1 in order of their first segment (stable for a given file).
        direction: "c2s" (client to server: the side that sent CONNECT, or that
            connected to the MQTT port) or "s2c".
        src_ip, src_port, dst_ip, dst_port: sender and receiver of this direction.
        stream_offset: where in the direction's byte stream the record starts (byte 0
            follows the SYN; see tcp.py).  None for "fragment" and "capture_error"; for
            "end", where the direction ended (the number of stream bytes it had).
        length: how many stream bytes the record covers (the whole packet, fixed header
            included, for a packet; the fragment's payload length for a fragment; 0 for
            an end).
        client_id: the connection's client identifier, from its CONNECT (None until a
            CONNECT was seen).
        protocol_version: the connection's protocol level (3, 4 or 5), from its CONNECT,
            assumed (see ``read_capture``'s ``version``) or inferred from its traffic
            (see ``version_source``); None while it is not known.
        packet_type: the packet type's upper-case name ("PUBLISH"); for an error record
            of one bad packet (whose framing was valid), the type its first byte names
            ("RESERVED" for type 0); None for other records.
        flags: the low nibble of the packet's first byte (as packet_type).
        qos, retain, dup: the PUBLISH flags (None for other packets).
        packet_id: the Packet Identifier, where the packet has one.
        topic: a PUBLISH's topic name; for a v5 PUBLISH that uses a Topic Alias with an
            empty topic, the topic that an earlier PUBLISH of the same direction and
            connection set for the alias (None if none did).
        topic_from_alias: True when ``topic`` was resolved from a Topic Alias.
        topic_filters: the topic filters of a SUBSCRIBE or UNSUBSCRIBE.
        payload_length: a PUBLISH's payload length.
        payload: the PUBLISH payload, cut to ``payload_limit`` bytes; None unless a limit
            was given.
        reason_code: the packet's reason code (CONNACK return code for 3.x); the first one
            of a SUBACK/UNSUBACK.  For an error record: the MQTT 5.0 reason code of the
            decoding error, or None for bytes that were skipped or cut by a gap.
        reason_codes: the list of a SUBACK's or UNSUBACK's reason codes.
        properties: the packet's MQTT 5.0 Properties object, or None.
        packet: the decoded packet object.
        error: for error, fragment and capture_error records, what happened, in words.
        error_offset: for a decoding error, the stream offset where the decoder found
            it; for a capture_error, the file offset of the bad record or block.
        end_reason: for an end record, how the direction ended: "fin" (its sender's FIN,
            once every byte before it had arrived), "rst" (a RST from either side ends
            both directions) or "eof" (still open when the capture ended, or when a new
            SYN reused its addresses and ports).
        version_source: how ``protocol_version`` was known: "connect" (the connection's
            CONNECT), "option" (assumed: ``read_capture``'s ``version``), "inferred"
            (from the traffic of a connection without a usable CONNECT in the capture),
            "default" (no CONNECT, and the traffic fits 3.1.1 and 5.0 alike, as PINGs
            do: 3.1.1 is used); None while the level is not known.
        transport: how the connection carries MQTT: "tcp" (MQTT straight on TCP) or
            "websocket" (inside WebSocket frames after an HTTP Upgrade: see
            mqttwire/capture/websocket.py, which also says what ``stream_offset`` and
            ``length`` mean there); None for records of no connection ("fragment",
            "capture_error").
    """

    kind: str
    capture: str
    ts: int | None = None
    frame: int | None = None
    connection_id: str | None = None
    direction: str | None = None
    src_ip: str | None = None
    src_port: int | None = None
    dst_ip: str | None = None
    dst_port: int | None = None
    stream_offset: int | None = None
    length: int | None = None
    client_id: str | None = None
    protocol_version: int | None = None
    packet_type: str | None = None
    flags: int | None = None
    qos: int | None = None
    retain: bool | None = None
    dup: bool | None = None
    packet_id: int | None = None
    topic: str | None = None
    topic_from_alias: bool = False
    topic_filters: list[str] | None = None
    payload_length: int | None = None
    payload: bytes | None = None
    reason_code: int | None = None
    reason_codes: list[int] | None = None
    properties: Any = None
    packet: Any = None
    error: str | None = None
    error_offset: int | None = None
    end_reason: str | None = None
    version_source: str | None = None
    transport: str | None = None


def ip_text(addr: bytes) -> str:
    """An IPv4 or IPv6 address, packed, as text."""
    return socket.inet_ntop(socket.AF_INET if len(addr) == 4 else socket.AF_INET6, addr)
