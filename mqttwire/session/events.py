"""What the session layer tells the application.

Every method that takes input (received bytes, a packet, the time, an application
request) returns the events it caused, in order.  Events are plain frozen dataclasses;
match on their type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import MQTTWireError
from .message import Message

if TYPE_CHECKING:
    from .client import OutgoingMessage, ReceivedMessage
    from .connection import ServerConnection

__all__ = [
    "Event",
    # server side
    "ClientConnected",
    "ClientRefused",
    "ClientReauthenticated",
    "MessagePublished",
    "ClientSubscribed",
    "ClientUnsubscribed",
    "ConnectionClosed",
    "WillPublished",
    "SessionExpired",
    "DeliveriesDropped",
    # client side
    "Connected",
    "ConnectRefused",
    "Reauthenticated",
    "MessageReceived",
    "PublishCompleted",
    "SubscribeCompleted",
    "UnsubscribeCompleted",
    "Disconnected",
]


class Event:
    """Base class of every event."""

    __slots__ = ()


# ---------------------------------------------------------------------------------------
# Server side (mqttwire.session.server)


@dataclass(frozen=True, eq=False)
class ClientConnected(Event):
    """A CONNECT was accepted (CONNACK 0x00 queued)."""

    connection: ServerConnection
    client_id: str
    session_present: bool
    version: int


@dataclass(frozen=True, eq=False)
class ClientRefused(Event):
    """A CONNECT was refused with a CONNACK carrying ``reason_code`` (a 3.x return code
    or a 5.0 reason code); the connection is closed."""

    connection: ServerConnection
    reason_code: int
    reason: str


@dataclass(frozen=True, eq=False)
class ClientReauthenticated(Event):
    """A 5.0 re-authentication (§4.12.1) succeeded: AUTH 0x00 Success queued.
    ``principal`` is who the client now is (``mqttwire.session.auth.Principal``); a
    refused one closes the connection (``ConnectionClosed``)."""

    connection: ServerConnection
    client_id: str
    principal: Any


@dataclass(frozen=True, eq=False)
class MessagePublished(Event):
    """The broker took ownership of an Application Message (from a client's PUBLISH, or
    ``Broker.publish``) and routed it; ``client_id`` is None for the application's own."""

    client_id: str | None
    message: Message
    #: How many sessions it was queued for.
    deliveries: int


@dataclass(frozen=True, eq=False)
class ClientSubscribed(Event):
    """A SUBSCRIBE was answered; ``reason_codes`` are the SUBACK's, one per subscription."""

    connection: ServerConnection
    client_id: str
    subscriptions: list[Any]
    reason_codes: list[int]


@dataclass(frozen=True, eq=False)
class ClientUnsubscribed(Event):
    """An UNSUBSCRIBE was answered (``reason_codes``: 5.0 only, else empty)."""

    connection: ServerConnection
    client_id: str
    topic_filters: list[str]
    reason_codes: list[int]


@dataclass(frozen=True, eq=False)
class ConnectionClosed(Event):
    """The connection is over: write what ``data_to_send()`` still holds, then close the
    socket (``closed`` is True from now on), after lingering ``linger`` seconds at most
    when that is not 0 (``Outgoing.linger`` says how).

    ``reason_code`` is the 5.0 DISCONNECT reason code the server sent (None when none was
    sent: 3.x, before CONNACK, or a network loss), ``error`` the peer's protocol
    violation when there was one, ``by_client`` whether the client ended it (DISCONNECT
    or the network); ``linger`` is 0.0 then, else ``BrokerConfig.linger_timeout``."""

    connection: ServerConnection
    client_id: str | None
    reason: str
    reason_code: int | None = None
    error: MQTTWireError | None = None
    by_client: bool = False
    linger: float = 0.0


@dataclass(frozen=True, eq=False)
class WillPublished(Event):
    """A client's Will Message was published (MQTT 5.0 §3.1.2.5)."""

    client_id: str
    message: Message


@dataclass(frozen=True, eq=False)
class SessionExpired(Event):
    """A session ended without a connection: its Session Expiry Interval ran out
    (MQTT 5.0 §3.1.2.11.2), or its connection closed with an interval of 0."""

    client_id: str


