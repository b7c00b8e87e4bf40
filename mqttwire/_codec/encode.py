"""Encoding in the pure-Python twin, re-exported by ``_pure``: ``PreparedPublish`` and
``encode()``.

Twin of ``_codec/encode_c.pxi``.  Where that file writes valid packets in C, this one
has nothing of its own to write: each packet class's ``encode()`` (``_codec.packets``)
and ``PreparedPublish`` call the shared reference encoders (``publish``, ``reference``,
``forwarding``), which the Cython twin also falls back to, so both raise the same errors.
"""

from __future__ import annotations

from collections.abc import Iterable

from .docstrings import PREPARED_PUBLISH
from .forwarding import encode_forwarded, forwarding_parts
from .packets import Packet, Publish

__all__ = ["PreparedPublish", "encode"]


class PreparedPublish:
    # The docstring, shared with the Cython twin, is _codec.docstrings.PREPARED_PUBLISH.
    __doc__ = PREPARED_PUBLISH

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
