"""One direction of an MQTT connection in a capture: :class:`Direction` frames and
decodes its TCP stream's bytes into records (:class:`~.record.Record`), with the codec's
``StreamDecoder``, and accounts for the bytes that are no packet.  :mod:`.mqtt_streams`
makes the directions and hands them the stream's events; websocket.py hands them the
MQTT bytes of WebSocket messages.

Where decoding starts.  A direction whose start is in the capture (after a SYN) is
decoded from its first byte: the client's with a decoder that learns the level from the
CONNECT [MQTT-3.1.0-1], the server's at the connection's level.  A direction whose start
is not in the capture (a connection that was running when the capture began), or whose
level is not known, is held in a window (up to :data:`WINDOW` bytes, or until a gap or
its end) and then:

- its first packet boundary is the first offset from which packets frame consistently to
  the end of the window and nearly all of them decode (the first one must): the bytes
  before it become one error record, "skipped: the capture began inside a packet";
- if no CONNECT gave the connection's level (and none was assumed), the level is
  inferred from both directions' windows: framed under 3.1.1 and under 5.0, the level
  that skips fewer bytes and meets fewer bad packets wins (a CONNACK settles it: its
  Remaining Length is 2 at 3.x only).  On a tie, 5.0 if a PUBLISH was seen (a 3.x
  payload rarely parses as a 5.0 property block, while 5.0 bytes always frame as 3.x),
  else 3.1.1, the level most deployments run, marked "default" in ``version_source``.

A bad packet inside valid framing costs only itself: when its fixed header and Remaining
Length are valid (and it is at most ``resync_limit`` bytes), it becomes one error record
(with its packet type, the error, the rule and the offset), and decoding resumes at the
next packet with a new decoder, the connection's level and topic aliases kept.  (A
broker must close such a connection; an analyser of a capture should show what follows.
The codec's StreamDecoder keeps its "failed stays failed" contract: the leniency is
here.)

Resynchronisation (when the framing itself is lost: lost bytes, an invalid Remaining
Length, a bad packet longer than ``resync_limit``): the direction does not guess where the
next packet starts.  It resumes only at the start of a later TCP segment (senders write
MQTT packets with one send() each, so segment starts are the likely packet starts) whose
bytes hold a plausible fixed header (a packet type the level has, the flags the
specification fixes for it, a minimal Remaining Length) and a packet that decodes
completely there.  Until then the bytes are accounted as skipped, in an error record that
says why.  Without a known level, lost bytes send the direction back to a window instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._codec.framing import frame_header
from .._constants import PACKET_NAMES
from .._errors import MQTTWireError
from . import websocket  # which imports nothing of this module at run time: no cycle
from .boundaries import connect_level, first_boundary, plausible_first_byte
from .record import Record, ip_text
from .shared_slots import DIRECTION

if TYPE_CHECKING:
    from .mqtt_streams import Connection, MqttStreams
    from .tcp import TcpStream

__all__ = ["DECODING", "MAX_WINDOW", "WINDOW", "Direction"]


#: How many bytes of a direction are held before its first packet boundary (and, without
#: a CONNECT, its level) is looked for; a gap or the direction's end decides sooner.  If
#: no boundary is found, the window doubles, up to MAX_WINDOW (a capture may begin
#: inside a large packet).
WINDOW = 1 << 16
MAX_WINDOW = 1 << 20

# A direction's mode.  DECODING is public: the compiled loop (loop_c.pyx) decodes a
# segment itself only for a direction in it.  _STOPPED: a WebSocket connection's direction
# after a WebSocket protocol error or lost bytes (websocket.py): its bytes are accounted
# there, none is decoded here any more.
_NEW, DECODING, _SKIP, _RESYNC, _WINDOW, _ENDED, _STOPPED = range(7)

_INSIDE = "skipped: the capture began inside a packet"


class Direction:
    """The decoding state of one direction (a TCP stream) of an MQTT connection.

    Its stream's events (:meth:`data`, :meth:`gap`, :meth:`ended`) come from
    :class:`~.mqtt_streams.MqttStreams`, or from websocket.py's WsDirection, which also
    calls :meth:`record`, :meth:`low` and :meth:`cut`.  The compiled loop (loop_c.pyx)
    frames and decodes a DECODING direction's segments itself and calls
    :meth:`packet_records`, :meth:`failed`, :meth:`decoded` and :meth:`decode` with what
    it found; the methods with a leading underscore are this module's own.
    """

    # The compiled loop reads and writes DIRECTION's slots in place (shared_slots.py).
    __slots__ = (*DIRECTION, "bad_from", "cands", "dec_base", "head", "owner", "pending",
                 "rbase", "rbuf", "segs", "wbase", "why", "wlimit", "wsize")

    def __init__(self, owner: MqttStreams, conn: Connection, stream: TcpStream,
                 name: str) -> None:
        self.owner = owner
        self.conn = conn
        self.stream = stream
        self.name = name
        self.src_ip = ip_text(stream.src)
        self.dst_ip = ip_text(stream.dst)
        self.mode = _NEW
        self.dec: Any = None
        self.dec_base = 0  # stream offset of the decoder's byte 0
        self.start = 0  # stream offset of the packet being framed
        self.first = 0  # its first byte
        self.remaining = 0  # its bytes still to come once the header is known, else 0
        self.hdr = b""  # the part of its fixed header seen so far, if cut by a segment
        self.unframed = False  # a Remaining Length was invalid: framing stopped
        self.end = 0  # stream offset after the last byte received
        self.head = b""  # the stream's first bytes, when its start is in the capture
        self.aliases: dict[int, str] = {}  # Topic Alias -> topic (MQTT 5.0 §3.3.2.3.4)
        self.pending: tuple[str, int | None, int | None] | None = None  # SKIP: the error
        self.why = ""  # RESYNC, WINDOW: why bytes are skipped, for the error record
        self.bad_from = 0  # RESYNC: start of the bytes not decoded yet
        self.rbuf = bytearray()  # RESYNC: bytes from the first candidate boundary on
        self.rbase = 0  # stream offset of rbuf[0]
        self.cands: list[int] = []  # RESYNC: candidate packet starts (segment starts)
        self.wbase = 0  # WINDOW: stream offset of the first byte held
        self.segs: list[tuple[int, bytes, int, int, bool]] = []  # WINDOW: the segments
        self.wsize = 0  # WINDOW: bytes held
        self.wlimit = WINDOW  # WINDOW: held bytes that make it look for the boundary

    # -- records ------------------------------------------------------------------------

    def record(self, kind: str, ts: int, offset: int, length: int, **fields: Any) -> Record:
        """Append a record of ``kind`` covering ``length`` bytes from stream ``offset``,
        with the connection's fields and ``fields``; return it."""
        conn = self.conn
        stream = self.stream
        rec = Record(
            kind, self.owner.capture, ts, self.owner.frame, conn.id, self.name,
            self.src_ip, stream.sport, self.dst_ip, stream.dport, offset, length,
            conn.client_id, conn.version, version_source=conn.version_source,
            transport=conn.transport, **fields,
        )
        self.owner.out.append(rec)
        return rec

    def _not_decoded(self, ts: int, start: int, end: int, why: str) -> None:
        if end > start:
            self.record("error", ts, start, end - start, error=why)

    def packet_records(self, packets: list[Any], framed: list[tuple[int, int, int]],
                       ts: int) -> None:
        """One record per decoded packet, with its framing (start, first byte, size)."""
        owner = self.owner
        limit = owner.payload_limit
        out = owner.out
        conn = self.conn
        version = conn.version
        source = conn.version_source
        transport = conn.transport
        for packet, (start, b0, size) in zip(packets, framed):
            ptype = b0 >> 4
            if ptype == 1:  # CONNECT: the connection's level and client from here on
                conn.client_id = packet.client_id
                conn.version = version = packet.protocol_version
                conn.version_source = source = "connect"
            rec = Record(
                "packet", owner.capture, ts, owner.frame, conn.id, self.name, self.src_ip,
                self.stream.sport, self.dst_ip, self.stream.dport, start, size,
                conn.client_id, version, PACKET_NAMES[ptype], b0 & 0x0F,
                version_source=source, transport=transport,
            )
            rec.packet = packet
            if ptype == 3:  # PUBLISH
                payload = packet.payload
                rec.qos = packet.qos
                rec.retain = packet.retain
                rec.dup = packet.dup
                rec.packet_id = packet.packet_id
                rec.payload_length = len(payload)
                if limit is not None:
                    rec.payload = bytes(payload[:limit])
                props = packet.properties
                rec.properties = props
                topic = packet.topic
                alias = props.topic_alias if props is not None else None
                if alias is not None:
                    if topic:
                        self.aliases[alias] = topic
                    else:
                        topic = self.aliases.get(alias)
                        rec.topic_from_alias = True
                rec.topic = topic
            elif 4 <= ptype <= 7:  # PUBACK, PUBREC, PUBREL, PUBCOMP
                rec.packet_id = packet.packet_id
                rec.reason_code = packet.reason_code
                rec.properties = packet.properties
            elif ptype == 1:  # CONNECT
                rec.properties = packet.properties
            elif ptype == 9 or ptype == 11:  # SUBACK, UNSUBACK
                rec.packet_id = packet.packet_id
                codes = list(packet.reason_codes)
                rec.reason_codes = codes
                rec.reason_code = codes[0] if codes else None
                rec.properties = packet.properties
            elif ptype == 8:  # SUBSCRIBE
                rec.packet_id = packet.packet_id
                rec.topic_filters = [s.topic_filter for s in packet.subscriptions]
                rec.properties = packet.properties
            elif ptype == 10:  # UNSUBSCRIBE
                rec.packet_id = packet.packet_id
                rec.topic_filters = list(packet.topic_filters)
                rec.properties = packet.properties
            elif ptype != 12 and ptype != 13:  # CONNACK, DISCONNECT, AUTH
                rec.reason_code = packet.reason_code
                rec.properties = packet.properties
            out.append(rec)

    # -- stream events ------------------------------------------------------------------

    def _begin(self, offset: int, data: Any, ts: int) -> bool:
        """Choose how to start: decode from here if this is the stream's true start and
        the level is known, or learnable from the CONNECT; else hold a window.  True
        when the client's first byte is the "G" of an HTTP GET (never an MQTT packet's:
        type 4 with flags 7): the connection is handed to websocket.py, which takes
        its bytes from here on, or gives them back if it is no WebSocket Upgrade."""
        version = self.conn.version
        if self.stream.synced and offset == 0:
            if self.name == "c2s" and data[:1] == b"G" and self.conn.upgrade is None:
                websocket.upgrade(self.conn, data, ts)
                return True
            self.head = bytes(data[:16])
            if self.name == "c2s":
                self._decode_from(0, None)  # the first packet must be CONNECT
            elif version:
                self._decode_from(0, version)
            else:  # the client's CONNECT did not give a level: infer it
                self._window(0, "skipped: bytes before the first packet that decodes")
        else:
            self._window(offset, _INSIDE)
        return False

    def _decode_from(self, offset: int, version: int | None) -> None:
        self.mode = DECODING
        self.dec = self.owner.codec.StreamDecoder(version=version)
        self.dec_base = self.start = offset
        self.remaining = 0
        self.hdr = b""
        self.unframed = False

    def data(self, offset: int, data: Any, ts: int, boundary: bool) -> None:
        if self.mode == _NEW and self._begin(offset, data, ts):
            return
        self.end = offset + len(data)
        mode = self.mode
        if mode == DECODING:
            self.decode(offset, data, ts)
        elif mode == _SKIP:
            self._skip(offset, data, ts)
        elif mode == _RESYNC:
            self._resync(offset, data, ts, boundary)
        elif mode == _WINDOW:
            self.segs.append((offset, bytes(data), ts, self.owner.frame, boundary))
            self.wsize += len(data)
            if self.wsize >= self.wlimit:
                self._settle(False)

    def gap(self, offset: int, length: int, ts: int) -> None:
        if self.mode == _WINDOW:
            self._settle(True)  # with what came before the gap
        if self.mode != _NEW:
            self._flush(offset, ts, "cut short by lost bytes (a gap in the capture)")
        self.record("gap", ts, offset, length, error="bytes missing from the capture")
        self.end = offset + length
        self._lost(self.end, "lost bytes")

    def ended(self, ts: int, reason: str) -> None:
        if self.mode == _WINDOW:
            self._settle(True)
        if self.mode != _NEW:
            self._flush(self.end, ts, f"cut short by the end of the stream ({reason})")
        self.mode = _ENDED
        self.rbuf = bytearray()
        self.cands = []
        self.segs = []
        if self.owner.stream_ends:
            # After the flush above, so that the end follows the direction's last bytes.
            self.record("end", ts, self.end, 0, end_reason=reason)

    def low(self) -> int:
        """The lowest stream offset that a later record of this direction can start at
        or name in ``error_offset`` (websocket.py forgets the frames before it)."""
        mode = self.mode
        if mode == DECODING or mode == _SKIP:
            return self.start
        if mode == _RESYNC:
            return self.bad_from
        if mode == _WINDOW:
            return self.wbase
        return 0 if mode == _NEW else self.end

    def cut(self, ts: int, why: str) -> None:
        """Stop decoding (a WebSocket connection's framing failed, websocket.py): the
        bytes not yet in a record become one (``why`` says how they were cut), and
        nothing more is decoded; an end record still follows at the end."""
        if self.mode == _WINDOW:
            self._settle(True)
        if self.mode != _NEW:
            self._flush(self.end, ts, why)
        self.mode = _STOPPED
        self.dec = None

    def _flush(self, end: int, ts: int, why: str) -> None:
        """Account the bytes before stream offset ``end`` not yet in a record."""
        mode = self.mode
        if mode == DECODING:
            self._not_decoded(ts, self.start, end, f"incomplete packet: {why}")
        elif mode == _SKIP:
            error, code, where = self.pending  # type: ignore[misc]  # set in SKIP
            self._bad(ts, self.start, end - self.start, error, code, where)
        elif mode == _RESYNC:
            self._not_decoded(ts, self.bad_from, end, self.why)

    def _lost(self, at: int, why: str) -> None:
        """The framing is lost before stream offset ``at``: find it again from there."""
        self.dec = None
        self.pending = None
        if self.conn.version is None:
            self._window(at, f"skipped: no trusted packet boundary after {why}")
            return
        self.mode = _RESYNC
        self.why = f"skipped: no trusted packet boundary after {why}"
        self.bad_from = at
        self.rbuf = bytearray()
        self.cands = []

    # -- decoding -----------------------------------------------------------------------

    def _frame(self, offset: int, data: Any) -> list[tuple[int, int, int]]:
        """Find the packets that ``data`` (at stream ``offset``) completes: their
        (start, first byte, size).  Reads only fixed headers; the codec checks them."""
        framed = []
        n = len(data)
        pos = 0
        remaining = self.remaining
        while pos < n:
            if remaining:
                if remaining > n - pos:
                    remaining -= n - pos
                    break
                pos += remaining
                remaining = 0
                start = self.start
                framed.append((start, self.first, offset + pos - start))
                self.start = offset + pos
                continue
            hdr = self.hdr
            if hdr:  # the header began in an earlier segment
                h = hdr + bytes(data[pos : pos + 5 - len(hdr)])
                header = frame_header(h, 0, len(h))
                b0 = h[0]
            elif n - pos >= 2 and data[pos + 1] < 0x80:  # a one-byte Remaining Length
                header = 2, data[pos + 1]
                b0 = data[pos]
            else:
                header = frame_header(data, pos, n)
                b0 = data[pos]
                h = b""
            if header is None:  # the header goes on in the next segment (< 5 bytes here)
                self.hdr = h if hdr else bytes(data[pos:])
                break
            if header is False:  # the codec will reject it; stop framing
                self.unframed = True
                break
            size, remaining = header
            self.first = b0
            self.hdr = b""
            pos += size - len(hdr)
            if not remaining:
                framed.append((self.start, b0, size))
                self.start = offset + pos
        self.remaining = remaining
        return framed

    def decode(self, offset: int, data: Any, ts: int) -> None:
        """DECODING: frame and decode ``data`` (at stream ``offset``), with records for
        what it completes."""
        while True:
            framed = [] if self.unframed else self._frame(offset, data)
            try:
                packets = self.dec.feed(data)
            except MQTTWireError as exc:
                rest = self.failed(exc, framed, ts, offset, data)
                if rest is None:
                    return
                offset, data = rest
                continue
            self.decoded(packets, framed, ts)
            return

    def failed(self, exc: MQTTWireError, framed: list[tuple[int, int, int]], ts: int,
               offset: int, data: Any) -> tuple[int, Any] | None:
        """The decoder raised ``exc`` on ``data`` (at stream ``offset``), just framed as
        ``framed``: records for the packets it completed first, then for the bad packet.
        Returns the (offset, data) to decode next, if decoding resumes inside ``data``."""
        done = len(exc.packets)
        self.packet_records(exc.packets, framed, ts)
        where = None if exc.offset is None else exc.offset + self.dec_base
        self.dec = None
        if done < len(framed):  # the bad packet is whole: it costs only itself
            start, b0, size = framed[done]
            self._bad(ts, start, size, str(exc), exc.reason_code, where, b0)
            return self._resume(start + size, offset, data, ts)
        start = self.start
        whole = self.end - start + self.remaining
        if self.unframed or (not self.hdr and whole > self.owner.resync_limit):
            # The framing itself is broken: where the next packet starts is not known.
            self.record("error", ts, start, self.end - start, error=str(exc),
                        reason_code=exc.reason_code, error_offset=where)
            self._lost(self.end, "a packet whose length could not be trusted")
            return None
        # The rest of the bad packet is still to come: skip it, then resume.
        self.mode = _SKIP
        self.pending = (str(exc), exc.reason_code, where)
        return None

    def _bad(self, ts: int, start: int, size: int, error: str, code: int | None,
             where: int | None, b0: int | None = None) -> None:
        """An error record for the bad packet at ``start`` (``size`` bytes)."""
        if b0 is None:
            b0 = self.hdr[0] if self.hdr else self.first
        conn = self.conn
        if conn.version is None and start == 0 and b0 == 0x10:
            # A CONNECT that did not decode: its level byte still says the level.
            level = connect_level(self.head)
            if level is not None:
                conn.version = level
                conn.version_source = "connect"
        self.record("error", ts, start, size, packet_type=PACKET_NAMES[b0 >> 4],
                    flags=b0 & 0x0F, error=error, reason_code=code, error_offset=where)

    def _skip(self, offset: int, data: Any, ts: int) -> None:
        """SKIP: more bytes of a bad packet whose length is known."""
        framed = self._frame(offset, data)
        if not framed:
            whole = self.end - self.start + self.remaining
            if self.unframed or whole > self.owner.resync_limit:
                # Its header, cut by a segment, turned out invalid or too long.
                self._flush(self.end, ts, "")
                self._lost(self.end, "a packet whose length could not be trusted")
            return
        start, b0, size = framed[0]
        error, code, where = self.pending  # type: ignore[misc]  # set in SKIP
        self.pending = None
        self._bad(ts, start, size, error, code, where, b0)
        rest = self._resume(start + size, offset, data, ts)
        if rest is not None:
            self.decode(rest[0], rest[1], ts)

    def _resume(self, at: int, offset: int, data: Any,
                ts: int) -> tuple[int, Any] | None:
        """Decode on from stream offset ``at``, a packet boundary, with the rest of
        ``data`` (at stream ``offset``): returns what to decode, if anything."""
        rest = data[at - offset :]
        version = self.conn.version
        if version is None:
            self._window(at, "skipped: bytes before the first packet that decodes")
            if rest:
                self.data(at, rest, ts, False)
            return None
        self._decode_from(at, version)
        return (at, rest) if rest else None

    def decoded(self, packets: list[Any], framed: list[tuple[int, int, int]],
                ts: int) -> None:
        """Records for the ``packets`` the decoder returned for the data just framed as
        ``framed``."""
        if len(packets) != len(framed):
            # The codec and the framing disagree about packet boundaries: nothing after
            # the last packet both agree on can be trusted.
            done = min(len(packets), len(framed))
            self.packet_records(packets, framed, ts)
            start = framed[done][0] if done < len(framed) else self.start
            self._not_decoded(ts, start, self.end,
                              "the decoder's packet boundaries differ from the fixed headers")
            self._lost(self.end, "the decoder and the fixed headers disagreed")
            return
        if packets:
            self.packet_records(packets, framed, ts)

    # -- a window: the first boundary (and the level) of a stream joined mid-way ---------

    def _window(self, at: int, why: str) -> None:
        self.mode = _WINDOW
        self.wbase = at
        self.why = why
        self.segs = []
        self.wsize = 0
        self.wlimit = WINDOW

    def _buffer(self) -> bytes:
        return b"".join(seg[1] for seg in self.segs)

    def _settle(self, final: bool) -> None:
        """Decide where this window's first packet starts, and the level if no CONNECT
        gave it (from both directions: see :func:`_infer_level`).  ``final``: no
        more bytes will join the window (a gap or the end follows)."""
        if not self.segs:
            return
        version = self.conn.version
        if version is None:
            _infer_level(self.conn, self, final)
            return
        found = first_boundary(self._buffer(), version, self.owner.codec,
                               self.owner.resync_limit)
        if found is None and self._wait(final):
            return
        self._replay(version, found)

    def _wait(self, final: bool) -> bool:
        """No boundary in the window yet: whether to wait for more bytes (and then
        look again), rather than give up."""
        if final or self.wsize >= MAX_WINDOW:
            return False
        self.wlimit = max(2 * self.wsize, WINDOW)
        return True

    def _replay(self, version: int, found: tuple[int, int, int] | None) -> None:
        """Leave the window: the bytes before the boundary ``found`` (None: there is
        none) become one error record, and the held segments go through again, in
        order, each with its own frame number."""
        segs = self.segs
        if not segs:
            return
        self.segs = []
        self.wsize = 0
        owner = self.owner
        saved = owner.frame
        base = self.wbase
        _, _, ts0, frame0, _ = segs[0]
        if found is None:  # no boundary in the window: resynchronise from its end
            owner.frame = frame0
            end = segs[-1][0] + len(segs[-1][1])
            self._not_decoded(ts0, base, end, self.why)
            self._lost(end, f"{end - base} bytes with no packet boundary")
            owner.frame = saved
            return
        at = base + found[0]
        owner.frame = frame0
        self._not_decoded(ts0, base, at, self.why)
        self._decode_from(at, version)
        for offset, data, ts, frame, boundary in segs:
            end = offset + len(data)
            if end <= at:
                continue
            if offset < at:
                data = data[at - offset :]
                offset = at
            owner.frame = frame
            self.data(offset, data, ts, boundary)
        owner.frame = saved

    # -- resynchronisation --------------------------------------------------------------

    def _resync(self, offset: int, data: Any, ts: int, boundary: bool) -> None:
        if boundary:
            if not self.cands:
                self.rbuf = bytearray()
                self.rbase = offset
            self.cands.append(offset)
        if self.cands:
            self.rbuf += data
        self._try_resync(ts)

    def _try_resync(self, ts: int) -> None:
        version: int = self.conn.version  # type: ignore[assignment]  # known in RESYNC
        limit = self.owner.resync_limit
        while self.cands:
            cand = self.cands[0]
            verdict = self._trusted(cand - self.rbase, version, limit)
            if verdict is None:
                return  # wait for the rest of the candidate packet
            if verdict:
                self._not_decoded(ts, self.bad_from, cand, self.why)
                rest = bytes(self.rbuf[cand - self.rbase :])
                self.rbuf = bytearray()
                self.cands = []
                self._decode_from(cand, version)
                self.decode(cand, rest, ts)
                return
            self.cands.pop(0)
            keep = self.cands[0] if self.cands else self.end
            del self.rbuf[: keep - self.rbase]
            self.rbase = keep

    def _trusted(self, rel: int, version: int, limit: int) -> bool | None:
        """Whether a packet starts at rbuf[rel]: True, False, or None (need more bytes)."""
        buf = self.rbuf
        if not plausible_first_byte(buf[rel], version):
            return False
        header = frame_header(buf, rel, len(buf))
        if header is None:
            return None
        if header is False:
            return False
        size, length = header
        if size + length > limit:
            return False
        if len(buf) - rel < size + length:
            return None
        try:
            result = self.owner.codec.decode_from(buf, rel, version=version)
        except MQTTWireError:
            return False
        return result is not None and result[1] == rel + size + length


