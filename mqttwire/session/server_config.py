"""What a broker offers and enforces (:class:`BrokerConfig`), and the types of its hooks."""

from __future__ import annotations

import math
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from .auth import (
    Authenticate,
    Principal,
)
from .message import Message

__all__ = ["SESSION_NEVER_EXPIRES", "BrokerConfig", "DeliveryRule", "DenyRule", "PublishRule",
           "SubscribeRule"]


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
