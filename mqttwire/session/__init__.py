"""A sans-I/O MQTT session layer: the protocol state of a server and of a client, with
no sockets, no event loop and no clock of its own.

The caller owns the network and the time.  It passes received bytes (or decoded packets)
with the current time as a float, writes out the bytes the session layer queues, and
calls ``tick(now)`` when ``next_deadline()`` comes.  Every call returns the events it
caused (``mqttwire.session.events``).

- ``Broker`` and ``ServerConnection`` (``mqttwire.session.server``): sessions,
  subscriptions, retained messages, wills, QoS 1/2 both ways, Receive Maximum, Topic
  Aliases, keep-alive, session and message expiry, for MQTT 3.1, 3.1.1 and 5.0 clients.
- ``ClientSession`` (``mqttwire.session.client``): CONNECT, SUBSCRIBE, PUBLISH, QoS 1/2
  in flight, resumed sessions, and deferred acknowledgement of received messages.

Each takes ``codec``: ``mqttwire._speedups`` or ``mqttwire._pure`` (None: the one
``import mqttwire`` picked).  docs/session.md describes it all.
"""

from __future__ import annotations

from .aliases import InboundAliases, OutboundAliases
from .auth import (
    Accept,
    AuthRequest,
    Challenge,
    ConnectionInfo,
    Principal,
    Refuse,
)
from .broker import Broker
from .client import ClientSession, ClientState, OutgoingMessage, ReceivedMessage
from .connection import ConnectionState, Outgoing, ServerConnection
from .errors import SessionError
from .events import (
    ClientConnected,
    ClientReauthenticated,
    ClientRefused,
    ClientSubscribed,
    ClientUnsubscribed,
    Connected,
    ConnectionClosed,
    ConnectRefused,
    DeliveriesDropped,
    Disconnected,
    Event,
    MessagePublished,
    MessageReceived,
    PublishCompleted,
    Reauthenticated,
    SessionExpired,
    SubscribeCompleted,
    UnsubscribeCompleted,
    WillPublished,
)
from .message import Message, RetainedStore
from .server_config import SESSION_NEVER_EXPIRES, BrokerConfig
from .server_session import Delivery, ServerSession, SessionStats

__all__ = [
    "Broker",
    "BrokerConfig",
    "ServerConnection",
    "ServerSession",
    "ConnectionState",
    "Delivery",
    "Outgoing",
    "SESSION_NEVER_EXPIRES",
    "ClientSession",
    "ClientState",
    "OutgoingMessage",
    "ReceivedMessage",
    "Message",
    "RetainedStore",
    "InboundAliases",
    "OutboundAliases",
    "SessionError",
    "ConnectionInfo",
    "AuthRequest",
    "Accept",
    "Refuse",
    "Challenge",
    "Principal",
    "Event",
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
    "SessionStats",
    "Connected",
    "ConnectRefused",
    "Reauthenticated",
    "MessageReceived",
    "PublishCompleted",
    "SubscribeCompleted",
    "UnsubscribeCompleted",
    "Disconnected",
]
