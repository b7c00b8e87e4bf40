"""The state the server keeps for one Client Identifier (:class:`ServerSession`), which may
outlive its network connection, and what it holds: deliveries, in-flight exchanges,
subscriptions, counts."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._ids import PacketIds
from .auth import (
    Principal,
)
from .message import Message

if TYPE_CHECKING:
    from .connection import ServerConnection

__all__ = ["DROPPED_QUEUE_FULL", "DROPPED_UNWRITTEN", "Delivery", "InFlight", "ServerSession",
           "SessionStats", "Subscribed", "queued_size"]


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
class InFlight:
    delivery: Delivery
    #: QoS 2: PUBREC came and our PUBREL went; PUBCOMP is awaited.
    released: bool = False


class Subscribed:
    """A stored subscription: its options and 5.0 Subscription Identifier.  ``qos`` (the
    options' maximum QoS, which TopicTree reads) is copied out once: every delivery reads
    it."""

    __slots__ = ("options", "identifier", "qos")

    def __init__(self, options: Any, identifier: int | None, maximum_qos: int = 2) -> None:
        self.options = options
        self.identifier = identifier
        self.qos: int = min(options.qos, maximum_qos)

    def __repr__(self) -> str:
        return f"Subscribed({self.options!r}, {self.identifier!r})"


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


def queued_size(delivery: Delivery) -> int:
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
        self.inflight: OrderedDict[int, InFlight] = OrderedDict()
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
