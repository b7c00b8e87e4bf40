"""The broker: sessions, subscriptions, retained messages and pending wills, shared by
every connection of one server.  No sockets, no clock: the caller passes the time, and
writes out what :meth:`Broker.outgoing` returns.  Rule numbers are MQTT 5.0's unless
marked 3.1.1."""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

from .._codec.properties import Properties
from .._constants import ReasonCode
from ._codec_choice import Codec
from ._timers import Timers
from .auth import (
    ConnectionInfo,
)
from .connection import Outgoing, ServerConnection
from .errors import SessionError
from .events import (
    DeliveriesDropped,
    Event,
    MessagePublished,
    SessionExpired,
    WillPublished,
)
from .message import Message, RetainedStore
from .server_config import SESSION_NEVER_EXPIRES, BrokerConfig
from .server_session import (
    DROPPED_QUEUE_FULL,
    DROPPED_UNWRITTEN,
    Delivery,
    ServerSession,
    Subscribed,
    queued_size,
)

__all__ = ["Broker"]


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
        #: Every session's subscriptions: filter -> client identifier -> Subscribed.
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
        own: dict[str, list[Subscribed]] = {}
        groups: dict[str, list[tuple[str, Subscribed]]] = {}
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
        session.queued_bytes += queued_size(delivery)
        if conn is not None:
            conn._pump(now)
        return 1

    def _dropped(self, session: ServerSession, reason: str, total: int) -> None:
        if reason not in session._reported:
            session._reported.add(reason)
            self._events.append(DeliveriesDropped(session.client_id, reason, total))

    def _send_retained(self, session: ServerSession, sub: Subscribed, now: float) -> None:
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