def _infer_level(conn: Connection, trigger: Direction, final: bool) -> None:
    """Infer ``conn``'s level from the windows of both its directions (see the module's
    docstring), then let each window go on at that level.  ``trigger`` is the direction
    whose window is full (``final``: or ends)."""
    owner = conn.owner
    held = [d for d in (conn.c2s, conn.s2c) if d.mode == _WINDOW and d.segs]
    found: dict[int, list[tuple[int, int, int] | None]] = {}
    scores = {}
    for level in (4, 5):
        results = [first_boundary(d._buffer(), level, owner.codec, owner.resync_limit)
                   for d in held]
        found[level] = results
        framed = sum(r is not None for r in results)
        skipped = sum(len(d._buffer()) if r is None else r[0]
                      for d, r in zip(held, results))
        bad = sum(r[1] for r in results if r is not None)
        scores[level] = (framed, -skipped, -bad)
    if not (scores[4][0] or scores[5][0]) and trigger._wait(final):
        return  # nothing frames yet at either level: look again with more bytes
    if scores[4] != scores[5]:
        level = 4 if scores[4] > scores[5] else 5
        source = "inferred"
    elif scores[5][0] and any(r is not None and r[2] for r in found[5]):
        level, source = 5, "inferred"  # 3.x payloads rarely parse as properties
    else:
        level, source = 4, "default"  # the evidence fits both: 3.1.1
    conn.version = level
    conn.version_source = source
    for d, r in zip(held, found[level]):
        if r is None and d._wait(final and d is trigger):
            continue  # more of it may frame: it looks again, at this level, later
        d._replay(level, r)
