"""MQTT over WebSocket in captures (MQTT 3.1.1 §6, MQTT 5.0 §6; RFC 6455).

Browser and dashboard clients send MQTT inside WebSocket frames, after an HTTP Upgrade.
A connection is taken for one, on any port, when its start is in the capture and:

- the client speaks first with an HTTP ``GET`` request that asks for ``Upgrade:
  websocket``, carries a ``Sec-WebSocket-Key`` and offers the subprotocol ``mqtt`` (or
  ``mqttv3.1``, MQTT 3.1's) [MQTT-6.0.0-3].  Elsewhere a request that is not one is not
  MQTT (the connection is ignored); on an MQTT port, its bytes are decoded as MQTT, as
  any other bytes there, and become error records;
- the server answers ``101`` with ``Upgrade: websocket``, ``Connection: Upgrade``, the
  ``Sec-WebSocket-Accept`` that the key asks for, no extension, and the subprotocol
  ``mqtt`` (``mqttv3.1``) that the client offered (RFC 6455 §4.1, [MQTT-6.0.0-4]).
  Any other answer fails the handshake: one error record for the response, and the
  rest of both directions is skipped (one error record each).

From there, each direction's WebSocket frames are parsed, and the payloads of its binary
messages, concatenated, are that direction's MQTT stream, decoded by mqtt_streams.py exactly as
a TCP stream is: packets may be split across frames and frames across segments, one
frame may hold several packets or a part of one [MQTT-6.0.0-2].  Ping, pong and close
frames are skipped.  A frame that breaks a rule (a text frame [MQTT-6.0.0-1], a client
frame without a mask or a server frame with one (RFC 6455 §5.1, §5.3), a reserved opcode
or RSV bit (§5.2), a length not in its minimal form (§5.2), a fragmented or long control
frame (§5.5), a misplaced continuation frame (§5.4), a data frame after the close frame
(§5.5.1); more than :data:`MAX_HELD` client bytes before the server's answer (§4.1)) is
an error record that names the rule, and the rest of that direction is skipped: a
conforming peer fails the connection on any of them (RFC 6455 §7.1.7, [MQTT-6.0.0-1]),
and where the next frame starts cannot be trusted.  So are the bytes after lost ones (a
gap): WebSocket framing is not resynchronised.

Offsets.  The MQTT records of a WebSocket connection count ``length`` in MQTT bytes (the
unmasked payload bytes of the packet), and their ``stream_offset`` is the TCP stream
offset of the WebSocket frame (its header's first byte) whose payload holds the packet's
first byte: the frame to look at in Wireshark.  Several packets of one frame share it.
``error_offset`` is the TCP stream offset of the very byte.  So the records of such a
direction tile its MQTT bytes, not its TCP stream: the handshake and the frame headers
are in no record while they are valid.  Records of WebSocket errors (and gaps) count
TCP bytes at TCP stream offsets.  An "end" record is at the TCP stream's end.

Not decoded: a WebSocket connection whose Upgrade is not in the capture (joined
mid-stream): elsewhere it is ignored, and on an MQTT port its bytes are decoded as MQTT
on TCP, mostly into error records (a frame's bytes may happen to frame as a packet).

Why no library parses the frames.  wsproto's ``FrameDecoder`` is the sans-I/O frame
parser that fits (the ``websockets`` package's ``Frame.parse`` is a generator that reads
a whole frame before it returns, so a large frame's MQTT bytes could not be passed on as
its segments arrive).  It took two to three times as long a frame as this parser, which
does only what a capture needs (no UTF-8 checks, no message assembly, payloads passed on
as they arrive: benchmarks/history/capture.md, "Measurements once in the sources").  And
this one keeps each frame's header position to itself, which ``stream_offset`` needs.
Unmasking is one XOR of two integers.
"""

from __future__ import annotations

import base64
import hashlib
from bisect import bisect_right
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

if TYPE_CHECKING:
    from .direction import Direction
    from .mqtt_streams import Connection
    from .record import Record

__all__ = ["SUBPROTOCOLS", "Request", "WebSocket", "WsDirection", "upgrade",
           "upgrade_request"]

#: The subprotocols that carry MQTT: "mqtt" (3.1.1 and 5.0) and "mqttv3.1" (3.1).
SUBPROTOCOLS = ("mqtt", "mqttv3.1")

