"""Application Messages as a session keeps them, and the retained-message store."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from .._codec.properties import Properties
from ._codec_choice import Codec

__all__ = ["Message", "RetainedStore"]


class Message:
    """An Application Message apart from any connection: topic, payload, QoS, RETAIN,
    MQTT 5.0 properties (without Topic Alias and Subscription Identifiers, which belong to
    one PUBLISH), and when its Message Expiry Interval runs out (``expires_at``, in the
    caller's time, or None)."""

    __slots__ = ("topic", "payload", "qos", "retain", "properties", "expires_at", "_prepared")

    def __init__(self, topic: str, payload: bytes = b"", *, qos: int = 0, retain: bool = False,
                 properties: Properties | None = None, expires_at: float | None = None) -> None:
        self.topic = topic
        self.payload = bytes(payload)
        self.qos = qos
        self.retain = retain
        self.properties = properties
        self.expires_at = expires_at
        self._prepared: Any = None

    @classmethod
    def received(cls, topic: str, payload: bytes, qos: int, retain: bool,
                 properties: Properties | None, now: float) -> Message:
        """A message received at ``now``: its Message Expiry Interval starts counting."""
        expiry = properties.message_expiry_interval if properties is not None else None
        if properties is not None and (properties.topic_alias is not None
                                       or properties.subscription_identifiers):
            properties = Properties(**{k: v for k, v in properties.items()
                                       if k not in ("topic_alias", "subscription_identifiers")})
        return cls(topic, payload, qos=qos, retain=retain, properties=properties or None,
                   expires_at=None if expiry is None else now + expiry)

    def expired(self, now: float) -> bool:
        """[MQTT-3.3.2-5]: an expired message is not delivered any more."""
        return self.expires_at is not None and now >= self.expires_at

    def remaining_expiry(self, now: float) -> int | None:
        """[MQTT-3.3.2-6]: the received Message Expiry Interval minus the time the message
        waited; None when it has none."""
        if self.expires_at is None:
            return None
        # ``expires_at - now`` is a float difference: (t + 300) - t can come out a hair
        # above 300, which ceil() made 301, more than was received.  Rounded to the
        # microsecond first, whole seconds stay whole.
        return max(1, math.ceil(round(self.expires_at - now, 6)))

    def prepared(self, codec: Codec) -> Any:
        """The message as a ``PreparedPublish`` of ``codec`` (encoded once for every
        subscriber it is forwarded to)."""
        prepared = self._prepared
        if prepared is None or type(prepared) is not codec.PreparedPublish:
            prepared = self._prepared = codec.PreparedPublish(
                codec.Publish(self.topic, self.payload, properties=self.properties))
        return prepared

    def __repr__(self) -> str:
        parts = [repr(self.topic), repr(self.payload)]
        if self.qos:
            parts.append(f"qos={self.qos}")
        if self.retain:
            parts.append("retain=True")
        if self.properties is not None:
            parts.append(f"properties={self.properties!r}")
        if self.expires_at is not None:
            parts.append(f"expires_at={self.expires_at!r}")
        return f"Message({', '.join(parts)})"


class RetainedStore:
    """The last retained message of each topic (MQTT 5.0 §3.3.1.3).

    Retained messages are not part of any session: they survive its end (3.1.1
    [MQTT-3.1.2-7]).  Expired ones are dropped when looked at.
    """

    __slots__ = ("_messages",)

    def __init__(self) -> None:
        self._messages: dict[str, Message] = {}

    def store(self, message: Message) -> None:
        """Apply a PUBLISH with RETAIN 1: it replaces the topic's retained message
        [MQTT-3.3.1-5]; an empty payload removes it [MQTT-3.3.1-6] and is not stored
        itself [MQTT-3.3.1-7] (5.0 numbers; 3.1.1 [MQTT-3.3.1-5], [MQTT-3.3.1-7],
        [MQTT-3.3.1-10], [MQTT-3.3.1-11]).  A PUBLISH with RETAIN 0 must not come here
        [MQTT-3.3.1-8]."""
        if message.payload:
            self._messages[message.topic] = message
        else:
            self._messages.pop(message.topic, None)

    def matching(self, topic_filter: str, codec: Codec, now: float) -> list[Message]:
        """The unexpired retained messages whose topic matches ``topic_filter``."""
        out = []
        for topic, message in list(self._messages.items()):
            if message.expired(now):
                del self._messages[topic]
            elif codec.topic_matches(topic_filter, topic):
                out.append(message)
        return out

    def get(self, topic: str) -> Message | None:
        return self._messages.get(topic)

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(list(self._messages.values()))

    def __repr__(self) -> str:
        return f"RetainedStore({len(self._messages)} topics)"
