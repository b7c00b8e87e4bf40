#!/usr/bin/env python3
"""A small MQTT broker whose wire layer is mqttwire: an example, not a product.

Every byte the broker reads goes through ``mqttwire.StreamDecoder`` and every byte it
writes comes from a packet's ``.encode()``, or, for an Application Message fanned out to
its subscribers, from one ``mqttwire.PreparedPublish`` that encodes the topic, properties
and payload once for all of them; what is left is the broker's own job, written
out below with the rules of the specifications it follows (MQTT 3.1.1 and 5.0, OASIS):

- protocol levels 3 (MQTT 3.1), 4 (3.1.1) and 5 (5.0), chosen per connection;
- QoS 0, 1 and 2 in both directions, with the PUBREC/PUBREL/PUBCOMP exchange, packet
  identifiers per session and the unacknowledged messages re-sent on reconnection;
- retained messages, wildcard and overlapping subscriptions, will messages (with the 5.0
  Will Delay Interval), keep-alive, clean and persistent sessions (in memory, for as long
  as the process runs, or the 5.0 Session Expiry Interval);
- MQTT 5.0: subscription options (No Local, Retain As Published, Retain Handling),
  subscription identifiers, shared subscriptions, message expiry, Receive Maximum and
  Maximum Packet Size in both directions, properties forwarded intact (and dropped for a
  3.x subscriber).

Left out on purpose (the 5.0 CONNACK says so where the protocol has a way to): topic
aliases, enhanced authentication, persistence, TLS, access control (every client is
accepted), and write back-pressure towards slow subscribers (their socket buffers grow).

Run it with ``python examples/broker.py --host 127.0.0.1 --port 1883`` (port 0 picks a
free one).  The first line it prints is ``listening on HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import math
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mqttwire as mw

log = logging.getLogger("broker")

#: Largest packet we accept; a larger one is refused with 0x95 before it is buffered.
MAX_PACKET_SIZE = 1024 * 1024
#: QoS 1 and 2 PUBLISHes a 5.0 client may have unacknowledged towards us (§3.2.2.3.3).
RECEIVE_MAXIMUM = 64
#: 3.x has no Receive Maximum; we keep our own window towards those clients this small.
V3_SEND_WINDOW = 64
#: Seconds a new connection has to send its CONNECT (MQTT 3.1.1 §3.1.4: "a reasonable
#: amount of time").
CONNECT_TIMEOUT = 10.0
#: Session Expiry Interval meaning "never" (MQTT 5.0 §3.1.2.11.2).
NEVER = 0xFFFF_FFFF
# Properties of an Application Message are forwarded unaltered (MQTT 5.0 [MQTT-3.3.2-4],
# [MQTT-3.3.2-15] to [MQTT-3.3.2-18], [MQTT-3.3.2-20]) by PreparedPublish, which leaves
# out the Topic Alias (it belongs to one connection) and takes each subscriber's
# Subscription Identifiers and remaining Message Expiry Interval per encode.


def now() -> float:
    return asyncio.get_running_loop().time()


# ---------------------------------------------------------------------------------------
# Messages and subscriptions


@dataclass
class Message:
    """An Application Message as the broker keeps it, apart from any connection."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: mw.Properties | None = None
    #: loop time at which the 5.0 Message Expiry Interval runs out, or None.
    expires_at: float | None = None

    @classmethod
    def received(cls, topic: str, payload: bytes, qos: int, retain: bool,
                 properties: mw.Properties | None) -> Message:
        expiry = properties.message_expiry_interval if properties is not None else None
        return cls(topic, payload, qos, retain, properties,
                   None if expiry is None else now() + expiry)

    def expired(self) -> bool:
        return self.expires_at is not None and now() >= self.expires_at

    @functools.cached_property
    def prepared(self) -> mw.PreparedPublish:
        """The message encoded once for every subscriber it is forwarded to."""
        return mw.PreparedPublish(mw.Publish(self.topic, self.payload, properties=self.properties))

    def remaining_expiry(self) -> int | None:
        """[MQTT-3.3.2-6]: the received Message Expiry Interval minus the time the message
        waited here; None when it has none."""
        if self.expires_at is None:
            return None
        return max(1, math.ceil(self.expires_at - now()))