#: The longest HTTP head (request or response, through its blank line) waited for.
MAX_HEAD = 16384
#: The most bytes held while the handshake is not complete: a client may send nothing
#: after its request until the server has answered (RFC 6455 §4.1), but a capture may
#: order the two directions' segments differently from the endpoints, so a little is
#: held and framed once the answer comes.
MAX_HELD = 1 << 20

# RFC 6455 §1.3: the GUID appended to the client's key for Sec-WebSocket-Accept.
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Request(NamedTuple):
    """A WebSocket Upgrade request that offers MQTT."""

    size: int  #: bytes of the request's head, through its blank line
    offered: tuple[str, ...]  #: the subprotocols offered, in order
    key: str  #: Sec-WebSocket-Key


def _head(data: bytes) -> tuple[int, str, dict[str, str]] | Literal[False] | None:
    """An HTTP head at the start of ``data``: (its size through the blank line, its
    start line, its header fields by lower-case name, repeated ones joined with ", ");
    None while it is incomplete; False when it is no HTTP head, or longer than
    :data:`MAX_HEAD` bytes."""
    end = data.find(b"\r\n\r\n", 0, MAX_HEAD)
    if end < 0:
        return None if len(data) < MAX_HEAD else False
    lines = data[:end].decode("latin-1").split("\r\n")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            return False
        name = name.strip().lower()
        value = value.strip()
        fields[name] = f"{fields[name]}, {value}" if name in fields else value
    return end + 4, lines[0], fields


def _tokens(value: str | None) -> list[str]:
    """The comma-separated tokens of a header field's value."""
    return [t for t in (part.strip() for part in (value or "").split(",")) if t]


def upgrade_request(data: bytes) -> Request | Literal[False] | None:
    """Whether the client's first bytes ``data`` are a WebSocket Upgrade request that
    offers MQTT: the :class:`Request`; None while more bytes are needed; False if not."""
    if not data.startswith(b"GET "):
        return None if b"GET ".startswith(data) else False
    head = _head(data)
    if not head:
        return head
    size, line, fields = head
    parts = line.split(" ")
    key = fields.get("sec-websocket-key")
    # RFC 6455 §4.1: a GET of HTTP/1.1 or later, with Upgrade: websocket and a key.
    if (len(parts) != 3 or not parts[2].startswith("HTTP/1.") or parts[2] == "HTTP/1.0"
            or "websocket" not in (t.lower() for t in _tokens(fields.get("upgrade")))
            or not key):
        return False
    offered = tuple(_tokens(fields.get("sec-websocket-protocol")))
    if not any(p in SUBPROTOCOLS for p in offered):
        return False  # a WebSocket for something else [MQTT-6.0.0-3]
    return Request(size, offered, key)


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept that answers the client's Sec-WebSocket-Key ``key``
    (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1(key.encode("latin-1") + _GUID).digest()).decode()


def response_error(line: str, fields: dict[str, str], request: Request) -> str | None:
    """Why the server's response (start ``line``, header ``fields``) does not complete
    the Upgrade ``request`` to MQTT over WebSocket; None if it does."""
    parts = line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or parts[1] != "101":
        return (f"the server refused the WebSocket Upgrade ({line[:80]!r}): a status other "
                "than 101 fails the handshake (RFC 6455 §4.1)")
    if "websocket" not in (t.lower() for t in _tokens(fields.get("upgrade"))):
        return "the server's 101 response lacks 'Upgrade: websocket' (RFC 6455 §4.1)"
    if "upgrade" not in (t.lower() for t in _tokens(fields.get("connection"))):
        return "the server's 101 response lacks 'Connection: Upgrade' (RFC 6455 §4.1)"
    accept = fields.get("sec-websocket-accept")
    if accept != accept_key(request.key):
        return (f"the server's Sec-WebSocket-Accept {accept!r} does not answer the "
                f"client's key (RFC 6455 §4.1, §4.2.2)")
    if fields.get("sec-websocket-extensions"):
        return (f"the server accepted the WebSocket extension "
                f"{fields['sec-websocket-extensions']!r}: its frames are not decoded here")
    chosen = fields.get("sec-websocket-protocol")
    if chosen not in SUBPROTOCOLS or chosen not in request.offered:
        return (f"the server selected the WebSocket subprotocol {chosen!r}: it must select "
                "'mqtt' [MQTT-6.0.0-4], one the client offered (RFC 6455 §4.1)")
    return None


