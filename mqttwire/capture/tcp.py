"""TCP reassembly: each connection into its two ordered byte streams.

:class:`TcpReassembler` takes TCP segments in capture order and calls its handler with
in-order data, gaps and stream ends.  Positions are *stream offsets*: byte 0 is the first
byte after the SYN (or, when the capture holds no SYN for that direction, the first byte
of the first segment seen); 32-bit sequence numbers are unwrapped around the position
expected next, so a stream may pass any number of sequence wrap-arounds.

Policy, in the order a segment meets it:

- Retransmissions and overlaps: the first copy of a byte wins; later copies are trimmed
  away (a receiver keeps what it has, RFC 9293 §3.10.7.4).
- Out-of-order segments are held until the hole before them fills, at most
  ``max_pending`` bytes per stream.  Beyond that the hole is declared lost.
- A hole is declared lost (a *gap*) as soon as the capture proves it will not be filled:
  the peer acknowledges bytes of the hole and the capture holds data after it (the
  capture dropped them; the receiver got them, so they will not be sent again; data
  after the hole shows the acknowledgement is not forged), the stream ends (FIN, RST, end of
  capture) with the hole still open, the held data exceeds ``max_pending``, or a segment
  was cut short by the capture's snapshot length.
- FIN ends a direction once everything before it has been delivered; RST ends both
  directions at once (held data after a hole is delivered after the gap first).
- A SYN on a 4-tuple whose connection has ended starts a new connection; segments of a
  closed connection that arrive later (retransmitted FINs, late ACKs) are ignored.

Handlers implement ``on_connection(conn) -> bool`` (False ignores the connection from then
on), ``on_data(stream, offset, data, ts, boundary)`` (``boundary`` is True when ``data``
starts where its TCP segment started, False after trimming an overlap),
``on_gap(stream, offset, length, ts)`` and ``on_end(stream, ts, reason)`` with reason
``"fin"``, ``"rst"`` or ``"eof"``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import Any, Protocol

from .link import TcpSegment
from .shared_slots import TCP_CONNECTION, TCP_STREAM

__all__ = ["StreamHandler", "TcpConnection", "TcpReassembler", "TcpStream"]

FIN = 0x01
SYN = 0x02
RST = 0x04
ACK = 0x10

_MASK = 0xFFFFFFFF
_HALF = 1 << 31
_WRAP = 1 << 32


class TcpStream:
    """One direction of a TCP connection.

    Attributes:
        conn: the :class:`TcpConnection`.
        side: 0 for the direction of the connection's initiator, 1 for the other.
        peer: the other direction.
        src, sport, dst, dport: sender and receiver (addresses as packed bytes).
        synced: True if the stream's start was seen (a SYN), so offset 0 is the real
            first byte; False if the capture began in the middle of the stream.
        next: the stream offset expected next (everything before it was delivered or
            declared a gap).
        ended: True once on_end was called, or once the reassembler forgot the stream
            (an ignored connection's ends are not reported, but the compiled loop
            keeps streams it has seen and must not take a forgotten one for live).
        user: free for the handler.
    """

    # The compiled loop reads and writes TCP_STREAM's slots in place (shared_slots.py).
    __slots__ = (*TCP_STREAM, "_count", "dst", "pending_bytes", "side", "src", "synced")

    def __init__(self, conn: TcpConnection, side: int, src: bytes, sport: int, dst: bytes,
                 dport: int) -> None:
        self.conn = conn
        self.side = side
        self.peer: TcpStream = self  # set by TcpConnection
        self.src = src
        self.sport = sport
        self.dst = dst
        self.dport = dport
        self.base: int | None = None  # sequence number of stream offset 0
        self.synced = False
        self.next = 0
        self.pending: list[tuple[int, int, bytes, int]] = []  # heap: (off, n, data, wire)
        self.pending_bytes = 0
        self.high = 0  # end of the furthest data seen (delivered or held)
        self.fin: int | None = None  # stream offset of the FIN
        self.ended = False
        self.user: Any = None
        self._count = 0  # tie-breaker, so the heap never compares bytes

class TcpConnection:
    """A TCP connection.

    Attributes:
        index: the connection's number in the capture, from 1, in order of first segment.
        streams: (initiator to responder, responder to initiator).  The initiator is the
            sender of the SYN, or when the capture holds no SYN, of the first segment.
        syn_seen: whether the capture holds the connection's SYN or SYN-ACK.
        first_ts: time of its first segment, ns.
        ignored: set by ``TcpReassembler.ignore``: its segments are dropped from then on.
        user: free for the handler.
    """

    # The compiled loop reads TCP_CONNECTION's slots in place (shared_slots.py).
    __slots__ = (*TCP_CONNECTION, "first_ts", "index", "streams", "syn_seen", "user")

    def __init__(self, index: int, first_ts: int, src: bytes, sport: int, dst: bytes,
                 dport: int, syn_seen: bool) -> None:
        self.index = index
        self.first_ts = first_ts
        self.syn_seen = syn_seen
        self.ignored = False
        self.user: Any = None
        self.streams = (
            TcpStream(self, 0, src, sport, dst, dport),
            TcpStream(self, 1, dst, dport, src, sport),
        )
        self.streams[0].peer = self.streams[1]
        self.streams[1].peer = self.streams[0]


class StreamHandler(Protocol):
    def on_connection(self, conn: TcpConnection) -> bool: ...

    def on_data(self, stream: TcpStream, offset: int, data: Any, ts: int,
                boundary: bool) -> None: ...

    def on_gap(self, stream: TcpStream, offset: int, length: int, ts: int) -> None: ...

    def on_end(self, stream: TcpStream, ts: int, reason: str) -> None: ...


class TcpReassembler:
    """Reassembles the TCP connections in a capture and reports them to a handler.

    Args:
        handler: receives connections, data, gaps and ends (see the module docstring).
        max_pending: the most out-of-order bytes held per stream.
        max_closed: how many closed 4-tuples are remembered (to ignore their late
            segments); the oldest are forgotten first.
    """

    def __init__(self, handler: StreamHandler, *, max_pending: int = 1 << 20,
                 max_closed: int = 1 << 16) -> None:
        self.handler = handler
        self.max_pending = max_pending
        self.max_closed = max_closed
        self.connections = 0
        self._streams: dict[tuple[bytes, int, bytes, int], TcpStream] = {}
        self._closed: OrderedDict[tuple[bytes, int, bytes, int], None] = OrderedDict()

    # -- public -------------------------------------------------------------------------

    def add(self, ts: int, seg: TcpSegment) -> None:
        """Process one TCP segment captured at ``ts`` (ns)."""
        src, dst, sport, dport, seq, ack, flags, payload, wire_len = seg
        key = (src, sport, dst, dport)
        st = self._streams.get(key)
        if st is None or (flags & (SYN | ACK) == SYN and st.base is not None
                          and (seq + 1 - st.base) & _MASK):
            # No such connection, or a new SYN (another ISN) on a 4-tuple in use.
            if st is not None:
                self._close(st.conn, ts, "eof")
            elif key in self._closed and not flags & SYN:
                return  # a late segment of a connection that has ended
            if flags & RST or not (wire_len or flags & SYN):
                return  # nothing worth opening a connection for
            st = self._open(ts, seg)
            if st is None:
                return
        conn = st.conn
        if conn.ignored:
            # Only track the end, so that the connection is forgotten.
            if flags & RST:
                self._unregister(conn)
            elif flags & FIN:
                st.ended = True
                if st.peer.ended:
                    self._unregister(conn)
            return
        if flags & SYN:
            if st.base is None:
                st.base = (seq + 1) & _MASK
                st.synced = True
                conn.syn_seen = True
            seq += 1  # the SYN takes one sequence number; data (if any) follows it
        elif st.base is None:
            st.base = seq
        # Sequence numbers become stream offsets: the one nearest the position expected
        # next (a signed 32-bit distance from it), which is how they wrap around.
        if flags & ACK:
            peer = st.peer
            if peer.base is not None and not peer.ended:
                delta = ((ack - peer.base) - peer.next) & _MASK
                if delta and delta < _HALF:  # acknowledges more than was delivered
                    self._acked(peer, peer.next + delta, ts)
                    if conn.ignored:
                        return
        if flags & RST:
            self._close(conn, ts, "rst")
            return
        if st.ended:
            return
        delta = ((seq - st.base) - st.next) & _MASK
        off = st.next + delta if delta < _HALF else st.next + delta - _WRAP
        if wire_len:
            end = off + wire_len
            st.high = max(st.high, end)
            nxt = st.next
            if off == nxt and len(payload) == wire_len:  # the usual case: next, whole
                st.next = end
                self.handler.on_data(st, off, payload, ts, True)
                if st.pending and not conn.ignored:
                    self._drain(st, ts)
            elif off <= nxt:
                self._deliver(st, off, payload, wire_len, ts)
                if st.pending and not conn.ignored:
                    self._drain(st, ts)
            elif end > nxt:
                data = bytes(payload)
                st._count += 1
                heapq.heappush(st.pending, (off, st._count, data, wire_len))
                st.pending_bytes += len(data)
                while st.pending and st.pending_bytes > self.max_pending:
                    # Too much held back: holes are taken as lost, first to last, until
                    # at most max_pending bytes are held (one was not enough: finding F2).
                    self._gap_to(st, st.pending[0][0], ts)
                    self._drain(st, ts)
        if flags & FIN and st.fin is None:
            st.fin = off + wire_len
        if st.fin is not None and st.next >= st.fin and not conn.ignored:
            self._end(st, ts, "fin")

    def flush(self, ts: int) -> None:
        """End every open stream (end of the capture): holes become gaps."""
        # In connection order, so that what this emits is the same on every read (a set
        # of connections iterates in memory-address order: fuzzing finding F1).
        open_conns = {id(st.conn): st.conn for st in self._streams.values()}.values()
        for conn in sorted(open_conns, key=lambda c: c.index):
            if not conn.ignored:
                for stream in conn.streams:
                    self._finish(stream, ts, "eof")
        self._streams.clear()

    def ignore(self, conn: TcpConnection) -> None:
        """Drop a connection's held data and ignore its segments from now on."""
        conn.ignored = True
        for stream in conn.streams:
            stream.pending = []
            stream.pending_bytes = 0

    # -- internals ----------------------------------------------------------------------

    def _open(self, ts: int, seg: TcpSegment) -> TcpStream | None:
        src, dst, sport, dport, _seq, _ack, flags, _payload, _wire = seg
        self.connections += 1
        if flags & (SYN | ACK) == SYN | ACK:
            # First seen is the SYN-ACK: its receiver is the initiator.
            conn = TcpConnection(self.connections, ts, dst, dport, src, sport, True)
            st = conn.streams[1]
        else:
            conn = TcpConnection(self.connections, ts, src, sport, dst, dport,
                                 bool(flags & SYN))
            st = conn.streams[0]
        for stream in conn.streams:
            key = (stream.src, stream.sport, stream.dst, stream.dport)
            self._streams[key] = stream
            self._closed.pop(key, None)
        if not self.handler.on_connection(conn):
            self.ignore(conn)
        return st

    def _close(self, conn: TcpConnection, ts: int, reason: str) -> None:
        """End both directions (holes become gaps) and forget the connection."""
        for stream in conn.streams:
            self._finish(stream, ts, reason)
        self._unregister(conn)

    def _unregister(self, conn: TcpConnection) -> None:
        for stream in conn.streams:
            stream.ended = True  # already, unless the connection was ignored
            key = (stream.src, stream.sport, stream.dst, stream.dport)
            if self._streams.get(key) is stream:
                del self._streams[key]
            self._closed[key] = None
            self._closed.move_to_end(key)
        while len(self._closed) > self.max_closed:
            self._closed.popitem(last=False)

    def _deliver(self, st: TcpStream, off: int, data: Any, wire_len: int, ts: int) -> None:
        """Hand over the part of a segment (at ``off``) that is past ``st.next``."""
        nxt = st.next
        n = len(data)
        if off + n > nxt:
            trim = nxt - off if off < nxt else 0
            st.next = off + n
            self.handler.on_data(st, nxt, data[trim:] if trim else data, ts, not trim)
        if wire_len > n and off + wire_len > st.next:
            # The capture cut the segment short: the rest is lost for good.
            self._gap_to(st, off + wire_len, ts)

    def _drain(self, st: TcpStream, ts: int) -> None:
        pending = st.pending
        while pending and pending[0][0] <= st.next and not st.conn.ignored:
            off, _, data, wire_len = heapq.heappop(pending)
            st.pending_bytes -= len(data)
            self._deliver(st, off, data, wire_len, ts)

    def _gap_to(self, st: TcpStream, end: int, ts: int) -> None:
        if end > st.next:
            start = st.next
            st.next = end
            self.handler.on_gap(st, start, end - start, ts)

    def _acked(self, st: TcpStream, acked: int, ts: int) -> None:
        """The receiver of ``st`` acknowledged everything before stream offset ``acked``.

        Only bytes the capture has seen data beyond count: an ACK of bytes never sent
        (corrupt, or forged) must not wipe out a stream, as a receiver would ignore it
        too (RFC 9293 §3.10.7.4).
        """
        acked = min(acked, st.high)
        while acked > st.next and not st.conn.ignored:
            hole_end = st.pending[0][0] if st.pending else acked
            self._gap_to(st, min(hole_end, acked), ts)
            self._drain(st, ts)
        if st.fin is not None and st.next >= st.fin and not st.conn.ignored:
            self._end(st, ts, "fin")

    def _finish(self, st: TcpStream, ts: int, reason: str) -> None:
        """Deliver everything held (holes become gaps), then end the stream."""
        if st.ended or st.conn.ignored:
            return
        while st.pending and not st.conn.ignored:
            self._gap_to(st, st.pending[0][0], ts)
            self._drain(st, ts)
        if not st.conn.ignored:
            self._end(st, ts, reason)

    def _end(self, st: TcpStream, ts: int, reason: str) -> None:
        if st.ended:
            return
        st.ended = True
        st.pending = []
        st.pending_bytes = 0
        self.handler.on_end(st, ts, reason)
        conn = st.conn
        if conn.streams[0].ended and conn.streams[1].ended:
            self._unregister(conn)