@dataclass
class Subscribed:
    """One subscription of a session: its options and 5.0 Subscription Identifier."""

    options: mw.Subscription
    identifier: int | None

    @property
    def qos(self) -> int:
        """The QoS granted (TopicTree reads it to pick the highest)."""
        return self.options.qos


@dataclass
class Delivery:
    """A message on its way to one session, with what its subscriptions made of it."""

    message: Message
    qos: int
    retain: bool
    subscription_ids: list[int]


@dataclass
class InFlight:
    """A QoS 1 or 2 PUBLISH we sent and the client has not finished acknowledging."""

    delivery: Delivery
    #: QoS 2: PUBREC came and our PUBREL went out; PUBCOMP is what we wait for now.
    released: bool = False


def delivery(message: Message, subs: list[Subscribed]) -> Delivery:
    """What ``message`` becomes for a client whose subscriptions ``subs`` match it.

    One copy, at the highest QoS of the subscriptions (3.1.1 [MQTT-3.3.5-1], 5.0
    [MQTT-3.3.4-2]) min'ed with the message's own (5.0 [MQTT-3.8.4-8]), carrying every matching
    Subscription Identifier [MQTT-3.3.4-4].  RETAIN is 0 when forwarding to established
    subscriptions (3.1.1 [MQTT-3.3.1-9], 5.0 [MQTT-3.3.1-12]) unless 5.0 Retain As
    Published is set [MQTT-3.3.1-13].
    """
    qos = max(sub.qos for sub in subs)
    retain = message.retain and any(sub.options.retain_as_published for sub in subs)
    ids = [sub.identifier for sub in subs if sub.identifier is not None]
    return Delivery(message, min(qos, message.qos), retain, ids)


# ---------------------------------------------------------------------------------------
# Sessions


@dataclass(eq=False)
class Session:
    """The state the Server keeps for a Client Identifier (MQTT 5.0 §4.1), which may
    outlive the network connection."""

    client_id: str
    #: Deliveries waiting for the connection or for room in the client's Receive Maximum.
    queue: deque[Delivery] = field(default_factory=deque)
    #: Our unacknowledged QoS 1 and 2 PUBLISHes, by packet identifier.
    inflight: dict[int, InFlight] = field(default_factory=dict)
    #: Packet identifiers of the client's QoS 2 PUBLISHes we PUBREC'd, until its PUBREL.
    awaiting_pubrel: set[int] = field(default_factory=set)
    connection: Connection | None = None
    #: Seconds the session outlives its connection: 0, NEVER, or a 5.0 interval.
    expiry_interval: int = 0
    expiry_timer: asyncio.TimerHandle | None = None
    last_packet_id: int = 0

    def next_packet_id(self) -> int:
        """An identifier not used by any of our unacknowledged PUBLISHes (3.1.1
        [MQTT-2.3.1-4], 5.0 §2.2.1)."""
        pid = self.last_packet_id
        while True:
            pid = pid % 65535 + 1
            if pid not in self.inflight:
                self.last_packet_id = pid
                return pid

    def enqueue(self, delivery: Delivery) -> None:
        # A session without a connection keeps QoS 1 and 2 messages for when its client
        # comes back; QoS 0 ones it may drop (MQTT 3.1.1 §3.1.2.4, MQTT 5.0 §4.1).
        if self.connection is None and delivery.qos == 0:
            return
        self.queue.append(delivery)
        self.pump()

    def pump(self) -> None:
        """Send queued deliveries, in order, while the client's Receive Maximum (or our 3.x
        window) leaves room for more QoS 1 and 2 PUBLISHes [MQTT-3.3.4-9]."""
        conn = self.connection
        while self.queue and conn is not None and not conn.closed:
            delivery = self.queue[0]
            if delivery.qos and len(self.inflight) >= conn.send_window:
                return
            self.queue.popleft()
            # [MQTT-3.3.2-5]: an expired message is not delivered.
            if delivery.message.expired():
                continue
            if delivery.qos == 0:
                conn.send_publish(delivery, None)
                continue
            pid = self.next_packet_id()
            self.inflight[pid] = InFlight(delivery)
            if not conn.send_publish(delivery, pid):
                # Too large for the client: [MQTT-3.1.2-25] says to behave as though the
                # message had been delivered.
                del self.inflight[pid]