def _unmask(data: Any, key: bytes, phase: int) -> bytes:
    """``data`` XORed with the masking ``key`` (RFC 6455 §5.3), from byte ``phase`` of
    the key: one XOR of two big integers, which Python does in C."""
    n = len(data)
    if phase:
        key = key[phase:] + key[:phase]
    mask = (key * ((n >> 2) + 1))[:n]
    return (int.from_bytes(data, "little") ^ int.from_bytes(mask, "little")).to_bytes(
        n, "little")


_FAILED_AFTER = "; the rest of this direction is not decoded"


def _frame_error(b0: int, b1: int, length: int, client: bool, closed: bool,
                 in_message: bool) -> str | None:
    """The rule that a frame whose header is (``b0``, ``b1``, payload ``length``) breaks,
    sent by the client or the server (``client``) after a close frame or not
    (``closed``), inside a fragmented message or not (``in_message``); None if none."""
    opcode = b0 & 0x0F
    if b0 & 0x70:
        return (f"RSV bits 0x{b0 & 0x70:02x} set, and no extension was negotiated "
                "(RFC 6455 §5.2)")
    if 3 <= opcode <= 7 or opcode >= 11:
        return f"reserved opcode {opcode} (RFC 6455 §5.2)"
    masked = b1 & 0x80
    if client and not masked:
        return ("an unmasked frame from the client: client frames are masked "
                "(RFC 6455 §5.1, §5.3)")
    if masked and not client:
        return "a masked frame from the server: server frames are not masked (RFC 6455 §5.1)"
    n7 = b1 & 0x7F
    if (n7 == 126 and length < 126) or (n7 == 127 and length < 0x10000):
        return "a payload length not in its minimal form (RFC 6455 §5.2)"
    if length >> 63:
        return "a 64-bit payload length with its most significant bit set (RFC 6455 §5.2)"
    if opcode >= 8:
        if not b0 & 0x80:
            return "a fragmented control frame (RFC 6455 §5.5)"
        if length > 125:
            return f"a control frame of {length} bytes, over 125 (RFC 6455 §5.5)"
        return None
    if closed:  # control frames may still follow (a pong, say); data frames may not
        return "a data frame after the close frame (RFC 6455 §5.5.1)"
    if opcode == 1:
        return ("a text frame: MQTT packets travel in binary frames only [MQTT-6.0.0-1] "
                "(MQTT 3.1.1 §6, MQTT 5.0 §6)")
    if opcode == 0 and not in_message:
        return "a continuation frame with no fragmented message to continue (RFC 6455 §5.4)"
    if opcode == 2 and in_message:
        return "a binary frame inside a fragmented message (RFC 6455 §5.4)"
    return None


# The modes of a WsDirection.
_HTTP, _HELD, _FRAMES, _FAILED, _DONE = range(5)


class WebSocket:
    """The WebSocket state of one connection: its two directions and the client's
    request, once it is complete."""

    __slots__ = ("c2s", "conn", "request", "s2c")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.request: Request | None = None
        self.c2s = WsDirection(self, conn.c2s, True)
        self.s2c = WsDirection(self, conn.s2c, False)

    def remap(self, out: list[Record], start: int) -> None:
        """Move the records ``out[start:]``, just made by the MQTT decoding of this
        connection's directions in their MQTT streams, to TCP stream offsets."""
        for i in range(start, len(out)):
            rec = out[i]
            side = self.c2s if rec.direction == "c2s" else self.s2c
            if rec.kind == "end":
                rec.stream_offset = side.end
                continue
            rec.stream_offset = side.frame_at(rec.stream_offset)  # type: ignore[arg-type]
            if rec.error_offset is not None:
                rec.error_offset = side.byte_at(rec.error_offset)

    def fallback(self, ts: int) -> None:
        """The client's request is no WebSocket Upgrade to MQTT (a connection on an MQTT
        port): its bytes, and any of the server's, go to MQTT decoding as they are."""
        conn = self.conn
        conn.upgrade = False
        for side in (self.c2s, self.s2c):
            side.inner.stream.user = side.inner
            side.mode = _DONE
        if self.c2s.buf:
            conn.c2s.data(0, bytes(self.c2s.buf), ts, True)
        if self.s2c.buf:
            conn.s2c.data(0, bytes(self.s2c.buf), ts, True)

    def accepted(self, request: Request) -> None:
        self.request = request
        self.conn.transport = "websocket"

    def handshake_failed(self, ts: int, error: str, size: int) -> None:
        """The server's response (its first ``size`` bytes) fails the handshake: one
        error record for it; the rest of both directions is skipped."""
        s2c = self.s2c
        if size:
            s2c.inner.record("error", ts, 0, size, error=f"WebSocket handshake: {error}")
        why = "skipped: not decoded after a failed WebSocket handshake"
        s2c.fail(size, why)
        if self.request is not None and self.c2s.mode == _HELD:
            self.c2s.fail(self.request.size, why)

    def response(self, ts: int) -> None:
        """The server's bytes so far: once its response is complete, decide."""
        s2c = self.s2c
        request = self.request
        if request is None or s2c.mode != _HTTP:
            return
        head = _head(bytes(s2c.buf))
        if head is None:
            return
        if head is False:
            self.handshake_failed(ts, "the server's response is no HTTP head of at most "
                                  f"{MAX_HEAD} bytes (RFC 6455 §4.1)", len(s2c.buf))
            return
        size, line, fields = head
        error = response_error(line, fields, request)
        if error is not None:
            self.handshake_failed(ts, error, size)
            return
        for side, base in ((s2c, size), (self.c2s, request.size)):
            if side.mode != _HTTP and side.mode != _HELD:
                continue  # the client's stream ended first: its held bytes are accounted
            held = side.buf[base:]
            side.buf = bytearray()
            side.mode = _FRAMES
            if held:
                side.frames(base, bytes(held), ts)


