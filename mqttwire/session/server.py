"""The server side: broker state shared by all connections, and one object per network
connection.  No sockets, no clock: the caller passes received bytes and the time, and
writes out what ``Broker.outgoing()`` (or each connection's ``data_to_send()``) returns.

Protocol levels 3 (MQTT 3.1), 4 (3.1.1) and 5 (5.0) are chosen per connection by its
CONNECT.  Rule numbers are MQTT 5.0's unless marked 3.1.1.
"""

from __future__ import annotations

import enum
import itertools
import math
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .._codec.properties import Properties
from .._constants import REASON_CODES, PacketType, ReasonCode
from .._errors import MQTTWireError, ProtocolError
from ._codec_choice import Codec
from ._ids import PacketIds
from ._timers import Timers
from .aliases import InboundAliases, OutboundAliases
from .auth import (
    Accept,
    Authenticate,
    AuthRequest,
    Challenge,
    ConnectionInfo,
    Principal,
    Refuse,
    v3_return_code,
)
from .errors import SessionError, check_reason_code, disconnect_reason
from .events import (
    ClientConnected,
    ClientReauthenticated,
    ClientRefused,
    ClientSubscribed,
    ClientUnsubscribed,
    ConnectionClosed,
    DeliveriesDropped,
    Event,
    MessagePublished,
    SessionExpired,
    WillPublished,
)
from .message import Message, RetainedStore

__all__ = [
    "Broker",
    "BrokerConfig",
    "ServerConnection",
    "ServerSession",
    "ConnectionState",
    "Delivery",
    "Outgoing",
    "SESSION_NEVER_EXPIRES",
    "SessionStats",
]

#: Session Expiry Interval 0xFFFFFFFF: the session does not expire (§3.1.2.11.2).
SESSION_NEVER_EXPIRES = 0xFFFF_FFFF

#: A subscribe deny rule: (client identifier, subscription) -> True to refuse it.
DenyRule = Callable[[str, Any], bool]
#: Authorisation hooks (mqttwire.session.auth; docs/session.md, "Authorisation"): True
#: allows.  Publish: (principal, topic, qos, retain); subscribe: (principal,
#: Subscription); delivery: (principal of the receiving session, Message).
PublishRule = Callable[[Principal, str, int, bool], bool]
SubscribeRule = Callable[[Principal, Any], bool]
DeliveryRule = Callable[[Principal, Message], bool]