# ---------------------------------------------------------------------------------------
# The broker


class Broker:
    """Sessions, subscriptions and retained messages, shared by all connections.

    Everything runs on one event loop, so no locks are needed.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        #: Every session's subscriptions: filter -> Client Identifier -> Subscribed.
        self.subscriptions = mw.TopicTree()
        #: Round-robin position of each shared subscription group.
        self.share_turns: dict[str, int] = {}
        self.retained: dict[str, Message] = {}
        #: Will messages waiting for their 5.0 Will Delay Interval, by Client Identifier.
        self.delayed_wills: dict[str, tuple[asyncio.TimerHandle, Message]] = {}

    async def accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Connection(self, reader, writer).serve()

    # Publishing ------------------------------------------------------------------------

    def publish(self, message: Message, sender: Session | None) -> None:
        """Store a retained message and deliver to every matching session."""
        if message.retain:
            self.retain(message)
        own: dict[str, list[Subscribed]] = {}
        groups: dict[str, list[tuple[str, Subscribed]]] = {}
        for topic_filter, client_id, sub in self.subscriptions.match_all(message.topic):
            if topic_filter.startswith("$share/"):
                groups.setdefault(topic_filter, []).append((client_id, sub))
            # [MQTT-3.8.3-3]: No Local keeps a client's own messages from it.
            elif not (sub.options.no_local and sender is not None
                      and client_id == sender.client_id):
                own.setdefault(client_id, []).append(sub)
        for client_id, subs in own.items():
            self.sessions[client_id].enqueue(delivery(message, subs))
        for topic_filter, members in groups.items():
            # MQTT 5.0 §4.8.2: a shared subscription group gets each message once, here
            # round robin over its connected members (over all when none is connected).
            online = [m for m in members if self.sessions[m[0]].connection is not None]
            turn = self.share_turns.get(topic_filter, 0)
            self.share_turns[topic_filter] = turn + 1
            client_id, sub = (online or members)[turn % len(online or members)]
            self.sessions[client_id].enqueue(delivery(message, [sub]))

    def retain(self, message: Message) -> None:
        """Keep the last retained message of each topic.

        3.1.1 [MQTT-3.3.1-5]/[MQTT-3.3.1-7] (5.0 [MQTT-3.3.1-5]): a retained message
        replaces the one stored for its topic, whatever its QoS.  [MQTT-3.3.1-10]/
        [MQTT-3.3.1-11] (5.0 [MQTT-3.3.1-6]/[MQTT-3.3.1-7]): an empty one clears it and is
        never stored itself.  A message with RETAIN 0 never gets here [MQTT-3.3.1-12].
        """
        if message.payload:
            self.retained[message.topic] = message
        else:
            self.retained.pop(message.topic, None)

    def send_retained(self, session: Session, sub: Subscribed) -> None:
        """Send the retained messages matching a new subscription [MQTT-3.3.1-6], with
        RETAIN 1 [MQTT-3.3.1-8] (3.1.1 numbers)."""
        for topic, message in list(self.retained.items()):
            if message.expired():
                del self.retained[topic]
            elif mw.topic_matches(sub.options.topic_filter, topic):
                ids = [] if sub.identifier is None else [sub.identifier]
                session.enqueue(Delivery(message, min(sub.qos, message.qos), True, ids))

    # Sessions --------------------------------------------------------------------------

    def attach(self, conn: Connection, client_id: str, clean_start: bool,
               expiry_interval: int) -> tuple[Session, bool]:
        """Give ``conn`` its session: (session, whether it was resumed)."""
        old = self.sessions.get(client_id)
        if old is not None and old.connection is not None:
            # 3.1.1 [MQTT-3.1.4-2] / 5.0 [MQTT-3.1.4-3]: a second connection with the same
            # Client Identifier takes over; the first one is closed.
            old.connection.take_over()
        # [MQTT-3.1.3-9] (5.0): a new connection before the Will Delay Interval ran out
        # cancels the will.
        pending = self.delayed_wills.pop(client_id, None)
        if pending is not None:
            pending[0].cancel()
        session = self.sessions.get(client_id)
        if session is not None and clean_start:
            # 3.1.1 [MQTT-3.1.2-6] / 5.0 [MQTT-3.1.2-4]: Clean Start discards the old session.
            self.end_session(session)
            session = None
        resumed = session is not None
        if session is None:
            session = self.sessions[client_id] = Session(client_id)
        elif session.expiry_timer is not None:
            session.expiry_timer.cancel()
            session.expiry_timer = None
        session.connection = conn
        session.expiry_interval = expiry_interval
        return session, resumed

    def detach(self, session: Session, will: Message | None, will_delay: int) -> None:
        """The session's connection closed; ``will`` is the will to publish, if any."""
        session.connection = None
        if will is not None:
            if will_delay:
                timer = asyncio.get_running_loop().call_later(
                    will_delay, self.publish_delayed_will, session.client_id
                )
                self.delayed_wills[session.client_id] = (timer, will)
            else:
                self.publish(will, None)
        if session.expiry_interval == 0:
            self.end_session(session)
        elif session.expiry_interval != NEVER:
            session.expiry_timer = asyncio.get_running_loop().call_later(
                session.expiry_interval, self.end_session, session
            )

    def end_session(self, session: Session) -> None:
        """Discard a session (MQTT 5.0 [MQTT-4.1.0-2])."""
        if self.sessions.get(session.client_id) is session:
            del self.sessions[session.client_id]
            self.subscriptions.remove_key(session.client_id)
        if session.expiry_timer is not None:
            session.expiry_timer.cancel()
        # MQTT 5.0 §3.1.3.2.2: a delayed will is published when its session ends, if
        # that comes first.
        if session.client_id in self.delayed_wills:
            self.publish_delayed_will(session.client_id)

    def publish_delayed_will(self, client_id: str) -> None:
        timer, will = self.delayed_wills.pop(client_id)
        timer.cancel()
        self.publish(will, None)


