"""One client's network connection, from the server's side (:class:`ServerConnection`):
packets in, the session's rules, bytes out.  Its CONNECT and AUTH handshake is in
:mod:`.handshake`.  No sockets, no clock: the caller passes received bytes and the time,
and writes out what ``data_to_send()`` (or ``Broker.outgoing()``) returns.

Protocol levels 3 (MQTT 3.1), 4 (3.1.1) and 5 (5.0) are chosen per connection by its
CONNECT.  Rule numbers are MQTT 5.0's unless marked 3.1.1."""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any

from .._codec.properties import Properties
from .._constants import PacketType, ReasonCode
from .._errors import MQTTWireError, ProtocolError
from .aliases import InboundAliases, OutboundAliases
from .auth import (
    ConnectionInfo,
    Principal,
)
from .errors import SessionError, check_reason_code, disconnect_reason
from .events import (
    ClientSubscribed,
    ClientUnsubscribed,
    ConnectionClosed,
    Event,
)
from .handshake import AuthExchange, ConnectionState, Handshake
from .message import Message
from .server_session import (
    DROPPED_QUEUE_FULL,
    DROPPED_UNWRITTEN,
    Delivery,
    InFlight,
    ServerSession,
    Subscribed,
    queued_size,
)

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["CLOSED", "ConnectionState", "Outgoing", "ServerConnection"]


#: The closed state, read on every packet.
CLOSED = ConnectionState.CLOSED


class Outgoing:
    """What one connection has to send: ``data`` to write, then close the socket if
    ``close``.  Unpacks as ``(connection, data, close)``.

    ``linger`` (seconds, with ``close``; 0.0 otherwise): how to close.  0.0: close at
    once (the client closed first: its DISCONNECT, or the network).  More: the server is
    closing while the client may still be writing, so close the way careful servers do
    (a lingering close): write ``data``, shut the socket's write side (a half-close:
    ``shutdown(SHUT_WR)``, asyncio's ``transport.write_eof()``), read and discard until
    the client closes or ``linger`` seconds pass, then close.  Closed at once with
    unread input, or when input reaches it afterwards, a socket makes the TCP stack
    send a reset (RST): the client's sends fail and it may never read the DISCONNECT
    reason code or the refusing CONNACK written last."""

    __slots__ = ("connection", "data", "close", "linger")

    def __init__(self, connection: ServerConnection, data: bytes, close: bool,
                 linger: float = 0.0) -> None:
        self.connection = connection
        self.data = data
        self.close = close
        self.linger = linger

    def __iter__(self) -> Any:
        return iter((self.connection, self.data, self.close))

    def __repr__(self) -> str:
        linger = f", linger={self.linger}" if self.linger else ""
        return (f"Outgoing({self.connection!r}, {len(self.data)} bytes, close={self.close}"
                f"{linger})")


