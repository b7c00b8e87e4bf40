"""Encoding in the pure-Python twin, re-exported by ``_pure``: ``PreparedPublish`` and
``encode()``.

Twin of ``_speedups_encode.pxi``.  Where that file writes valid packets in C, this one
has nothing of its own to write: each packet class's ``encode()`` (``_pure_packets``)
and ``PreparedPublish`` call the shared reference encoders (``_publish``, ``_cold``,
``_forwarding``), which the Cython twin also falls back to, so both raise the same errors.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._forwarding import encode_forwarded, forwarding_parts
from ._pure_packets import Packet, Publish

__all__ = ["PreparedPublish", "encode"]


class PreparedPublish:
    """A PUBLISH prepared for forwarding to many subscribers.

    A broker sends one incoming message to every matching subscriber, each with its own
    QoS (the lower of the message's and the subscription's), packet identifier, RETAIN flag
    (0 to established subscriptions [MQTT-3.3.1-9], 1 for retained messages sent because a
    subscription was just made [MQTT-3.3.1-8], as published under v5 Retain As Published),
    DUP flag (decided afresh [MQTT-3.3.1-3]) and, in MQTT 5.0, subscription identifiers.
    ``PreparedPublish(publish)`` validates and encodes the topic, the properties and the
    payload once; ``encode()`` then writes each subscriber's packet, copying those bytes
    once and re-validating nothing.

    Forwarded properties are the message's own minus the Topic Alias (an alias belongs to
    one connection, MQTT 5.0 §3.3.2.3.4) and minus any subscription identifiers (the
    subscriber's own are added by ``encode()``).  A level 3/4 subscriber gets no
    properties; a v5 subscriber of a level 3/4 message gets an empty property block.  The
    topic must be the real topic: resolve an incoming alias first.
    """

    __slots__ = ("publish", "_topic", "_expiry", "_props", "_payload")

    def __init__(self, publish: Publish) -> None:
        self.publish = publish
        self._topic, self._expiry, self._props, self._payload = forwarding_parts(publish)

    def encode(
        self,
        version: int = 5,
        *,
        qos: int = 0,
        packet_id: int | None = None,
        retain: bool = False,
        dup: bool = False,
        subscription_identifiers: Iterable[int] = (),
        message_expiry_interval: int | None = None,
    ) -> bytes:
        """The PUBLISH for one subscriber at protocol level ``version``.

        ``message_expiry_interval``, when given, replaces the message's (the server sends
        the received value minus the time the message waited [MQTT-3.3.2-6])."""
        return encode_forwarded(
            self._topic, self._expiry, self._props, self._payload, version, qos, packet_id,
            retain, dup, subscription_identifiers, message_expiry_interval)

    def __repr__(self) -> str:
        return f"PreparedPublish({self.publish!r})"


def encode(packet: Packet, version: int = 5) -> bytes:
    """Encode ``packet`` for protocol level ``version`` (a CONNECT uses its own level)."""
    return packet.encode(version)