# ---------------------------------------------------------------------------------------
# Connections


class Connection:
    """One client's network connection: bytes in through the decoder, packets out."""

    def __init__(self, broker: Broker, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.broker = broker
        self.reader = reader
        self.writer = writer
        host, port = writer.get_extra_info("peername")[:2]
        self.name = f"{host}:{port}"
        # version=None: the decoder learns the protocol level from CONNECT.
        self.decoder = mw.StreamDecoder(max_packet_size=MAX_PACKET_SIZE)
        self.version = 4
        self.session: Session | None = None
        self.will: mw.Will | None = None
        self.keep_alive = 0
        self.last_packet = now()
        self.closed = False
        #: Encoded packets waiting for flush().
        self.output: list[bytes] = []
        #: How many QoS 1/2 PUBLISHes we may have unacknowledged towards this client.
        self.send_window = V3_SEND_WINDOW
        #: The client's 5.0 Maximum Packet Size: larger packets are not sent to it.
        self.max_send_size: float = math.inf
        self.watchdog = asyncio.get_running_loop().call_later(CONNECT_TIMEOUT, self.check_alive)
        self.handlers: dict[type, Callable[[Any], None]] = {
            mw.Connect: self.on_connect,
            mw.Publish: self.on_publish,
            mw.PubAck: self.on_puback,
            mw.PubRec: self.on_pubrec,
            mw.PubRel: self.on_pubrel,
            mw.PubComp: self.on_pubcomp,
            mw.Subscribe: self.on_subscribe,
            mw.Unsubscribe: self.on_unsubscribe,
            mw.PingReq: self.on_pingreq,
            mw.Disconnect: self.on_disconnect,
        }

    async def serve(self) -> None:
        try:
            while not self.closed:
                data = await self.reader.read(65536)
                if not data:
                    break  # closed by the client, or by close() from elsewhere
                self.receive(data)
                await self.writer.drain()
        except ConnectionError:
            pass
        finally:
            # Without a DISCONNECT first this is an abrupt close: the will goes out.
            self.close()

    def receive(self, data: bytes) -> None:
        try:
            packets = self.decoder.feed(data)
            error = None
        except mw.MQTTWireError as exc:
            # The packets completed before the bad bytes are still handled, in order.
            packets, error = exc.packets, exc
        if packets:
            self.last_packet = now()
        try:
            for packet in packets:
                if self.closed:
                    return
                self.handle(packet)
        except mw.MQTTWireError as exc:
            error = exc
        if error is not None and not self.closed:
            self.refuse(error)

    def handle(self, packet: Any) -> None:
        # The decoder already refuses a first packet other than CONNECT [MQTT-3.1.0-1] and
        # a second CONNECT [MQTT-3.1.0-2]; which end may send what is ours to check.
        handler = self.handlers.get(type(packet))
        if handler is None:
            # CONNACK, SUBACK, UNSUBACK and PINGRESP only go from Server to Client
            # (MQTT 5.0 §2.1.2, Table 2-1); AUTH needs the enhanced authentication this
            # broker does not offer (MQTT 5.0 [MQTT-4.12.0-7]).
            raise mw.ProtocolError(
                type(packet).__name__.upper(), "not a packet a Client sends to this Server",
                rule="§2.1.2",
            )
        handler(packet)

    def refuse(self, error: mw.MQTTWireError) -> None:
        """Bad input: MQTT 5.0 §4.13 sends DISCONNECT with the error's reason code first
        (only after a successful CONNACK [MQTT-3.14.0-1]); 3.x just closes (3.1.1 §4.8)."""
        log.warning("%s: %s", self.name, error)
        if self.session is None and error.rule == "MQTT-3.1.2-2":
            # 3.1.1 [MQTT-3.1.2-2]: an unsupported protocol level gets CONNACK return
            # code 0x01 before the connection closes.
            self.output.append(mw.ConnAck(reason_code=1).encode(version=4))
        elif self.session is not None and self.version == 5:
            self.send(mw.Disconnect(reason_code=error.reason_code))
        self.close()

    def send(self, packet: Any) -> bool:
        """Encode and write ``packet``; False when it was not sent."""
        if self.closed:
            return False
        return self.write(packet.encode(version=self.version))

    def write(self, data: bytes) -> bool:
        """Queue an encoded packet for the socket; False when it was not sent."""
        if self.closed:
            return False
        if len(data) > self.max_send_size:
            # MQTT 5.0 [MQTT-3.1.2-24]: never send a client more than its Maximum
            # Packet Size.
            log.info("%s: %d-byte packet over the client's maximum, dropped", self.name, len(data))
            return False
        # Packets for one connection are gathered and written once per turn of the
        # event loop: a PUBLISH fanned out to many subscribers costs each of them one
        # socket write per batch instead of one per packet.
        if not self.output:
            asyncio.get_running_loop().call_soon(self.flush)
        self.output.append(data)
        return True

    def flush(self) -> None:
        if self.output and not self.closed:
            self.writer.write(b"".join(self.output))
        self.output.clear()

    def send_publish(self, delivery: Delivery, packet_id: int | None, dup: bool = False) -> bool:
        message = delivery.message
        # One PreparedPublish per message: only this subscriber's header fields, its
        # Subscription Identifiers [MQTT-3.3.4-4] and the remaining expiry are new here;
        # a 3.x subscriber gets no properties at all.
        return self.write(message.prepared.encode(
            self.version, qos=delivery.qos, packet_id=packet_id, retain=delivery.retain,
            dup=dup, subscription_identifiers=delivery.subscription_ids,
            message_expiry_interval=message.remaining_expiry(),
        ))

    def close(self) -> None:
        """Close the connection; without a DISCONNECT 0x00 before, publish the will."""
        if self.closed:
            return
        self.flush()  # a last DISCONNECT or CONNACK still goes out
        self.closed = True
        self.watchdog.cancel()
        self.writer.close()
        session = self.session
        if session is None or session.connection is not self:
            return
        will, delay = None, 0
        if self.will is not None:
            w = self.will
            properties = w.properties
            if properties is not None and properties.will_delay_interval is not None:
                # The Will Delay Interval is for us (MQTT 5.0 §3.1.3.2.2); the other Will
                # Properties are those of the Application Message we publish.
                delay = properties.will_delay_interval
                properties = mw.Properties(**{k: v for k, v in properties.items()
                                              if k != "will_delay_interval"})
            will = Message.received(w.topic, w.payload, w.qos, w.retain, properties)
        log.info("%s: %s disconnected%s", self.name, session.client_id,
                 ", publishing its will" if will else "")
        self.broker.detach(session, will, delay)

    def take_over(self) -> None:
        if self.version == 5:
            self.send(mw.Disconnect(reason_code=mw.ReasonCode.SESSION_TAKEN_OVER))
        self.close()

    def check_alive(self) -> None:
        """3.1.1 [MQTT-3.1.2-24] / 5.0 [MQTT-3.1.2-22]: with no packet for one and a half
        times the Keep Alive, close the connection as if the network had failed."""
        if self.session is None:
            log.info("%s: no CONNECT in %ss, closing", self.name, CONNECT_TIMEOUT)
            self.close()
            return
        deadline = self.last_packet + 1.5 * self.keep_alive
        if now() < deadline:
            self.watchdog = asyncio.get_running_loop().call_at(deadline, self.check_alive)
            return
        log.info("%s: keep-alive timeout", self.name)
        if self.version == 5:
            self.send(mw.Disconnect(reason_code=mw.ReasonCode.KEEP_ALIVE_TIMEOUT))
        self.close()

    # Packet handlers -------------------------------------------------------------------

    @property
    def connected_session(self) -> Session:
        """The session, for the handlers of the packets that follow CONNECT (the decoder
        lets no other packet come first)."""
        assert self.session is not None
        return self.session

    def on_connect(self, packet: Any) -> None:
        self.version = version = packet.protocol_version
        props = packet.properties
        client_id = packet.client_id
        assigned = None
        if props is not None and props.authentication_method is not None:
            # MQTT 5.0 [MQTT-4.12.0-1]: enhanced authentication is not offered.
            self.connack_refused(mw.ReasonCode.BAD_AUTHENTICATION_METHOD)
            return
        if not client_id:
            if version == 3 or not packet.clean_start:
                # MQTT 3.1 §3.1 needs 1 to 23 characters; 3.1.1 [MQTT-3.1.3-8] refuses
                # an empty one without Clean Session.
                self.connack_refused(0x02)
                return
            # 3.1.1 [MQTT-3.1.3-6] / 5.0 [MQTT-3.2.2-16]: the Server assigns a unique one.
            client_id = assigned = "auto-" + uuid.uuid4().hex
        elif version == 3 and len(client_id) > 23:
            self.connack_refused(0x02)  # MQTT 3.1 §3.1: "Identifier Rejected"
            return
        if version == 5:
            expiry = (props.session_expiry_interval if props else None) or 0
            if props is not None and props.receive_maximum is not None:
                self.send_window = props.receive_maximum
            else:
                self.send_window = 65535  # absent means 65,535 (§3.1.2.11.3)
            if props is not None and props.maximum_packet_size is not None:
                self.max_send_size = props.maximum_packet_size
        else:
            # 3.x Clean Session 0: the session lasts until a Clean Session 1 connect.
            expiry = 0 if packet.clean_start else NEVER
        session, resumed = self.broker.attach(self, client_id, packet.clean_start, expiry)
        self.session = session
        self.will = packet.will
        self.keep_alive = packet.keep_alive
        self.watchdog.cancel()
        if self.keep_alive:
            self.watchdog = asyncio.get_running_loop().call_later(
                1.5 * self.keep_alive, self.check_alive
            )
        log.info("%s: %s connected at level %d%s", self.name, client_id, version,
                 " (session resumed)" if resumed else "")
        self.send(mw.ConnAck(
            # MQTT 3.1 has no Session Present flag.
            session_present=resumed and version > 3,
            properties=self.connack_properties(assigned) if version == 5 else None,
        ))
        # 3.1.1 [MQTT-4.4.0-1] / 5.0 [MQTT-4.4.0-1]: on reconnection, re-send
        # unacknowledged PUBLISHes (DUP 1, [MQTT-3.3.1-1]) and PUBRELs, with their
        # original packet identifiers.
        for pid, entry in session.inflight.items():
            if entry.released:
                self.send(mw.PubRel(pid))
            else:
                self.send_publish(entry.delivery, pid, dup=True)
        session.pump()

    def connack_properties(self, assigned: str | None) -> mw.Properties:
        """What this Server supports (MQTT 5.0 §3.2.2.3).  Maximum QoS is absent: 2."""
        return mw.Properties(
            receive_maximum=RECEIVE_MAXIMUM,
            maximum_packet_size=MAX_PACKET_SIZE,
            retain_available=1,
            wildcard_subscription_available=1,
            subscription_identifier_available=1,
            shared_subscription_available=1,
            topic_alias_maximum=0,
            assigned_client_identifier=assigned,
        )

    def connack_refused(self, code: int) -> None:
        """Refuse the CONNECT with ``code`` (a 3.x return code or a 5.0 reason code, as
        the client's level needs), then close (3.1.1 [MQTT-3.2.2-5], 5.0 [MQTT-3.2.2-7])."""
        log.info("%s: CONNECT refused with 0x%02X", self.name, code)
        self.send(mw.ConnAck(reason_code=code))
        self.close()

    def on_publish(self, packet: Any) -> None:
        session = self.connected_session
        props = packet.properties
        if props is not None:
            if props.topic_alias is not None:
                # MQTT 5.0 [MQTT-3.2.2-18]: our Topic Alias Maximum is 0, so no aliases.
                raise mw.ProtocolError(
                    "PUBLISH", "Topic Alias sent, but this Server's Topic Alias Maximum is 0",
                    rule="MQTT-3.2.2-18", reason_code=mw.ReasonCode.TOPIC_ALIAS_INVALID,
                )
            if props.subscription_identifiers:
                raise mw.ProtocolError(
                    "PUBLISH", "Subscription Identifier sent by a Client", rule="MQTT-3.3.4-6"
                )
        pid = packet.packet_id
        if packet.qos == 2:
            if pid in session.awaiting_pubrel:
                # A re-sent QoS 2 PUBLISH is acknowledged again but not delivered twice
                # (3.1.1 [MQTT-4.3.3-2], 5.0 [MQTT-4.3.3-10]).
                self.send(mw.PubRec(pid))
                return
            if self.version == 5 and len(session.awaiting_pubrel) >= RECEIVE_MAXIMUM:
                # MQTT 5.0 §3.3.4: over our Receive Maximum, DISCONNECT 0x93.
                raise mw.ProtocolError(
                    "PUBLISH",
                    f"more than Receive Maximum ({RECEIVE_MAXIMUM}) unacknowledged QoS 2 PUBLISHes",
                    rule="MQTT-3.3.4-7", reason_code=mw.ReasonCode.RECEIVE_MAXIMUM_EXCEEDED,
                )
        message = Message.received(packet.topic, packet.payload, packet.qos, packet.retain, props)
        self.broker.publish(message, session)
        if packet.qos == 1:
            self.send(mw.PubAck(pid))
        elif packet.qos == 2:
            session.awaiting_pubrel.add(pid)
            self.send(mw.PubRec(pid))

    def on_puback(self, packet: Any) -> None:
        session = self.connected_session
        entry = session.inflight.get(packet.packet_id)
        if entry is not None and entry.delivery.qos == 1:
            del session.inflight[packet.packet_id]
            session.pump()

    def on_pubrec(self, packet: Any) -> None:
        session = self.connected_session
        pid = packet.packet_id
        entry = session.inflight.get(pid)
        if entry is None or entry.delivery.qos != 2:
            # MQTT 5.0 §4.3.3: answer with PUBREL 0x92 Packet Identifier not found.
            self.send(mw.PubRel(pid, reason_code=0x92 if self.version == 5 else 0))
            return
        if packet.reason_code >= 0x80:
            # MQTT 5.0 §4.3.3: a failure PUBREC ends the exchange.
            del session.inflight[pid]
            session.pump()
            return
        entry.released = True
        self.send(mw.PubRel(pid))

    def on_pubrel(self, packet: Any) -> None:
        session = self.connected_session
        pid = packet.packet_id
        if pid in session.awaiting_pubrel:
            session.awaiting_pubrel.discard(pid)
            self.send(mw.PubComp(pid))
        else:
            self.send(mw.PubComp(pid, reason_code=0x92 if self.version == 5 else 0))

    def on_pubcomp(self, packet: Any) -> None:
        session = self.connected_session
        entry = session.inflight.get(packet.packet_id)
        if entry is not None and entry.released:
            del session.inflight[packet.packet_id]
            session.pump()

    def on_subscribe(self, packet: Any) -> None:
        session = self.connected_session
        props = packet.properties
        identifier = None
        if props is not None and props.subscription_identifiers:
            identifier = props.subscription_identifiers[0]
        codes = []
        retained_for = []
        for options in packet.subscriptions:
            topic_filter = options.topic_filter
            sub = Subscribed(options, identifier)
            try:
                # The decoder leaves the placement of wildcards to us (§4.7.1).
                mw.validate_topic_filter(topic_filter, version=self.version)
                # [MQTT-3.8.4-3]: a subscription with the same filter is replaced.
                new = self.broker.subscriptions.insert(topic_filter, session.client_id, sub)
            except mw.MQTTWireError as exc:
                codes.append(self.filter_refused(exc))
                continue
            # Every QoS 0-2 is granted as asked [MQTT-3.8.4-7] (5.0 numbers).
            codes.append(options.qos)
            # Retained messages go to a new non-shared subscription (5.0 §3.3.1.3) as
            # 5.0 Retain Handling says [MQTT-3.3.1-9..11]: 0 always, 1 only if it did not
            # exist, 2 never; 3.x behaves as 0 (3.1.1 [MQTT-3.8.4-3]).
            handling = options.retain_handling
            if not topic_filter.startswith("$share/") and (handling == 0 or handling == 1 and new):
                retained_for.append(sub)
        self.send(mw.SubAck(packet.packet_id, codes))
        for sub in retained_for:
            self.broker.send_retained(session, sub)

    def filter_refused(self, error: mw.MQTTWireError) -> int:
        """The SUBACK code for a topic filter we refuse."""
        if self.version == 3:
            # MQTT 3.1's SUBACK has no failure code: the connection is closed.
            raise error
        log.info("%s: %s", self.name, error)
        return 0x8F if self.version == 5 else 0x80  # Topic Filter invalid / Failure

    def on_unsubscribe(self, packet: Any) -> None:
        session = self.connected_session
        # [MQTT-3.10.4-1]: filters are compared character by character; 5.0 answers
        # 0x11 No subscription existed for those that match none.
        codes = [
            0x00 if self.broker.subscriptions.remove(f, session.client_id) else 0x11
            for f in packet.topic_filters
        ]
        self.send(mw.UnsubAck(packet.packet_id, codes if self.version == 5 else ()))

    def on_pingreq(self, packet: Any) -> None:
        self.send(mw.PingResp())  # [MQTT-3.12.4-1]

    def on_disconnect(self, packet: Any) -> None:
        session = self.connected_session
        props = packet.properties
        if props is not None and props.session_expiry_interval is not None:
            if session.expiry_interval == 0 and props.session_expiry_interval != 0:
                raise mw.ProtocolError(
                    "DISCONNECT", "Session Expiry Interval set after CONNECT set it to 0",
                    rule="§3.14.2.2.2",
                )
            session.expiry_interval = props.session_expiry_interval
        # 3.1.1 [MQTT-3.14.4-3] / 5.0 [MQTT-3.14.4-3]: a normal DISCONNECT discards the
        # will; 5.0 0x04 Disconnect with Will Message (or any error code) keeps it.
        if packet.reason_code == 0:
            self.will = None
        self.close()


# ---------------------------------------------------------------------------------------


async def serve(host: str, port: int) -> None:
    broker = Broker()
    server = await asyncio.start_server(broker.accept, host, port)
    address = server.sockets[0].getsockname()
    # The first line tells whoever started us where we listen (port 0 picks a free one).
    print(f"listening on {address[0]}:{address[1]}", flush=True)
    print(f"mqttwire implementation: {mw.IMPLEMENTATION}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883, help="0 picks a free port")
    parser.add_argument("-v", "--verbose", action="store_true", help="log connections")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    try:
        asyncio.run(serve(args.host, args.port))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