class ServerConnection(Handshake):
    """One client's network connection, from the server's side.

    Feed it what the socket reads (``receive_data``) or decoded packets
    (``receive_packet``); tell it when the socket closed (``connection_lost``).  What it
    has to send accumulates until ``data_to_send()`` (or ``Broker.outgoing()``) takes it.
    Once ``closed``, write what is left and close the socket, after lingering for
    ``linger`` seconds when that is not 0 (see ``Outgoing``); later input is ignored
    (3.1.1 [MQTT-3.1.4-5], 5.0 [MQTT-3.1.4-6]).
    """

    def __init__(self, broker: Broker, number: int, name: str | None, now: float,
                 info: ConnectionInfo | None = None) -> None:
        self.broker = broker
        #: What the I/O glue told ``Broker.new_connection`` of the connection.
        self.info = info if info is not None else ConnectionInfo()
        #: Who the client authenticated as (None before CONNACK).
        self.principal: Principal | None = None
        #: The 5.0 Authentication Method of its CONNECT (None: no enhanced
        #: authentication, and then no AUTH either way [MQTT-4.12.0-6], [MQTT-4.12.0-7]).
        self.auth_method: str | None = None
        self._exchange: AuthExchange | None = None
        self.codec = broker.codec
        self.number = number
        self.name = name if name is not None else f"connection-{number}"
        self.state = ConnectionState.AWAITING_CONNECT
        # version=None: the decoder learns the level from CONNECT, which must come first
        # [MQTT-3.1.0-1], and refuses a second one [MQTT-3.1.0-2].
        self._decoder = broker.codec.StreamDecoder(max_packet_size=broker.config.max_packet_size)
        self.version: int | None = None
        self.client_id: str | None = None
        self.session: ServerSession | None = None
        self.will: Any = None
        #: The Keep Alive in force (the client's, or our Server Keep Alive), 0 for none.
        self.keep_alive = 0
        self.last_received = now
        #: QoS 1/2 PUBLISHes we may have unacknowledged towards the client.
        self.send_window = broker.config.v3_send_window
        #: The client's 5.0 Maximum Packet Size [MQTT-3.1.2-24].
        self.max_send_size: float = math.inf
        self._aliases_in = InboundAliases(0)
        self._aliases_out = OutboundAliases(0)
        self._output: list[bytes] = []
        #: Once closed: seconds to linger before closing the socket (``Outgoing.linger``);
        #: 0.0 when the client closed first.
        self.linger = 0.0
        # What waits to be written (docs/session.md, "Bounds"), in bytes counted from the
        # connection's start: queued in _output up to _produced, taken by the glue up to
        # _taken, written by its transport up to _written (all taken, unless the glue
        # reports otherwise with set_unwritten).  _publish_ends: where each PUBLISH not
        # yet written ends, to count them.
        self._produced = 0
        self._taken = 0
        self._written = 0
        self._publish_ends: deque[int] = deque()
        self._reports_unwritten = False
        #: The layer wants a fresh set_unwritten: an Outgoing is listed even without data.
        self.wants_report = False
        #: The stall timeout came once, and a report was asked for before closing.
        self._stall_asked = False
        self._max_unwritten_bytes = broker.config.max_unwritten_bytes
        self._max_unwritten_messages = broker.config.max_unwritten_messages
        #: Since when the unwritten output has been at its bound (None: it is not).
        self.behind_since: float | None = None

    def __repr__(self) -> str:
        who = f" {self.client_id!r}" if self.client_id is not None else ""
        level = f" v{self.version}" if self.version is not None else ""
        return f"<ServerConnection {self.name}{who}{level} {self.state.value}>"

    @property
    def closed(self) -> bool:
        return self.state is ConnectionState.CLOSED

    # Input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Bytes read from the socket, in any chunking."""
        if self.closed:
            return []
        self.broker._now = now
        error: MQTTWireError | None = None
        try:
            packets = self._decoder.feed(data)
        except MQTTWireError as exc:
            # The packets completed before the bad bytes are handled first, in order.
            packets, error = exc.packets, exc
        for packet in packets:
            if self.state is CLOSED:
                break
            self._handle(packet, now)
        if error is not None and not self.closed:
            self._protocol_error(error, now)
        return self.broker._take_events()

    def receive_packet(self, packet: Any, now: float) -> list[Event]:
        """A packet decoded by the caller (its level must be this connection's)."""
        if not self.closed:
            if self.state is ConnectionState.AWAITING_CONNECT and not isinstance(
                    packet, self.codec.Connect):
                self._protocol_error(ProtocolError(
                    type(packet).__name__.upper(), "the first packet is not CONNECT",
                    rule="MQTT-3.1.0-1"), now)
            elif self.state is ConnectionState.CONNECTED and isinstance(
                    packet, self.codec.Connect):
                self._protocol_error(ProtocolError(
                    "CONNECT", "a second CONNECT", rule="MQTT-3.1.0-2"), now)
            else:
                self._handle(packet, now)
        return self.broker._take_events()

    def connection_lost(self, now: float) -> list[Event]:
        """The socket closed (or failed) without us closing it: the will goes out."""
        if not self.closed:
            self._close(now, "network connection lost", by_client=True)
        return self.broker._take_events()

    def disconnect(self, now: float,
                   reason_code: int = ReasonCode.ADMINISTRATIVE_ACTION) -> list[Event]:
        """Close the connection from the server's side (5.0: DISCONNECT ``reason_code``)."""
        check_reason_code(PacketType.DISCONNECT, reason_code)
        if not self.closed:
            self._close(now, "closed by the server", reason_code=reason_code)
        return self.broker._take_events()

    def set_unwritten(self, nbytes: int, now: float) -> list[Event]:
        """The glue's report: of the bytes it took (``data_to_send``/``Broker.outgoing``),
        ``nbytes`` are still waiting in its transport (asyncio:
        ``transport.get_write_buffer_size()``).  Call it after each write and when the
        transport drains (asyncio's ``resume_writing``).  From the first call on, taken
        bytes count as unwritten until reported written; a glue that never calls it is
        taken to write everything at once.  Queued QoS 1/2 deliveries go out if there
        is room now."""
        if not 0 <= nbytes <= self._taken:
            raise SessionError(f"set_unwritten({nbytes}): not 0 to the {self._taken} "
                               "bytes taken from this connection")
        self._reports_unwritten = True
        self.wants_report = False
        self.broker._now = now
        written = self._taken - nbytes
        if written > self._written:
            self._written = written
            ends = self._publish_ends
            while ends and ends[0] <= written:
                ends.popleft()
        if not self.closed:
            self._catch_up(now)
        # This report answers any ask made while it was handled (by _pump, behind again):
        # asking again would have the glue report in a loop.
        self.wants_report = False
        return self.broker._take_events()

    @property
    def unwritten_bytes(self) -> int:
        """Bytes queued for this connection and not yet written (as far as the glue has
        reported: ``set_unwritten``)."""
        return self._produced - self._written

    @property
    def unwritten_messages(self) -> int:
        """PUBLISH packets queued for this connection and not yet written."""
        return len(self._publish_ends)

    def _behind(self, now: float) -> bool:
        """Whether the unwritten output is at its bound; starts the stall clock."""
        if self._produced - self._written < self._max_unwritten_bytes and \
                len(self._publish_ends) < self._max_unwritten_messages:
            return False
        if self.behind_since is None:
            self.behind_since = now
            timeout = self.broker.config.write_stall_timeout
            if timeout is not None:
                self.broker._timers.set(("stall", self), now + timeout)
        if self._reports_unwritten and not self.wants_report:
            # The count may be stale (the transport writes on its own): ask the glue for
            # a report at its next Broker.outgoing().  Without this, a connection at the
            # message bound, whose transport is under its byte limit and so never
            # paused, would have nothing to resume it.
            self.wants_report = True
            self.broker._mark(self)
        return True

    def _catch_up(self, now: float) -> None:
        """After output was written: end the episode of being behind if it is over, and
        send what waited for room."""
        if self.behind_since is not None and not (
                self._produced - self._written >= self._max_unwritten_bytes
                or len(self._publish_ends) >= self._max_unwritten_messages):
            self.behind_since = None
            self._stall_asked = False
            self.broker._timers.cancel(("stall", self))
            if self.session is not None:
                self.session._reported.discard(DROPPED_UNWRITTEN)
        if self.session is not None and self.session.queue:
            self._pump(now)

    def _stalled(self, now: float) -> None:
        """``write_stall_timeout`` after falling behind: closed if still behind."""
        if self.closed or self.behind_since is None:
            return
        if self._reports_unwritten and not self._stall_asked:
            # Ask for a fresh report first (Broker.outgoing() lists us), and decide when
            # the glue calls tick again, at once: it may have caught up unseen.
            self._stall_asked = self.wants_report = True
            self.broker._mark(self)
            self.broker._timers.set(("stall", self), now)
            return
        self._close(now, f"unwritten output over its bound for "
                    f"{self.broker.config.write_stall_timeout} s "
                    f"({self.unwritten_bytes} bytes, {self.unwritten_messages} messages)",
                    reason_code=ReasonCode.QUOTA_EXCEEDED)

    # Output ----------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """Take the bytes queued for the socket (``Broker.outgoing()`` does this for
        every connection with output)."""
        self.broker._dirty.pop(self, None)
        return self._take_output()

    def _take_output(self) -> bytes:
        data = b"".join(self._output)
        self._output.clear()
        self._taken = self._produced
        if not self._reports_unwritten and self._written != self._produced:
            # A glue that does not report writes everything it takes.
            self._written = self._produced
            self._publish_ends.clear()
            if not self.closed:
                self._catch_up(self.broker._now)  # more for the next call, if any
        return data

    def _write(self, data: bytes) -> bool:
        if self.state is CLOSED:  # the property's test, without a call per packet
            return False
        if len(data) > self.max_send_size:
            return False  # [MQTT-3.1.2-24]: never more than the client's maximum
        self._output.append(data)
        self._produced += len(data)
        self.broker._mark(self)
        return True

    def _send(self, packet: Any) -> bool:
        if self.closed:
            return False
        return self._write(packet.encode(self.version or 4))

    # Ending ----------------------------------------------------------------------------

    def _protocol_error(self, error: MQTTWireError, now: float) -> None:
        """Bad input: 5.0 sends DISCONNECT with the error's reason code [MQTT-4.13.1-1]
        (only after a CONNACK [MQTT-3.14.0-1]); 3.x just closes (3.1.1 §4.8)."""
        if self.state is ConnectionState.AWAITING_CONNECT:
            if error.rule == "MQTT-3.1.2-2":
                # 3.1.1 [MQTT-3.1.2-2]: an unsupported protocol level gets CONNACK return
                # code 0x01 before the connection closes.
                self._write(self.codec.ConnAck(reason_code=1).encode(4))
            self._close(now, f"bad CONNECT: {error}", error=error)
            return
        if self.state is ConnectionState.AUTHENTICATING:
            # No DISCONNECT before CONNACK [MQTT-3.14.0-1]: a 5.0 CONNACK with 0x81
            # Malformed Packet or 0x82 Protocol Error says why (§4.13.1).
            refusal = 0x81 if disconnect_reason(error) == 0x81 else 0x82
            self._write(self.codec.ConnAck(reason_code=refusal).encode(5))
            self._close(now, f"protocol violation during authentication: {error}",
                        error=error)
            return
        code = disconnect_reason(error) if self.version == 5 else None
        self._close(now, f"protocol violation: {error}", reason_code=code, error=error)

    def _close(self, now: float, reason: str, *, reason_code: int | None = None,
               error: MQTTWireError | None = None, by_client: bool = False,
               publish_will: bool = True) -> None:
        if self.closed:
            return
        sent = None
        if reason_code is not None and self.version == 5 and \
                self.state is ConnectionState.CONNECTED:
            sent = reason_code if self._send(self.codec.Disconnect(reason_code=reason_code)) \
                else None
        self.state = ConnectionState.CLOSED
        # The server closing first lingers: the client may still be writing (see Outgoing).
        self.linger = 0.0 if by_client else self.broker.config.linger_timeout
        self.broker._mark(self)
        self.broker._timers.cancel(("conn", self))
        self.broker._timers.cancel(("stall", self))
        self.broker._events.append(ConnectionClosed(
            self, self.client_id, reason, sent, error, by_client, self.linger))
        session = self.session
        if session is None or session.connection is not self:
            return
        will, delay = None, 0
        if self.will is not None and publish_will:
            w = self.will
            props = w.properties
            if props is not None and props.will_delay_interval is not None:
                # The Will Delay Interval is the server's (§3.1.3.2.2); the other Will
                # Properties are the Application Message's.
                delay = props.will_delay_interval
                props = Properties(**{k: v for k, v in props.items()
                                      if k != "will_delay_interval"}) or None
            # [MQTT-3.1.2-14]/[MQTT-3.1.2-15]: published retained as Will Retain says,
            # if the client may publish there (checked now, when it is published, as
            # Mosquitto does: the CONNECT was not refused for it).
            if self._may_publish(w.topic, w.qos, w.retain):
                will = Message.received(w.topic, w.payload, w.qos, w.retain, props, now)
        self.will = None  # [MQTT-3.1.2-10]
        self.broker._detach(session, will, delay, now)

    def _deadline(self, now: float) -> None:
        if self.state is ConnectionState.AWAITING_CONNECT:
            self._close(now, f"no CONNECT within {self.broker.config.connect_timeout} s")
            return
        if self.state is ConnectionState.AUTHENTICATING:
            self._close(now, "authentication not finished within "
                        f"{self.broker.config.connect_timeout} s")
            return
        if self.closed or not self.keep_alive:
            return
        # [MQTT-3.1.2-22] (3.1.1 [MQTT-3.1.2-24]): nothing from the client for one and a
        # half times the Keep Alive: close as if the network had failed.
        deadline = self.last_received + 1.5 * self.keep_alive
        if now < deadline:
            self.broker._timers.set(("conn", self), deadline)
            return
        self._close(now, f"keep-alive timeout ({self.keep_alive} s)",
                    reason_code=ReasonCode.KEEP_ALIVE_TIMEOUT)

    # Packets ---------------------------------------------------------------------------

    def _handle(self, packet: Any, now: float) -> None:
        self.last_received = now
        codec = self.codec
        try:
            if self.state is ConnectionState.AUTHENTICATING and not isinstance(
                    packet, (codec.Auth, codec.Disconnect)):
                raise ProtocolError(type(packet).__name__.upper(), "a packet other than "
                                    "AUTH or DISCONNECT before CONNACK, during enhanced "
                                    "authentication", rule="MQTT-3.1.2-30")
            if isinstance(packet, codec.Publish):
                self._on_publish(packet, now)
            elif isinstance(packet, (codec.PubAck, codec.PubComp)):
                self._on_ack(packet, now)
            elif isinstance(packet, codec.PubRec):
                self._on_pubrec(packet, now)
            elif isinstance(packet, codec.PubRel):
                self._on_pubrel(packet)
            elif isinstance(packet, codec.Subscribe):
                self._on_subscribe(packet, now)
            elif isinstance(packet, codec.Unsubscribe):
                self._on_unsubscribe(packet)
            elif isinstance(packet, codec.PingReq):
                self._send(codec.PingResp())  # [MQTT-3.12.4-1]
            elif isinstance(packet, codec.Disconnect):
                self._on_disconnect(packet, now)
            elif isinstance(packet, codec.Connect):
                self._on_connect(packet, now)
            elif isinstance(packet, codec.Auth):
                self._on_auth(packet, now)
            else:
                # CONNACK, SUBACK, UNSUBACK, PINGRESP go only from server to client
                # (§2.1.2, Table 2-1).
                raise ProtocolError(type(packet).__name__.upper(),
                                    "a packet only a Server sends", rule="§2.1.2")
        except MQTTWireError as exc:
            self._protocol_error(exc, now)

    # Server -> client Application Messages -------------------------------------------

    def _pump(self, now: float) -> None:
        """Send queued deliveries in order while the client's Receive Maximum (or our
        3.x window) leaves room [MQTT-3.3.4-9]."""
        session = self.session
        if session is None or self.state is CLOSED:
            return
        queue = session.queue
        while queue:
            delivery = queue[0]
            if delivery.qos and len(session.inflight) >= self.send_window:
                return
            if self._behind(now):
                return  # until the glue reports room (set_unwritten) or takes the output
            queue.popleft()
            session.queued_bytes -= queued_size(delivery)
            if delivery.message.expired(now):
                session.stats.expired += 1
                continue  # [MQTT-3.3.2-5]
            if delivery.qos == 0:
                self._send_delivery(delivery, None, now)
                continue
            pid = session.ids.allocate()
            if self._send_delivery(delivery, pid, now):
                session.inflight[pid] = InFlight(delivery)
            else:
                # Too large for the client: [MQTT-3.1.2-25] behave as if delivered.
                session.ids.release(pid)
        session._reported.discard(DROPPED_QUEUE_FULL)  # the queue is empty again

    def _send_delivery(self, delivery: Delivery, packet_id: int | None, now: float,
                       dup: bool = False) -> bool:
        message = delivery.message
        version = self.version or 4
        expiry = message.remaining_expiry(now)
        alias, with_topic = self._aliases_out.plan(message.topic)
        if alias is None:
            # One PreparedPublish per message: only this client's header fields, its
            # Subscription Identifiers and the remaining expiry are written here.
            data = message.prepared(self.codec).encode(
                version, qos=delivery.qos, packet_id=packet_id, retain=delivery.retain,
                dup=dup, subscription_identifiers=delivery.subscription_ids,
                message_expiry_interval=expiry)
            if not self._write(data):
                return False
            self._publish_ends.append(self._produced)
            return True
        # With a Topic Alias (5.0 only, within the client's maximum [MQTT-3.1.2-26]).
        props = dict(message.properties.items()) if message.properties is not None else {}
        props["topic_alias"] = alias
        if expiry is not None:
            props["message_expiry_interval"] = expiry
        if delivery.subscription_ids:
            props["subscription_identifiers"] = delivery.subscription_ids
        data = self.codec.Publish(
            message.topic if with_topic else "", message.payload, qos=delivery.qos,
            retain=delivery.retain, dup=dup, packet_id=packet_id,
            properties=Properties(**props)).encode(5)
        if not self._write(data):
            return False
        self._publish_ends.append(self._produced)
        self._aliases_out.commit(message.topic, alias)
        return True

    def _on_ack(self, packet: Any, now: float) -> None:
        """PUBACK (QoS 1) or PUBCOMP (QoS 2, after our PUBREL) ends an exchange."""
        session = self._session()
        entry = session.inflight.get(packet.packet_id)
        if entry is None:
            return  # nothing in flight with this identifier: nothing to complete
        if isinstance(packet, self.codec.PubAck):
            if entry.delivery.qos != 1:
                return
        elif not entry.released:
            return
        del session.inflight[packet.packet_id]
        session.ids.release(packet.packet_id)
        self._pump(now)

    def _on_pubrec(self, packet: Any, now: float) -> None:
        session = self._session()
        pid = packet.packet_id
        entry = session.inflight.get(pid)
        if entry is None or entry.delivery.qos != 2:
            # §4.3.3: PUBREL 0x92 Packet Identifier not found (3.x: a plain PUBREL).
            self._send(self.codec.PubRel(
                pid, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if self.version == 5
                else 0))
            return
        if packet.reason_code >= 0x80:
            # [MQTT-4.4.0-2]: a failure PUBREC ends the exchange, no re-send.
            del session.inflight[pid]
            session.ids.release(pid)
            self._pump(now)
            return
        entry.released = True
        self._send(self.codec.PubRel(pid))  # [MQTT-4.3.3-4]

    # Client -> server ----------------------------------------------------------------

    def _session(self) -> ServerSession:
        session = self.session
        if session is None:  # the decoder lets nothing come before CONNECT
            raise ProtocolError("packet", "a packet before CONNECT", rule="MQTT-3.1.0-1")
        return session

    def _on_publish(self, packet: Any, now: float) -> None:
        session = self._session()
        props = packet.properties
        topic = packet.topic
        if self.version == 5:
            topic = self._aliases_in.resolve(topic, props.topic_alias if props else None)
            if props is not None and props.subscription_identifiers:
                raise ProtocolError("PUBLISH", "a Subscription Identifier from a Client",
                                    rule="MQTT-3.3.4-6")
        config = self.broker.config
        if packet.qos > config.maximum_qos:
            # §3.2.2.3.4: DISCONNECT 0x9B QoS not supported (3.x: closed).
            raise ProtocolError("PUBLISH", f"QoS {packet.qos} above the server's Maximum QoS "
                                f"{config.maximum_qos}", rule="MQTT-3.2.2-11",
                                reason_code=ReasonCode.QOS_NOT_SUPPORTED)
        if packet.retain and not config.retain_available:
            # §3.2.2.3.5: DISCONNECT 0x9A Retain not supported (3.x: closed).
            raise ProtocolError("PUBLISH", "RETAIN 1 and the server has no Retain Available",
                                rule="MQTT-3.2.2-14",
                                reason_code=ReasonCode.RETAIN_NOT_SUPPORTED)
        pid = packet.packet_id
        if packet.qos == 1 and pid in session.awaiting_pubrel:
            # §2.2.1: a new PUBLISH needs an identifier that is not in use.
            raise ProtocolError("PUBLISH", f"QoS 1 PUBLISH with packet identifier {pid}, in "
                                "use by a QoS 2 message awaiting PUBREL", rule="§2.2.1")
        if packet.qos == 2:
            if pid in session.awaiting_pubrel:
                # [MQTT-4.3.3-10]: acknowledged again, not delivered twice.
                self._send(self.codec.PubRec(pid))
                return
            if self.version == 5 and \
                    len(session.awaiting_pubrel) >= self.broker.config.receive_maximum:
                # §3.3.4 [MQTT-3.3.4-7] (the client's duty), §4.9: DISCONNECT 0x93.
                raise ProtocolError(
                    "PUBLISH", "more than Receive Maximum "
                    f"({self.broker.config.receive_maximum}) unacknowledged QoS 1/2 PUBLISHes",
                    rule="MQTT-3.3.4-7", reason_code=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
        message = Message.received(topic, packet.payload, packet.qos, packet.retain, props, now)
        # The hook's absence tested here: this runs for every PUBLISH.
        if self.broker.config.authorize_publish is None or \
                self._may_publish(topic, packet.qos, packet.retain):
            self.broker._route(message, session.client_id, now)
        elif self.version == 5 and packet.qos:
            # Refused: 5.0 says so with PUBACK/PUBREC 0x87 Not authorized (§3.4.2.1,
            # §3.5.2.1; a failure PUBREC ends the exchange: no PUBREL comes).  3.x has no
            # such code: acknowledged below and dropped, as Mosquitto does; QoS 0 dropped.
            code = ReasonCode.NOT_AUTHORIZED
            self._send(self.codec.PubAck(pid, reason_code=code) if packet.qos == 1
                       else self.codec.PubRec(pid, reason_code=code))
            return
        if packet.qos == 1:
            self._send(self.codec.PubAck(pid))  # [MQTT-4.3.2-4]
        elif packet.qos == 2:
            session.awaiting_pubrel.add(pid)
            self._send(self.codec.PubRec(pid))  # [MQTT-4.3.3-8]

    def _may_publish(self, topic: str, qos: int, retain: bool) -> bool:
        rule = self.broker.config.authorize_publish
        if rule is None:
            return True
        return self.principal is not None and bool(rule(self.principal, topic, qos, retain))

    def _on_pubrel(self, packet: Any) -> None:
        session = self._session()
        pid = packet.packet_id
        if pid in session.awaiting_pubrel:
            session.awaiting_pubrel.discard(pid)
            self._send(self.codec.PubComp(pid))  # [MQTT-4.3.3-11]
        else:
            self._send(self.codec.PubComp(
                pid, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND if self.version == 5
                else 0))

    def _on_subscribe(self, packet: Any, now: float) -> None:
        session = self._session()
        broker = self.broker
        props = packet.properties
        identifier = None
        if props is not None and props.subscription_identifiers:
            identifier = props.subscription_identifiers[0]
        codes: list[int] = []
        retained_for = []
        deny = broker.config.deny_subscription
        may_subscribe = broker.config.authorize_subscribe
        principal = self.principal
        for options in packet.subscriptions:
            topic_filter = options.topic_filter
            try:
                # The decoder leaves wildcard placement to us (§4.7.1).
                self.codec.validate_topic_filter(topic_filter, version=self.version or 4)
            except MQTTWireError:
                # 5.0 0x8F Topic Filter invalid; 3.1.1 0x80 Failure; 3.1 has no failure
                # code, so the connection closes.
                if self.version == 3:
                    raise
                codes.append(ReasonCode.TOPIC_FILTER_INVALID if self.version == 5 else 0x80)
                continue
            if deny is not None and deny(session.client_id, options) or \
                    may_subscribe is not None and not (
                        principal is not None and may_subscribe(principal, options)):
                if self.version == 3:
                    raise ProtocolError("SUBSCRIBE", f"subscription to {topic_filter!r} "
                                        "denied, and MQTT 3.1 has no SUBACK failure code",
                                        rule="§3.9.3", reason_code=ReasonCode.NOT_AUTHORIZED)
                codes.append(ReasonCode.NOT_AUTHORIZED if self.version == 5 else 0x80)
                continue
            sub = Subscribed(options, identifier, broker.config.maximum_qos)
            # [MQTT-3.8.4-3]: the same filter replaces the subscription.
            new = broker.subscriptions.insert(topic_filter, session.client_id, sub)
            # Granted as asked [MQTT-3.8.4-7], at most our Maximum QoS ([MQTT-3.2.2-10]:
            # any requested QoS is accepted; 3.1.1 §3.9.3 lets the grant be lower).
            codes.append(sub.qos)
            # Retained messages for a non-shared subscription as Retain Handling says
            # ([MQTT-3.3.1-9], [MQTT-3.3.1-10], [MQTT-3.3.1-11]); 3.x behaves as 0
            # (3.1.1 [MQTT-3.3.1-6], [MQTT-3.8.4-3]).
            handling = options.retain_handling
            if not topic_filter.startswith("$share/") and (handling == 0 or
                                                           handling == 1 and new):
                retained_for.append(sub)
        self._send(self.codec.SubAck(packet.packet_id, codes))  # [MQTT-3.8.4-1]
        broker._events.append(ClientSubscribed(self, session.client_id,
                                               list(packet.subscriptions), codes))
        for sub in retained_for:
            broker._send_retained(session, sub, now)

    def _on_unsubscribe(self, packet: Any) -> None:
        session = self._session()
        # [MQTT-3.10.4-1]: filters compared character by character; 5.0 answers 0x11 for
        # those that match no subscription.
        codes = [0x00 if self.broker.subscriptions.remove(f, session.client_id)
                 else ReasonCode.NO_SUBSCRIPTION_EXISTED for f in packet.topic_filters]
        codes = codes if self.version == 5 else []
        self._send(self.codec.UnsubAck(packet.packet_id, codes))
        self.broker._events.append(ClientUnsubscribed(self, session.client_id,
                                                      list(packet.topic_filters), codes))

    def _on_disconnect(self, packet: Any, now: float) -> None:
        if self.state is ConnectionState.AUTHENTICATING:
            # The client gave up on the exchange (allowed: [MQTT-3.1.2-30]).
            self._close(now, f"DISCONNECT 0x{packet.reason_code:02X} from the client during "
                        "authentication", by_client=True)
            return
        session = self._session()
        props = packet.properties
        if props is not None and props.session_expiry_interval is not None:
            if session.expiry_interval == 0 and props.session_expiry_interval != 0:
                raise ProtocolError(
                    "DISCONNECT", "Session Expiry Interval set after CONNECT set it to 0",
                    rule="§3.14.2.2.2")
            session.expiry_interval = self.broker._capped_expiry(props.session_expiry_interval)
        # [MQTT-3.1.2-10] (3.1.1 [MQTT-3.1.2-10]): a normal DISCONNECT deletes the will;
        # 5.0 0x04 Disconnect with Will Message (or an error code) keeps it.
        self._close(now, f"DISCONNECT 0x{packet.reason_code:02X} from the client",
                    by_client=True, publish_will=packet.reason_code != 0)
