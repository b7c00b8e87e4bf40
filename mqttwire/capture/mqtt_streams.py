"""MQTT streams: the reassembled TCP streams decoded into one record per MQTT packet.

:class:`MqttStreams` is the :class:`~mqttwire.capture.tcp.TcpReassembler` handler that
finds the MQTT connections (on the MQTT ports, or by their first bytes: a CONNECT, or a
WebSocket Upgrade that offers MQTT), makes a :class:`Connection` with a
:class:`~.direction.Direction` for each of its two TCP streams, hands each direction its
stream's events, and collects the :class:`~.record.Record` objects they make in its
``out`` list.  How a direction decodes (where it starts, the level inferred from traffic,
bad packets, resynchronisation) is in direction.py.

Accounting: every byte of every MQTT stream ends up in exactly one record, as a packet,
an error (bytes that did not decode) or a gap (bytes the capture lost); the records of a
direction, sorted by ``stream_offset``, tile the stream without holes or overlaps.
Records of kind "end" (made only on request, see :class:`MqttStreams`) cover no bytes: each
marks where a direction ended, after all of its other records.  MQTT over WebSocket
(websocket.py) is decoded by the same directions, from the frames' payloads: there the
packet records tile the MQTT bytes, while their offsets point into the TCP stream (see
websocket.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import ModuleType
from typing import Any

from . import websocket  # which imports nothing of this module at run time: no cycle
from .boundaries import looks_like_connect
from .direction import Direction
from .record import Record
from .shared_slots import CONNECTION
from .tcp import TcpConnection, TcpReassembler, TcpStream

# Record and looks_like_connect are named here too: they lived in this module, and a
# pickle of a Record made then names it here.
__all__ = ["Connection", "MqttStreams", "Record", "looks_like_connect"]


class Connection:
    """An MQTT connection: its id, the client's identity, its level and how that was
    known (a direction infers it from traffic when no CONNECT says it:
    direction.py), and its two directions, ``c2s`` and ``s2c``."""

    # The compiled loop reads and writes CONNECTION's slots in place (shared_slots.py).
    __slots__ = (*CONNECTION, "c2s", "owner", "s2c", "transport", "upgrade")

    def __init__(self, owner: MqttStreams, tcp: TcpConnection, client_side: int) -> None:
        self.id = f"{owner.capture}#{tcp.index}"
        self.owner = owner
        self.client_id: str | None = None
        self.version: int | None = owner.version  # until a CONNECT says otherwise
        self.version_source: str | None = "option" if owner.version else None
        self.transport = "tcp"  # "websocket" once an Upgrade to MQTT is seen
        # websocket.py's state once the client's first bytes began an HTTP request;
        # False once they proved not to be a WebSocket Upgrade to MQTT.
        self.upgrade: Any = None
        self.c2s = Direction(owner, self, tcp.streams[client_side], "c2s")
        self.s2c = Direction(owner, self, tcp.streams[1 - client_side], "s2c")
        self.c2s.stream.user = self.c2s
        self.s2c.stream.user = self.s2c
        tcp.user = self


class _Sniff:
    """A connection on no MQTT port, whose first bytes will tell if it is MQTT: the
    side that spoke first, and what it said so far."""

    __slots__ = ("head", "side")

    def __init__(self) -> None:
        self.side: int | None = None
        self.head = b""


# ---------------------------------------------------------------------------------------
# The handler


class MqttStreams:
    """A TcpReassembler handler that turns MQTT connections into records.

    Args:
        capture: the capture's name, used in records and connection ids.
        ports: the MQTT server ports.  A connection to one of them is MQTT; another
            connection is MQTT if its first bytes (after a SYN) are a CONNECT, or a
            WebSocket Upgrade request that offers MQTT (websocket.py, which a connection
            on an MQTT port that begins with one goes through too).
        codec: the codec module (``mqttwire._pure`` or ``mqttwire._speedups``).
        payload_limit: keep PUBLISH payloads cut to this many bytes; None keeps none.
        version: the protocol level to assume for connections whose CONNECT is not in
            the capture; None infers it from their traffic (see
            :mod:`.direction`).
        resync_limit: the largest packet accepted as a resynchronisation point.
        max_pending: the reassembler's limit of out-of-order bytes held per stream.
        stream_ends: also append a record of kind "end" when a direction of an MQTT
            connection ends (see :class:`Record`); off by default.
        openings: a list to which the number of the frame that opened each TCP
            connection (``frame`` then) is appended as it opens, MQTT or not, so that
            connection ``n`` opened in frame ``openings[n - 1]``; None (the default)
            keeps no list.
        keep: a connection's number (from 1) to whether it is decoded; the others are
            ignored as they open, as a connection that is not MQTT is: no bytes of them
            are decoded, no records made.  None (the default) decodes every connection.
            A task that takes one share of a capture's connections passes it.
        unconnected: whether the records of no connection (IP fragments, a capture
            error) are made; True by default.  Of the tasks that each take a share of a
            capture's connections, only one makes them.

    Feed segments to ``reassembler`` (a :class:`TcpReassembler` with this handler), after
    setting ``frame`` to the number of the frame that holds the segment.  Records are
    appended to ``out``; the caller empties it.
    """

    def __init__(self, capture: str, *, ports: Iterable[int], codec: ModuleType,
                 payload_limit: int | None = None, version: int | None = None,
                 resync_limit: int = 1 << 20, max_pending: int = 1 << 20,
                 stream_ends: bool = False, openings: list[int] | None = None,
                 keep: Callable[[int], bool] | None = None,
                 unconnected: bool = True) -> None:
        self.capture = capture
        self.ports = frozenset(ports)
        self.codec = codec
        self.payload_limit = payload_limit
        self.version = version
        self.resync_limit = resync_limit
        self.stream_ends = stream_ends
        self.out: list[Record] = []
        self.frame = 0
        self.openings = openings
        self.keep = keep
        self.unconnected = unconnected
        self.reassembler = TcpReassembler(self, max_pending=max_pending)

    def on_connection(self, conn: TcpConnection) -> bool:
        if self.openings is not None:
            self.openings.append(self.frame)
        if self.keep is not None and not self.keep(conn.index):
            return False
        initiator = conn.streams[0]
        if initiator.dport in self.ports:
            Connection(self, conn, 0)
        elif initiator.sport in self.ports:
            Connection(self, conn, 1)
        elif conn.syn_seen:
            conn.user = _Sniff()
        else:
            return False  # not on an MQTT port, and its start is not in the capture
        return True

    def _sniff(self, stream: TcpStream, offset: int, data: Any, ts: int) -> None:
        """Decide whether a connection on no MQTT port is MQTT, from its first bytes: the
        client speaks first, with a CONNECT [MQTT-3.1.0-1]."""
        conn = stream.conn
        sniff: _Sniff = conn.user
        if sniff.side is None and offset == 0 and stream.synced:
            sniff.side = stream.side
        if sniff.side != stream.side:
            self._ignore(conn)  # the first bytes are not the stream's start, or both spoke
            return
        sniff.head += bytes(data)
        if sniff.head[:1] == b"G":  # an HTTP request: a WebSocket Upgrade to MQTT?
            request = websocket.upgrade_request(sniff.head)
            if request is None:
                return  # the request goes on (websocket.py bounds its length)
            if request is False:
                self._ignore(conn)
                return
            websocket.upgrade(Connection(self, conn, stream.side), sniff.head, ts)
            return
        verdict = looks_like_connect(sniff.head)
        if verdict is None:
            return  # too few bytes yet (at most 14 decide)
        if not verdict:
            self._ignore(conn)
            return
        Connection(self, conn, stream.side).c2s.data(0, sniff.head, ts, True)

    def _ignore(self, conn: TcpConnection) -> None:
        self.reassembler.ignore(conn)

    def on_data(self, stream: TcpStream, offset: int, data: Any, ts: int,
                boundary: bool) -> None:
        direction = stream.user  # a Direction, or a WebSocket connection's WsDirection
        if direction is not None:
            direction.data(offset, data, ts, boundary)
        elif type(stream.conn.user) is _Sniff:
            self._sniff(stream, offset, data, ts)

    def on_gap(self, stream: TcpStream, offset: int, length: int, ts: int) -> None:
        direction = stream.user
        if direction is not None:
            direction.gap(offset, length, ts)
        elif type(stream.conn.user) is _Sniff:
            self._ignore(stream.conn)  # its start is lost: cannot tell

    def on_end(self, stream: TcpStream, ts: int, reason: str) -> None:
        direction = stream.user
        if direction is not None:
            direction.ended(ts, reason)