@dataclass(frozen=True)
class BrokerConfig:
    """What the broker offers and enforces.  Every field has a working default."""

    #: QoS 1/2 PUBLISHes a 5.0 client may have unacknowledged towards us (CONNACK
    #: Receive Maximum, §3.2.2.3.3); one more gets DISCONNECT 0x93.
    receive_maximum: int = 64
    #: Our in-flight window towards 3.x clients, which announce no Receive Maximum.
    v3_send_window: int = 64
    #: Largest packet accepted (CONNACK Maximum Packet Size); larger ones are refused
    #: from their fixed header (0x95).  None: no limit beyond the protocol's.
    max_packet_size: int | None = 1024 * 1024
    #: Topic Aliases a 5.0 client may use towards us (CONNACK Topic Alias Maximum).
    topic_alias_maximum: int = 16
    #: Assign Topic Aliases to PUBLISHes sent to 5.0 clients that allow them (their
    #: CONNECT Topic Alias Maximum), within their maximum.
    assign_topic_aliases: bool = True
    #: Keep Alive cap in seconds: a 5.0 client asking for more (or 0, none) is told this
    #: value as Server Keep Alive (§3.2.2.3.14).  None: the client's value stands.
    max_keep_alive: int | None = None
    #: Seconds a new connection has to send CONNECT (3.1.1 §3.1.4, "a reasonable time").
    connect_timeout: float = 10.0
    #: Optional per-filter subscribe deny rule: (client identifier, Subscription) ->
    #: True to refuse.  Refused filters get SUBACK 0x87 Not authorized (5.0), 0x80
    #: Failure (3.1.1); MQTT 3.1 has no failure code, so the connection is closed.
    deny_subscription: DenyRule | None = None
    #: Prefix of the Client Identifiers assigned to clients that send an empty one.
    assigned_id_prefix: str = "auto-"
    #: Seconds at most the I/O glue lingers over a connection the server closes (its
    #: write side shut, input read and discarded) before it closes the socket: see
    #: ``Outgoing.linger``.  0: close at once.
    linger_timeout: float = 2.0

    # Bounds on memory, and what the server offers (docs/session.md, "Bounds"). -------
    #: What may wait to be written to one connection: bytes (queued by the session and
    #: not yet taken, plus taken by the glue and not yet written by its transport, as
    #: the glue reports with ``ServerConnection.set_unwritten``) and PUBLISH packets.
    #: Past either, QoS 0 messages to it are dropped and QoS 1/2 ones wait in the
    #: session's queue.
    max_unwritten_bytes: int = 1024 * 1024
    max_unwritten_messages: int = 10_000
    #: Messages (any QoS) waiting in one session's queue: beyond the client's Receive
    #: Maximum, behind a full write buffer, or for an offline session's return (payload
    #: and topic bytes for ``max_queued_bytes``).  At either bound a new message is
    #: dropped, as Mosquitto's options of the same names do.  None: no bound.
    max_queued_messages: int | None = 1000
    max_queued_bytes: int | None = 8 * 1024 * 1024
    #: Seconds a connection may stay over its unwritten bound before it is closed (5.0:
    #: DISCONNECT 0x97 Quota exceeded).  None: never closed for it.
    write_stall_timeout: float | None = 60.0
    #: Cap on the Session Expiry Interval, in seconds (a 5.0 client asking for more is
    #: told the capped value in CONNACK, §3.2.2.3.2; a 3.x Clean Session 0 session,
    #: which would never expire, expires after it).  None: the client's value stands.
    max_session_expiry: int | None = None
    #: Highest QoS accepted in PUBLISH and granted in SUBACK (CONNACK Maximum QoS,
    #: [MQTT-3.2.2-9]); a PUBLISH above it: DISCONNECT 0x9B (3.x: closed).
    maximum_qos: int = 2
    #: Whether retained messages are supported (CONNACK Retain Available); without,
    #: a PUBLISH with RETAIN 1: DISCONNECT 0x9A (3.x: closed) [MQTT-3.2.2-14].
    retain_available: bool = True
    # Authentication and authorisation (mqttwire.session.auth; docs/session.md,
    # "Authentication" and "Authorisation").  None: everyone may connect and do anything.
    #: Called for each CONNECT and each AUTH of an enhanced authentication exchange:
    #: answers Accept, Refuse(reason_code) or Challenge (5.0, with an Authentication
    #: Method).  None: every CONNECT without an Authentication Method is accepted.
    authenticate: Authenticate | None = None
    #: The 5.0 Authentication Methods ``authenticate`` handles; a CONNECT with another
    #: is refused with 0x8C Bad authentication method [MQTT-4.12.0-1] without a call.
    authentication_methods: AbstractSet[str] = frozenset()
    #: May this client publish here?  No: a QoS 0 message is dropped, QoS 1/2 gets
    #: PUBACK/PUBREC 0x87 in 5.0 and is acknowledged and dropped in 3.x (as Mosquitto
    #: does); a will is not published.
    authorize_publish: PublishRule | None = None
    #: May this client subscribe with this filter?  No: SUBACK 0x87 (5.0), 0x80 (3.1.1),
    #: MQTT 3.1 closes (as ``deny_subscription``, which still applies too).
    authorize_subscribe: SubscribeRule | None = None
    #: May this session read this message?  No: it is not delivered to it (retained
    #: messages included; a shared subscription group's turn goes to a member that may).
    authorize_delivery: DeliveryRule | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.receive_maximum <= 65535:
            raise ValueError(f"receive_maximum must be 1..65535, not {self.receive_maximum}")
        if not 1 <= self.v3_send_window <= 65535:
            raise ValueError(f"v3_send_window must be 1..65535, not {self.v3_send_window}")
        if not 0 <= self.topic_alias_maximum <= 65535:
            raise ValueError(
                f"topic_alias_maximum must be 0..65535, not {self.topic_alias_maximum}")
        if self.max_packet_size is not None and not 2 <= self.max_packet_size <= 268_435_460:
            raise ValueError(f"max_packet_size {self.max_packet_size} is out of range")
        if self.max_keep_alive is not None and not 1 <= self.max_keep_alive <= 65535:
            raise ValueError(f"max_keep_alive must be 1..65535, not {self.max_keep_alive}")
        if not 0 <= self.linger_timeout < math.inf:
            raise ValueError(f"linger_timeout must be 0 or more seconds, not "
                             f"{self.linger_timeout}")
        for name in ("max_unwritten_bytes", "max_unwritten_messages", "max_queued_messages",
                     "max_queued_bytes", "max_session_expiry"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a whole number, 1 or more, not {value!r}")
        if self.max_unwritten_bytes is None or self.max_unwritten_messages is None:
            raise ValueError("max_unwritten_bytes and max_unwritten_messages cannot be None")
        if self.write_stall_timeout is not None and not 0 < self.write_stall_timeout < math.inf:
            raise ValueError(f"write_stall_timeout must be more than 0 seconds, or None, not "
                             f"{self.write_stall_timeout}")
        if self.maximum_qos not in (0, 1, 2):
            raise ValueError(f"maximum_qos must be 0, 1 or 2, not {self.maximum_qos!r}")
        object.__setattr__(self, "authentication_methods",
                           frozenset(self.authentication_methods))
        if self.authentication_methods and self.authenticate is None:
            raise ValueError("authentication_methods needs an authenticate hook to run them")


@dataclass(eq=False, slots=True)
class Delivery:
    """A message on its way to one session, as that session's subscriptions made it:
    the QoS (the highest of the matching subscriptions [MQTT-3.3.4-2], at most the
    message's [MQTT-3.8.4-8]), RETAIN as forwarded, and the Subscription Identifiers
    [MQTT-3.3.4-3]."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: list[int] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class _Exchange:
    """An enhanced authentication exchange in progress on one connection: the CONNECT
    that started it (None for a re-authentication), and where the hook is."""

    connect: Any
    client_id: str
    assigned: str | None
    username: str | None
    step: int = 0
    state: Any = None


@dataclass(eq=False, slots=True)
class _InFlight:
    delivery: Delivery
    #: QoS 2: PUBREC came and our PUBREL went; PUBCOMP is awaited.
    released: bool = False


class _Subscribed:
    """A stored subscription: its options and 5.0 Subscription Identifier.  ``qos`` (the
    options' maximum QoS, which TopicTree reads) is copied out once: every delivery reads
    it."""

    __slots__ = ("options", "identifier", "qos")

    def __init__(self, options: Any, identifier: int | None, maximum_qos: int = 2) -> None:
        self.options = options
        self.identifier = identifier
        self.qos: int = min(options.qos, maximum_qos)

    def __repr__(self) -> str:
        return f"_Subscribed({self.options!r}, {self.identifier!r})"


#: ``DeliveriesDropped.reason`` (and the ``SessionStats`` counter it adds to).
DROPPED_UNWRITTEN = "unwritten"
DROPPED_QUEUE_FULL = "queue full"


@dataclass(slots=True)
class SessionStats:
    """What a session's bounds did to its messages (counts since the session began)."""

    #: QoS 0 messages dropped because the connection's unwritten output was at its bound
    #: (``max_unwritten_bytes``/``max_unwritten_messages``).
    dropped_unwritten: int = 0
    #: Messages of any QoS dropped because the queue was at ``max_queued_messages`` or
    #: ``max_queued_bytes`` (the new message is the one dropped).
    dropped_queue_full: int = 0
    #: QoS 0 messages not queued for a session without a connection (§4.1 lets the
    #: server drop them; Mosquitto's default does the same).
    dropped_offline: int = 0
    #: Messages whose Message Expiry Interval ran out while queued [MQTT-3.3.2-5].
    expired: int = 0


def _size(delivery: Delivery) -> int:
    """What a queued delivery counts against ``max_queued_bytes``: payload and topic."""
    message = delivery.message
    return len(message.payload) + len(message.topic)


class ServerSession:
    """The state the server keeps for one Client Identifier (MQTT 5.0 §4.1), which may
    outlive its network connection."""

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        #: Deliveries waiting for the connection, for room in the client's window or for
        #: room in the connection's unwritten output (``BrokerConfig.max_queued_*``).
        self.queue: deque[Delivery] = deque()
        #: Payload and topic bytes of ``queue``.
        self.queued_bytes = 0
        self.stats = SessionStats()
        #: Whether a drop of each reason was reported (DeliveriesDropped) since the
        #: bound was last clear: one event per episode, not one per message.
        self._reported: set[str] = set()
        #: Our unacknowledged QoS 1/2 PUBLISHes, by packet identifier, in sending order.
        self.inflight: OrderedDict[int, _InFlight] = OrderedDict()
        #: Identifiers of the client's QoS 2 PUBLISHes we PUBREC'd, until its PUBREL.
        self.awaiting_pubrel: set[int] = set()
        self.ids = PacketIds()
        self.connection: ServerConnection | None = None
        #: Seconds the session outlives its connection: 0, a 5.0 interval, or
        #: SESSION_NEVER_EXPIRES (also a 3.x Clean Session 0 session).
        self.expiry_interval = 0
        #: Who its client last authenticated as: the authorisation hooks' argument.
        self.principal: Principal | None = None

    def __repr__(self) -> str:
        state = "connected" if self.connection is not None else "offline"
        return (f"ServerSession({self.client_id!r}, {state}, {len(self.inflight)} in flight,"
                f" {len(self.queue)} queued ({self.queued_bytes} bytes),"
                f" expiry={self.expiry_interval})")


class ConnectionState(enum.Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    #: CONNECT received, an enhanced authentication exchange (AUTH) before CONNACK.
    AUTHENTICATING = "authenticating"
    CONNECTED = "connected"
    CLOSED = "closed"


_CLOSED = ConnectionState.CLOSED


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


class Broker:
    """Sessions, subscriptions, retained messages and pending wills, shared by every
    connection of one server.

    Usage (the caller owns the sockets and the clock)::

        broker = Broker(BrokerConfig(max_keep_alive=60))
        conn = broker.new_connection(now)              # a client connected
        events = conn.receive_data(data, now)          # bytes read from its socket
        for out in broker.outgoing():                  # every connection with output
            write(out.connection, out.data)
            if out.close:                              # after lingering out.linger
                close(out.connection, out.linger)      # seconds: see Outgoing
            else:                                      # what the transport still holds
                out.connection.set_unwritten(unwritten, now)   # (optional: the bounds)
        when = broker.next_deadline()                  # call broker.tick(now) then
        events = broker.tick(now)

    ``codec`` is the codec module (``mqttwire._speedups`` or ``mqttwire._pure``); None
    uses the one ``import mqttwire`` picked.
    """

    def __init__(self, config: BrokerConfig | None = None, *,
                 codec: ModuleType | None = None) -> None:
        self.config = config if config is not None else BrokerConfig()
        self.codec = Codec(codec)
        self.sessions: dict[str, ServerSession] = {}
        #: Every session's subscriptions: filter -> client identifier -> _Subscribed.
        self.subscriptions = self.codec.TopicTree()
        self.retained = RetainedStore()
        #: Wills waiting for their Will Delay Interval, by client identifier.
        self.delayed_wills: dict[str, Message] = {}
        self._share_turns: dict[str, int] = {}
        self._timers = Timers()
        self._events: list[Event] = []
        self._dirty: dict[ServerConnection, None] = {}
        self._numbers = itertools.count(1)
        #: The latest time a caller gave (for the deliveries sent when output is taken,
        #: which has no ``now`` of its own).
        self._now = 0.0

    def __repr__(self) -> str:
        return (f"Broker({len(self.sessions)} sessions, {len(self.subscriptions)} subscriptions,"
                f" {len(self.retained)} retained, codec={self.codec.module.__name__})")

    # Connections ---------------------------------------------------------------------

    def new_connection(self, now: float, *, name: str | None = None,
                       info: ConnectionInfo | None = None) -> ServerConnection:
        """A new network connection: it has ``connect_timeout`` seconds to send CONNECT
        (and finish any enhanced authentication).  ``info``: what the I/O glue knows of
        it (peer address, TLS client certificate subject), for the ``authenticate``
        hook; ``name`` defaults to its peer address."""
        if info is None:
            info = ConnectionInfo()
        if name is None:
            name = info.peer
        conn = ServerConnection(self, next(self._numbers), name, now, info)
        self._timers.set(("conn", conn), now + self.config.connect_timeout)
        return conn

    def outgoing(self) -> list[Outgoing]:
        """Every connection with bytes to send or a socket to close, since the last call
        (each once, its bytes taken); and, with no data, those that want the glue's
        ``set_unwritten`` report (``ServerConnection.wants_report``)."""
        dirty = list(self._dirty)
        self._dirty.clear()
        out = []
        for conn in dirty:
            data = conn._take_output()
            if data or conn.closed or conn.wants_report:
                out.append(Outgoing(conn, data, conn.closed, conn.linger))
        return out

    def _mark(self, conn: ServerConnection) -> None:
        self._dirty[conn] = None

    def _take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    # Time ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``tick`` next has work (keep-alive, CONNECT timeout, will delay, session
        expiry), or None."""
        return self._timers.next_deadline()

    def tick(self, now: float) -> list[Event]:
        """Do what is due at ``now``."""
        self._now = now
        for key in self._timers.due(now):
            kind: str
            target: Any
            kind, target = key  # type: ignore[misc]
            if kind == "conn":
                target._deadline(now)
            elif kind == "stall":
                target._stalled(now)
            elif kind == "will":
                self._publish_delayed_will(target, now)
            elif kind == "session":
                session = self.sessions.get(target)
                if session is not None and session.connection is None:
                    self._end_session(session, now)
        return self._take_events()

    # Publishing ----------------------------------------------------------------------

    def publish(self, topic: str, payload: bytes = b"", *, qos: int = 0, retain: bool = False,
                properties: Properties | None = None, now: float) -> list[Event]:
        """Publish an Application Message of the server's own (``$SYS`` topics, a
        bridge): retained and routed like a client's.

        ``retain=True`` without ``BrokerConfig.retain_available`` raises SessionError and
        publishes nothing: the server told its clients it keeps no retained messages
        (CONNACK Retain Available 0) and refuses their RETAIN 1 [MQTT-3.2.2-14]; storing
        its own would send new subscribers retained messages it said it does not have."""
        self.codec.validate_topic_name(topic, version=5)
        if qos not in (0, 1, 2):
            raise SessionError(f"QoS must be 0, 1 or 2, not {qos!r}")
        if retain and not self.config.retain_available:
            raise SessionError(
                f"publish({topic!r}, retain=True): this broker has no retained messages "
                "(BrokerConfig.retain_available is False, CONNACK Retain Available 0; a "
                "client's RETAIN 1 is refused the same way, [MQTT-3.2.2-14])")
        self._now = now
        message = Message.received(topic, payload, qos, retain, properties, now)
        self._route(message, None, now)
        return self._take_events()

    def _route(self, message: Message, sender: str | None, now: float) -> int:
        """Retain and deliver ``message`` to every matching session; returns how many."""
        if message.retain:
            self.retained.store(message)
        own: dict[str, list[_Subscribed]] = {}
        groups: dict[str, list[tuple[str, _Subscribed]]] = {}
        for topic_filter, client_id, sub in self.subscriptions.match_all(message.topic):
            if topic_filter.startswith("$share/"):
                groups.setdefault(topic_filter, []).append((client_id, sub))
            # [MQTT-3.8.3-3]: No Local keeps a client's own messages from it.
            elif not (sub.options.no_local and client_id == sender):
                own.setdefault(client_id, []).append(sub)
        count = 0
        sessions = self.sessions
        may_read = self.config.authorize_delivery
        for client_id, subs in own.items():
            if may_read is not None and not self._may_read(sessions[client_id], message):
                continue
            # One copy at the highest QoS [MQTT-3.3.4-2] with every identifier
            # [MQTT-3.3.4-4]; RETAIN 0 to established subscriptions unless Retain As
            # Published ([MQTT-3.3.1-12], [MQTT-3.3.1-13]; 3.1.1 [MQTT-3.3.1-9]).  One
            # plain loop: this runs once per subscriber and message.
            qos = 0
            retain = False
            ids = []
            for s in subs:
                if s.qos > qos:
                    qos = s.qos
                if message.retain and s.options.retain_as_published:
                    retain = True
                if s.identifier is not None:
                    ids.append(s.identifier)
            count += self._enqueue(sessions[client_id],
                                   Delivery(message, min(qos, message.qos), retain, ids), now)
        for topic_filter, members in groups.items():
            # §4.8.2: a shared subscription group gets each message once: round robin
            # over its connected members (over all of them when none is connected).
            if may_read is not None:
                members = [m for m in members if self._may_read(self.sessions[m[0]], message)]
                if not members:
                    continue
            online = [m for m in members if self.sessions[m[0]].connection is not None]
            pool = online or members
            turn = self._share_turns.get(topic_filter, 0)
            self._share_turns[topic_filter] = turn + 1
            client_id, sub = pool[turn % len(pool)]
            ids = [] if sub.identifier is None else [sub.identifier]
            count += self._enqueue(self.sessions[client_id], Delivery(
                message, min(sub.qos, message.qos),
                message.retain and sub.options.retain_as_published, ids), now)
        self._events.append(MessagePublished(sender, message, count))
        return count

    def _may_read(self, session: ServerSession, message: Message) -> bool:
        """The ``authorize_delivery`` hook's answer for ``session`` (read access, as
        Mosquitto's ACL 'read'); a session never authenticated reads nothing."""
        rule = self.config.authorize_delivery
        if rule is None:
            return True
        return session.principal is not None and bool(rule(session.principal, message))

    def _enqueue(self, session: ServerSession, delivery: Delivery, now: float) -> int:
        """Queue ``delivery`` for ``session`` within its bounds (docs/session.md,
        "Bounds"); returns 1 if queued, 0 if dropped."""
        conn = session.connection
        if conn is None:
            # A session without a connection keeps QoS 1/2 messages for its client's
            # return (§4.1); QoS 0 ones may be dropped, and are.
            if delivery.qos == 0:
                session.stats.dropped_offline += 1
                return 0
        elif delivery.qos == 0 and conn._behind(now):
            # The client does not take what it is sent: QoS 0 may be lost (§4.3.1).
            session.stats.dropped_unwritten += 1
            self._dropped(session, DROPPED_UNWRITTEN, session.stats.dropped_unwritten)
            return 0
        queue = session.queue
        config = self.config
        if queue and (config.max_queued_messages is not None
                      and len(queue) >= config.max_queued_messages
                      or config.max_queued_bytes is not None
                      and session.queued_bytes >= config.max_queued_bytes):
            # Full: the new message is dropped, the queued ones kept (Mosquitto's rule
            # for its max_queued_messages/max_queued_bytes), so that what the client
            # gets is the oldest run of messages, in order, with no gap inside it.
            session.stats.dropped_queue_full += 1
            self._dropped(session, DROPPED_QUEUE_FULL, session.stats.dropped_queue_full)
            return 0
        queue.append(delivery)
        session.queued_bytes += _size(delivery)
        if conn is not None:
            conn._pump(now)
        return 1

    def _dropped(self, session: ServerSession, reason: str, total: int) -> None:
        if reason not in session._reported:
            session._reported.add(reason)
            self._events.append(DeliveriesDropped(session.client_id, reason, total))

    def _send_retained(self, session: ServerSession, sub: _Subscribed, now: float) -> None:
        """Retained messages for a new subscription [MQTT-3.3.1-9], RETAIN 1 (3.1.1
        [MQTT-3.3.1-8]; 5.0 §3.3.1.3)."""
        for message in self.retained.matching(sub.options.topic_filter, self.codec, now):
            if not self._may_read(session, message):
                continue
            ids = [] if sub.identifier is None else [sub.identifier]
            self._enqueue(session, Delivery(message, min(sub.qos, message.qos), True, ids), now)

    # Sessions ------------------------------------------------------------------------

    def _attach(self, conn: ServerConnection, client_id: str, clean_start: bool,
                expiry: int, now: float) -> tuple[ServerSession, bool]:
        old = self.sessions.get(client_id)
        if old is not None and old.connection is not None:
            # 3.1.1 [MQTT-3.1.4-2] / 5.0 [MQTT-3.1.4-3]: the existing connection of this
            # Client Identifier is closed (5.0: DISCONNECT 0x8E Session taken over).
            old.connection._close(now, "session taken over by a new connection",
                                  reason_code=ReasonCode.SESSION_TAKEN_OVER)
        # [MQTT-3.1.3-9]: a new connection before the Will Delay Interval ran out: the
        # will is not sent.
        if self.delayed_wills.pop(client_id, None) is not None:
            self._timers.cancel(("will", client_id))
        session = self.sessions.get(client_id)
        if session is not None and clean_start:
            # [MQTT-3.1.2-4] (3.1.1 [MQTT-3.1.2-6]): Clean Start discards the old session.
            self._end_session(session, now, expired=False)
            session = None
        resumed = session is not None
        if session is None:
            session = self.sessions[client_id] = ServerSession(client_id)
        self._timers.cancel(("session", client_id))
        session.connection = conn
        session.expiry_interval = expiry
        return session, resumed

    def _capped_expiry(self, expiry: int) -> int:
        """A Session Expiry Interval within ``max_session_expiry``."""
        cap = self.config.max_session_expiry
        return expiry if cap is None or expiry <= cap else cap

    def _detach(self, session: ServerSession, will: Message | None, will_delay: int,
                now: float) -> None:
        session.connection = None
        if will is not None:
            if will_delay:
                self.delayed_wills[session.client_id] = will
                self._timers.set(("will", session.client_id), now + will_delay)
            else:
                self._publish_will(session.client_id, will, now)
        if session.expiry_interval == 0:
            self._end_session(session, now)
        elif session.expiry_interval != SESSION_NEVER_EXPIRES:
            self._timers.set(("session", session.client_id), now + session.expiry_interval)

    def _end_session(self, session: ServerSession, now: float, expired: bool = True) -> None:
        """Discard a session (§4.1; its subscriptions go with it)."""
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
            self.subscriptions.remove_key(session.client_id)
        self._timers.cancel(("session", session.client_id))
        if expired:
            self._events.append(SessionExpired(session.client_id))
        # [MQTT-3.1.2-8]: a delayed will goes out when its session ends, if that is first.
        if session.client_id in self.delayed_wills:
            self._publish_delayed_will(session.client_id, now)

    def _publish_delayed_will(self, client_id: str, now: float) -> None:
        will = self.delayed_wills.pop(client_id, None)
        self._timers.cancel(("will", client_id))
        if will is not None:
            self._publish_will(client_id, will, now)

    def _publish_will(self, client_id: str, will: Message, now: float) -> None:
        props = will.properties
        if props is not None and props.message_expiry_interval is not None:
            # §3.1.3.2.4: the Will's Message Expiry Interval counts from its publication.
            will.expires_at = now + props.message_expiry_interval
        self._events.append(WillPublished(client_id, will))
        self._route(will, None, now)

    def shutdown(self, now: float) -> list[Event]:
        """Close every connection (5.0: DISCONNECT 0x8B Server shutting down)."""
        for session in list(self.sessions.values()):
            if session.connection is not None:
                session.connection._close(now, "server shutting down",
                                          reason_code=ReasonCode.SERVER_SHUTTING_DOWN)
        return self._take_events()


class ServerConnection:
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
        self._exchange: _Exchange | None = None
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
            if self.state is _CLOSED:
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
        if self.state is _CLOSED:  # the property's test, without a call per packet
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

    def _on_connect(self, packet: Any, now: float) -> None:
        config = self.broker.config
        self.version = version = packet.protocol_version
        props = packet.properties
        client_id = packet.client_id
        assigned = None
        method = props.authentication_method if version == 5 and props is not None else None
        if method is not None and method not in config.authentication_methods:
            # [MQTT-4.12.0-1]: a method no hook handles is refused.
            self._refuse(ReasonCode.BAD_AUTHENTICATION_METHOD, f"Authentication Method "
                         f"{method!r} is not supported [MQTT-4.12.0-1]", now)
            return
        if not client_id:
            if version == 3 or not packet.clean_start:
                # MQTT 3.1 needs 1 to 23 characters; 3.1.1 [MQTT-3.1.3-8] refuses an
                # empty one without Clean Session (5.0 allows it: §3.1.3.1).
                if version != 5:
                    self._refuse(0x02, "empty Client Identifier without Clean Session "
                                 "[MQTT-3.1.3-8]", now)
                    return
            # 3.1.1 [MQTT-3.1.3-6] / 5.0 [MQTT-3.1.3-6], [MQTT-3.1.3-7]: assign one.
            client_id = assigned = config.assigned_id_prefix + uuid.uuid4().hex
        elif version == 3 and len(client_id) > 23:
            self._refuse(0x02, "MQTT 3.1 Client Identifier longer than 23 characters", now)
            return
        self.auth_method = method
        if config.authenticate is None:
            principal = Principal(client_id, packet.username, self.info, authenticated=False)
            self._accept(packet, client_id, assigned, principal, None, now)
            return
        self._exchange = _Exchange(packet, client_id, assigned, packet.username)
        self._authenticate(AuthRequest(
            client_id, packet.username, packet.password, version, self.info, method,
            props.authentication_data if props is not None else None), now)

    # Authentication ------------------------------------------------------------------

    def _authenticate(self, request: AuthRequest, now: float) -> None:
        """Ask the ``authenticate`` hook about one step and act on its answer."""
        exchange = self._exchange
        assert exchange is not None
        result = self.broker.config.authenticate(request)  # type: ignore[misc]
        reauth = request.reauthenticate
        if isinstance(result, Challenge):
            if self.auth_method is None:
                raise SessionError(
                    "the authenticate hook answered a Challenge to a CONNECT without an "
                    "Authentication Method: the server must not send AUTH [MQTT-4.12.0-6]")
            exchange.step = request.step + 1
            exchange.state = result.state
            if not reauth:
                self.state = ConnectionState.AUTHENTICATING
            self._send(self.codec.Auth(  # [MQTT-4.12.0-2], [MQTT-4.12.0-5]
                reason_code=ReasonCode.CONTINUE_AUTHENTICATION, properties=Properties(
                    authentication_method=self.auth_method, authentication_data=result.data)))
        elif isinstance(result, Refuse):
            self._exchange = None
            if reauth:
                # [MQTT-4.12.1-2]: DISCONNECT with a code a DISCONNECT may carry (0x86 is
                # a CONNACK's only: 0x87 says the same), then close.
                code = result.reason_code
                if code not in REASON_CODES[PacketType.DISCONNECT]:
                    code = ReasonCode.NOT_AUTHORIZED
                self._close(now, f"re-authentication refused: {result.reason}",
                            reason_code=code)
            else:
                # [MQTT-4.12.0-4] (5.0), 3.1.1 §3.2.2.3: CONNACK with the code, close.
                code = result.reason_code if self.version == 5 else \
                    v3_return_code(result.reason_code)
                self._refuse(code, result.reason, now)
        elif isinstance(result, Accept):
            self._exchange = None
            username = result.username if result.username is not None else exchange.username
            principal = Principal(exchange.client_id, username, self.info, authenticated=True)
            if reauth:
                self.principal = principal
                if self.session is not None:
                    self.session.principal = principal
                self.broker._events.append(ClientReauthenticated(
                    self, exchange.client_id, principal))
                self._send(self.codec.Auth(reason_code=0, properties=Properties(
                    authentication_method=self.auth_method,
                    authentication_data=result.data)))  # §4.12.1: AUTH 0x00 Success
            else:
                self._accept(exchange.connect, exchange.client_id, exchange.assigned,
                             principal, result.data, now)
        else:
            raise SessionError(f"the authenticate hook must answer Accept, Refuse or "
                               f"Challenge, not {result!r}")

    def _on_auth(self, packet: Any, now: float) -> None:
        """An AUTH from the client: the next step of an exchange the server started with
        a Challenge (0x18), or a re-authentication (0x19)."""
        method = self.auth_method
        if method is None:
            raise ProtocolError("AUTH", "AUTH from a Client whose CONNECT had no "
                                "Authentication Method", rule="MQTT-4.12.0-7")
        props = packet.properties
        if props is None or props.authentication_method != method:
            raise ProtocolError("AUTH", f"Authentication Method "
                                f"{props.authentication_method if props else None!r} is not "
                                f"the CONNECT's {method!r}", rule="MQTT-4.12.0-5")
        code = packet.reason_code
        exchange = self._exchange
        if code == ReasonCode.CONTINUE_AUTHENTICATION:
            if exchange is None or exchange.step == 0:
                # [MQTT-4.12.0-3]: the Client's AUTH 0x18 answers the Server's.
                raise ProtocolError("AUTH", "AUTH 0x18 Continue authentication that "
                                    "answers no AUTH from the Server", rule="MQTT-4.12.0-3")
            reauth = self.state is ConnectionState.CONNECTED
        elif code == ReasonCode.RE_AUTHENTICATE:
            if self.state is not ConnectionState.CONNECTED:
                raise ProtocolError("AUTH", "AUTH 0x19 Re-authenticate before CONNACK",
                                    rule="§4.12.1")
            if exchange is not None:
                raise ProtocolError("AUTH", "AUTH 0x19 Re-authenticate while an "
                                    "authentication exchange is in progress", rule="§4.12.1")
            principal = self.principal
            assert principal is not None and self.client_id is not None
            exchange = self._exchange = _Exchange(None, self.client_id, None,
                                                  principal.username)
            reauth = True
        else:
            # §3.15.2.1: 0x00 Success is the Server's to send.
            raise ProtocolError("AUTH", f"AUTH 0x{code:02X} from a Client", rule="§3.15.2.1")
        username = exchange.connect.username if exchange.connect is not None else \
            exchange.username
        self._authenticate(AuthRequest(
            exchange.client_id, username, None, 5, self.info, method,
            props.authentication_data, exchange.step, reauth, exchange.state), now)

    def _accept(self, packet: Any, client_id: str, assigned: str | None,
                principal: Principal, auth_data: bytes | None, now: float) -> None:
        """CONNACK 0x00: the session attached, the connection open for traffic."""
        config = self.broker.config
        version: int = packet.protocol_version
        props = packet.properties
        self.principal = principal
        keep_alive = packet.keep_alive
        server_keep_alive = None
        if version == 5:
            expiry = (props.session_expiry_interval if props is not None else None) or 0
            if props is not None and props.receive_maximum is not None:
                self.send_window = props.receive_maximum
            else:
                self.send_window = 65535  # absent: 65,535 (§3.1.2.11.3)
            if props is not None and props.maximum_packet_size is not None:
                self.max_send_size = props.maximum_packet_size
            self._aliases_in = InboundAliases(config.topic_alias_maximum)
            if config.assign_topic_aliases and props is not None and props.topic_alias_maximum:
                self._aliases_out = OutboundAliases(props.topic_alias_maximum)
            cap = config.max_keep_alive
            if cap is not None and (keep_alive == 0 or keep_alive > cap):
                # §3.2.2.3.14: the client must use our value [MQTT-3.2.2-21].
                keep_alive = server_keep_alive = cap
        else:
            # 3.x Clean Session 0: the session lasts until a Clean Session 1 connect.
            expiry = 0 if packet.clean_start else SESSION_NEVER_EXPIRES
        if not self._will_within_limits(packet.will, now):
            return
        granted_expiry = self.broker._capped_expiry(expiry)
        expiry_changed = granted_expiry != expiry
        expiry = granted_expiry
        self.broker._timers.cancel(("conn", self))
        session, resumed = self.broker._attach(self, client_id, packet.clean_start, expiry, now)
        self.session = session
        session.principal = principal
        self.client_id = client_id
        self.will = packet.will
        self.keep_alive = keep_alive
        self.state = ConnectionState.CONNECTED
        if keep_alive:
            self.broker._timers.set(("conn", self), now + 1.5 * keep_alive)
        connack_props = None
        if version == 5:
            connack_props = Properties(
                receive_maximum=config.receive_maximum,
                maximum_packet_size=config.max_packet_size,
                # [MQTT-3.2.2-9]: absent means 2; Retain Available absent means 1.
                maximum_qos=config.maximum_qos if config.maximum_qos < 2 else None,
                retain_available=int(config.retain_available),
                # §3.2.2.3.2: the interval the server uses, when not the client's.
                session_expiry_interval=expiry if expiry_changed else None,
                wildcard_subscription_available=1,
                subscription_identifier_available=1,
                shared_subscription_available=1,
                topic_alias_maximum=config.topic_alias_maximum,
                assigned_client_identifier=assigned,
                server_keep_alive=server_keep_alive,
                # [MQTT-4.12.0-5]: the CONNECT's method, and the final data, if any.
                authentication_method=self.auth_method,
                authentication_data=auth_data,
            )
        # Session Present: [MQTT-3.2.2-2], [MQTT-3.2.2-3]; MQTT 3.1 has no such flag.
        self._send(self.codec.ConnAck(session_present=resumed and version > 3,
                                      properties=connack_props))
        self.broker._events.append(ClientConnected(self, client_id, resumed, version))
        # [MQTT-4.4.0-1]: on a resumed session, re-send unacknowledged PUBLISHes (DUP 1,
        # [MQTT-3.3.1-1]) and PUBRELs with their original identifiers, in order.
        for pid, entry in session.inflight.items():
            if entry.released:
                self._send(self.codec.PubRel(pid))
            else:
                self._send_delivery(entry.delivery, pid, now, dup=True)
        self._pump(now)

    def _will_within_limits(self, will: Any, now: float) -> bool:
        """A Will Message above Maximum QoS or retained without Retain Available refuses
        the connection: 5.0 CONNACK 0x9B [MQTT-3.2.2-12] or 0x9A [MQTT-3.2.2-13]; 3.x
        has no such return code, so the connection closes without CONNACK (3.1.1
        [MQTT-3.2.2-6])."""
        config = self.broker.config
        if will is None:
            return True
        if will.qos > config.maximum_qos:
            code, reason = ReasonCode.QOS_NOT_SUPPORTED, (
                f"Will QoS {will.qos} above the Maximum QoS {config.maximum_qos} "
                "[MQTT-3.2.2-12]")
        elif will.retain and not config.retain_available:
            code, reason = ReasonCode.RETAIN_NOT_SUPPORTED, (
                "Will Retain 1 without Retain Available [MQTT-3.2.2-13]")
        else:
            return True
        if self.version == 5:
            self._refuse(code, reason, now)
        else:
            self._close(now, f"CONNECT refused: {reason} (3.1.1 [MQTT-3.2.2-6])")
        return False

    def _refuse(self, code: int, reason: str, now: float) -> None:
        """CONNACK with ``code``, then close (3.1.1 [MQTT-3.2.2-5], 5.0 [MQTT-3.2.2-7])."""
        self._send(self.codec.ConnAck(reason_code=code))
        self.broker._events.append(ClientRefused(self, code, reason))
        self._close(now, f"CONNECT refused: {reason}")

    # Server -> client Application Messages -------------------------------------------

    def _pump(self, now: float) -> None:
        """Send queued deliveries in order while the client's Receive Maximum (or our
        3.x window) leaves room [MQTT-3.3.4-9]."""
        session = self.session
        if session is None or self.state is _CLOSED:
            return
        queue = session.queue
        while queue:
            delivery = queue[0]
            if delivery.qos and len(session.inflight) >= self.send_window:
                return
            if self._behind(now):
                return  # until the glue reports room (set_unwritten) or takes the output
            queue.popleft()
            session.queued_bytes -= _size(delivery)
            if delivery.message.expired(now):
                session.stats.expired += 1
                continue  # [MQTT-3.3.2-5]
            if delivery.qos == 0:
                self._send_delivery(delivery, None, now)
                continue
            pid = session.ids.allocate()
            if self._send_delivery(delivery, pid, now):
                session.inflight[pid] = _InFlight(delivery)
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
            sub = _Subscribed(options, identifier, broker.config.maximum_qos)
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