class WsDirection:
    """One direction of a WebSocket connection: the TCP stream's user (in the place of
    its direction.Direction, ``inner``, which decodes the MQTT bytes it passes on)."""

    __slots__ = ("buf", "client", "closed", "end", "fd", "feeds", "flen", "fp", "ft",
                 "ftcp", "hdr", "in_message", "inner", "key", "left", "mode", "pay",
                 "phase", "skip_from", "why", "ws")

    def __init__(self, ws: WebSocket, inner: Direction, client: bool) -> None:
        self.ws = ws
        self.inner = inner
        self.client = client
        self.mode = _HTTP
        # _HTTP, _HELD: the stream's bytes so far (from TCP offset 0), the handshake's
        # and any that follow it before the handshake is complete.
        self.buf = bytearray()
        self.end = 0  # TCP stream offset after the last byte received
        self.hdr = b""  # the part of a frame header cut by the end of a segment
        self.ftcp = 0  # TCP stream offset of the current frame's header
        self.flen = 0  # its payload length
        self.left = 0  # its payload bytes still to come
        self.feeds = False  # its payload is MQTT bytes (a binary message's)
        self.key = b""  # its masking key (client frames)
        self.phase = 0  # payload bytes of it passed, mod 4 (where in the key)
        self.in_message = False  # a binary message's last frame (FIN) is still to come
        self.closed = False  # a close frame was sent
        self.pay = 0  # offset in the MQTT stream of the next MQTT byte
        # The frames with MQTT bytes: their first byte's offset in the MQTT stream, and
        # the TCP stream offsets of their header and first payload byte.
        self.fp: list[int] = []
        self.ft: list[int] = []
        self.fd: list[int] = []
        self.skip_from = 0  # _FAILED: the first byte not in a record yet
        self.why = ""  # _FAILED: what the skipped bytes' record says

    # -- offsets --------------------------------------------------------------------------

    def frame_at(self, pos: int) -> int:
        """TCP stream offset of the header of the frame holding MQTT byte ``pos``."""
        i = bisect_right(self.fp, pos) - 1
        return self.ft[i] if i >= 0 else pos

    def byte_at(self, pos: int) -> int:
        """TCP stream offset of MQTT byte ``pos``."""
        i = bisect_right(self.fp, pos) - 1
        return self.fd[i] + pos - self.fp[i] if i >= 0 else pos

    def _prune(self) -> None:
        """Forget the frames before the lowest MQTT offset that a later record of this
        direction can name (direction.py: Direction.low)."""
        low = self.inner.low()
        i = bisect_right(self.fp, low) - 1
        if i > 512:
            del self.fp[:i], self.ft[:i], self.fd[:i]

    def _decoding(self, call: Callable[..., Any], *args: Any) -> None:
        """Call the MQTT decoding (``call``, a method of ``inner``), then move the records
        it made to TCP stream offsets."""
        out = self.inner.owner.out
        start = len(out)
        call(*args)
        if len(out) > start:
            self.ws.remap(out, start)

    # -- stream events (mqtt_streams.MqttStreams calls these, as a Direction's) ------------

    def data(self, offset: int, data: Any, ts: int, boundary: bool) -> None:
        # ``boundary`` (a TCP segment's start) is not used: the MQTT decoding looks for
        # packet starts at frame starts instead (frames, below).
        self.end = offset + len(data)
        mode = self.mode
        if mode == _FRAMES:
            self.frames(offset, data, ts)
        elif mode == _HTTP or mode == _HELD:
            self.buf += data
            ws = self.ws
            if len(self.buf) > MAX_HELD:
                self._overflow(ts)
                return
            if mode == _HELD:
                return  # the client's bytes after its request: frames, once it is answered
            if not self.client:
                ws.response(ts)
                return
            request = upgrade_request(bytes(self.buf))
            if request is None:
                return
            if request is False:
                ws.fallback(ts)
                return
            ws.accepted(request)
            self.mode = _HELD
            ws.response(ts)

    def gap(self, offset: int, length: int, ts: int) -> None:
        mode = self.mode
        if mode == _HTTP and self.client:
            # The request is cut (an MQTT port: mqtt_streams.py decides what its bytes are).
            self.ws.fallback(ts)
            self.inner.gap(offset, length, ts)
            return
        self._stop(ts, "cut short by lost bytes (a gap in the capture)")
        if mode == _FAILED:
            self._skipped(ts)
        self.inner.record("gap", ts, offset, length, error="bytes missing from the capture")
        self.end = offset + length
        self.fail(self.end, "skipped: WebSocket framing is not resynchronised after lost "
                            "bytes")

    def ended(self, ts: int, reason: str) -> None:
        mode = self.mode
        if mode == _HTTP and self.client:
            self.ws.fallback(ts)
            self.inner.ended(ts, reason)
            return
        self._stop(ts, f"cut short by the end of the stream ({reason})")
        if self.mode == _FAILED:
            self._skipped(ts)
        self.mode = _DONE
        self._decoding(self.inner.ended, ts, reason)

    # -- failures -------------------------------------------------------------------------

    def _stop(self, ts: int, why: str) -> None:
        """The bytes of this direction stop being decoded here (a gap, its end): the
        bytes held during the handshake, a cut frame header and a cut MQTT packet get
        their records.  (The client's request, not complete: see the callers.)"""
        mode = self.mode
        if mode == _HTTP:  # the server's response is not complete
            self.ws.handshake_failed(ts, f"the server's response is not complete: {why}",
                                     len(self.buf))
            return
        if mode == _HELD:  # the client's bytes after its request, not answered
            start = self.ws.request.size  # type: ignore[union-attr]  # set in _HELD
            if self.end > start:
                self.inner.record(
                    "error", ts, start, self.end - start,
                    error=f"skipped: the server's WebSocket handshake response had not "
                          f"come: {why}")
            self.mode = _FAILED
            self.buf = bytearray()
            self.skip_from = self.end
            self.why = ""
            return
        if mode == _FRAMES:
            self._decoding(self.inner.cut, ts, why)
            if self.hdr:
                self.inner.record("error", ts, self.ftcp, len(self.hdr),
                                  error=f"incomplete WebSocket frame header: {why}")
                self.hdr = b""
            self.mode = _FAILED
            self.skip_from = self.end
            self.why = ""

    def _overflow(self, ts: int) -> None:
        """More than MAX_HELD bytes came while the handshake was not complete."""
        ws = self.ws
        if self.mode == _HTTP and self.client:
            ws.fallback(ts)  # a request that long is no Upgrade (an MQTT port: decode)
            return
        if self.mode == _HTTP:
            ws.handshake_failed(ts, f"the server sent over {MAX_HELD} bytes before the "
                                "handshake completed (RFC 6455 §4.1)", len(self.buf))
            return
        start = ws.request.size  # type: ignore[union-attr]  # set in _HELD
        self.inner.record(
            "error", ts, start, self.end - start,
            error=f"WebSocket handshake: the client sent over {MAX_HELD} bytes after its "
                  "request without the server's answer; it must wait for the answer "
                  f"(RFC 6455 §4.1){_FAILED_AFTER}")
        self.fail(self.end, "skipped: after a WebSocket protocol error")

    def _skipped(self, ts: int) -> None:
        """The record of the bytes skipped since ``skip_from``."""
        if self.end > self.skip_from and self.why:
            self.inner.record("error", ts, self.skip_from, self.end - self.skip_from,
                              error=self.why)
        self.skip_from = self.end

    def fail(self, at: int, why: str) -> None:
        """Skip this direction's bytes from TCP offset ``at`` on (accounted in one error
        record, made at its end or at a gap)."""
        self.mode = _FAILED
        self.buf = bytearray()
        self.skip_from = at
        self.why = why

    def _violation(self, ts: int, at: int, error: str) -> None:
        """A frame at TCP offset ``at`` breaks a rule: its record, and the rest skipped."""
        self._decoding(self.inner.cut, ts, "cut short by a WebSocket protocol error")
        self.mode = _FAILED
        self.inner.record("error", ts, at, self.end - at,
                          error=f"WebSocket protocol error: {error}{_FAILED_AFTER}")
        self.skip_from = self.end
        self.why = "skipped: after a WebSocket protocol error"

    # -- frames ---------------------------------------------------------------------------

    def frames(self, offset: int, data: Any, ts: int) -> None:
        """Parse the frames in ``data`` (at TCP stream ``offset``), the next bytes of a
        direction past its handshake, and pass their MQTT bytes on."""
        n = len(data)
        pos = 0
        chunks: list[bytes] = []
        first = self.pay  # MQTT stream offset of the first chunk
        boundary = False  # whether it starts a frame's payload
        while pos < n:
            left = self.left
            if left:
                take = left if left <= n - pos else n - pos
                if self.feeds:
                    chunk = data[pos : pos + take]
                    if self.key:
                        chunk = _unmask(chunk, self.key, self.phase)
                        self.phase = (self.phase + take) & 3
                    if not chunks:
                        first = self.pay
                        boundary = left == self.flen
                    chunks.append(bytes(chunk))
                    self.pay += take
                pos += take
                self.left = left - take
                continue
            # A frame header (RFC 6455 §5.2): 2 bytes, 0, 2 or 8 of length, 4 of mask.
            hdr = self.hdr
            at = offset + pos - len(hdr)  # TCP stream offset of the header
            h = hdr + bytes(data[pos : pos + 14 - len(hdr)])
            b1 = h[1] if len(h) > 1 else 0
            n7 = b1 & 0x7F
            size = 2 + (2 if n7 == 126 else 8 if n7 == 127 else 0) + (4 if b1 & 0x80 else 0)
            if len(h) < size:  # the header goes on in the next segment
                self.ftcp = at
                self.hdr = h
                break
            b0 = h[0]
            self.hdr = b""
            if n7 == 126:
                length = int.from_bytes(h[2:4], "big")
            elif n7 == 127:
                length = int.from_bytes(h[2:10], "big")
            else:
                length = n7
            error = _frame_error(b0, b1, length, self.client, self.closed, self.in_message)
            if error is not None:
                self._pass(chunks, first, ts, boundary)
                self._violation(ts, at, error)
                return
            pos += size - len(hdr)
            opcode = b0 & 0x0F
            self.ftcp = at
            self.flen = self.left = length
            self.key = h[size - 4 : size] if b1 & 0x80 else b""
            self.phase = 0
            if opcode <= 2:  # continuation or binary: MQTT bytes
                self.in_message = not b0 & 0x80
                self.feeds = True
                if length:
                    self.fp.append(self.pay)
                    self.ft.append(at)
                    self.fd.append(at + size)
            else:  # ping, pong, close: skipped
                self.feeds = False
                self.closed = self.closed or opcode == 8
        self._pass(chunks, first, ts, boundary)

    def _pass(self, chunks: list[bytes], first: int, ts: int, boundary: bool) -> None:
        """Hand the MQTT bytes ``chunks`` (from MQTT stream offset ``first``) to the
        decoding."""
        if not chunks:
            return
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        self._decoding(self.inner.data, first, data, ts, boundary)
        if len(self.fp) > 1024:
            self._prune()


def upgrade(conn: Connection, data: Any, ts: int) -> None:
    """The client of ``conn`` began its stream (at ``ts``) with ``data``, the start of an
    HTTP request: its directions go through WebSocket framing from here on (or back to
    plain MQTT decoding if the request is no WebSocket Upgrade to MQTT)."""
    ws = WebSocket(conn)
    conn.upgrade = ws
    conn.c2s.stream.user = ws.c2s
    conn.s2c.stream.user = ws.s2c
    ws.c2s.data(0, data, ts, True)