@dataclass(frozen=True, eq=False)
class DeliveriesDropped(Event):
    """The session's bounds (``BrokerConfig``, docs/session.md "Bounds") made the server
    drop a message for ``client_id``.  Reported once per episode: at the first drop
    since the bound was last clear, not for every message; ``ServerSession.stats``
    counts them all.

    ``reason``: ``"unwritten"`` (a QoS 0 message, the connection's unwritten output at
    ``max_unwritten_bytes``/``max_unwritten_messages``) or ``"queue full"`` (the session's
    queue at ``max_queued_messages``/``max_queued_bytes``: the new message is dropped);
    ``total``: the session's count for that reason so far."""

    client_id: str
    reason: str
    total: int


# ---------------------------------------------------------------------------------------
# Client side (mqttwire.session.client)


@dataclass(frozen=True, eq=False)
class Connected(Event):
    """CONNACK 0x00 arrived.  ``discarded``: our unfinished QoS 1/2 PUBLISHes that the
    session lost, because the server had no session for us (Session Present 0) while we
    had session state; they were not sent and will not be."""

    connack: Any
    session_present: bool
    client_id: str
    discarded: list[OutgoingMessage] = field(default_factory=list)


@dataclass(frozen=True, eq=False)
class ConnectRefused(Event):
    """CONNACK with a non-zero code: the server refused the connection (and closes it)."""

    connack: Any
    reason_code: int


@dataclass(frozen=True, eq=False)
class Reauthenticated(Event):
    """The server answered our re-authentication (``ClientSession.reauthenticate``) with
    AUTH 0x00 Success, and the authenticator accepted its final data."""

    data: bytes | None


@dataclass(frozen=True, eq=False)
class MessageReceived(Event):
    """An Application Message arrived.  With manual acknowledgement, a QoS 1 or 2 message
    must be passed to ``ClientSession.ack`` once the application has taken ownership."""

    message: ReceivedMessage


@dataclass(frozen=True, eq=False)
class PublishCompleted(Event):
    """One of our QoS 1/2 PUBLISHes is finished: PUBACK, PUBCOMP, or a PUBREC with a
    failure code; ``reason_code`` is that packet's (always 0 before 5.0).  A PUBLISH the
    session dropped without sending has the code that says why: 0x95 (larger than the
    server's Maximum Packet Size), 0x9B (above its Maximum QoS), 0x9A (RETAIN, which it
    does not support)."""

    message: OutgoingMessage
    reason_code: int


@dataclass(frozen=True, eq=False)
class SubscribeCompleted(Event):
    """SUBACK for the SUBSCRIBE with ``packet_id``."""

    packet_id: int
    reason_codes: list[int]


@dataclass(frozen=True, eq=False)
class UnsubscribeCompleted(Event):
    """UNSUBACK for the UNSUBSCRIBE with ``packet_id`` (reason codes: 5.0 only)."""

    packet_id: int
    reason_codes: list[int]


@dataclass(frozen=True, eq=False)
class Disconnected(Event):
    """The network connection is over: write what ``data_to_send()`` still holds, then
    close the socket.  The session state stays in the ``ClientSession`` for the next
    ``connect()``.

    ``by_server``: the server sent DISCONNECT (``reason_code`` is its), else
    ``reason_code`` is what we sent (None if nothing was sent: 3.x, or a network loss).
    ``error``: the server's protocol violation, when that was the cause.

    ``linger``: 0.0 to close at once (the server ended it: its DISCONNECT, a refusing
    CONNACK, or the network), else the seconds at most to linger: we are closing while
    the server may still be sending, so shut the socket's write side (asyncio:
    ``transport.write_eof()``), read and discard until the server closes or ``linger``
    seconds pass, then close.  A socket closed with unread input makes the TCP stack
    send a reset, which can lose the DISCONNECT written last (and with it, the will's
    suppression)."""

    reason: str
    reason_code: int | None = None
    by_server: bool = False
    error: MQTTWireError | None = None
    linger: float = 0.0
