"""Errors of the session layer.

Bad input from the peer is never raised out of a session method: it becomes the
connection's outcome (MQTT 5.0: DISCONNECT with the reason code, then close; 3.x: close),
reported in an event that carries the ``mqttwire.MQTTWireError`` (``ProtocolError``,
``MalformedPacket``, ...) naming the rule.  ``SessionError`` is for the local
application's own mistakes: calling a method in a state where it makes no sense, or
asking for something the protocol or the peer does not allow.
"""

from __future__ import annotations

from .._constants import REASON_CODES, PacketType
from .._errors import MQTTWireError

__all__ = ["SessionError", "check_reason_code", "disconnect_reason"]


class SessionError(Exception):
    """The application used a session object wrongly (not the peer: see the module)."""


#: Where MQTT 5.0 lists the reason codes of the packets the application gives codes for.
_SECTIONS = {PacketType.PUBACK: "§3.4.2.1", PacketType.PUBREC: "§3.5.2.1",
             PacketType.DISCONNECT: "§3.14.2.1"}


def check_reason_code(packet: PacketType, code: int) -> None:
    """Raise :class:`SessionError` unless ``packet`` may carry reason ``code``: checked
    where the application gives it, before anything changes (the encoder would refuse
    it later, with the session half-way through)."""
    if code not in REASON_CODES[packet]:
        raise SessionError(f"reason code 0x{code:02X} is not one a {packet.name} may carry "
                           f"(MQTT 5.0 {_SECTIONS[packet]})")


def disconnect_reason(error: MQTTWireError) -> int:
    """The reason code of the MQTT 5.0 DISCONNECT that answers ``error`` [MQTT-4.13.1-1]:
    the error's own where a DISCONNECT may carry it (§3.14.2.1), else its class's (0x81
    Malformed Packet, 0x82 Protocol Error, ...), else 0x80 Unspecified error.  An error
    can carry a code that only a CONNACK may: 0x84 Unsupported Protocol Version, for a
    CONNECT whose protocol name or level is wrong, which a connected peer can send too."""
    allowed = REASON_CODES[PacketType.DISCONNECT]
    for code in (error.reason_code, type(error).default_reason_code):
        if code in allowed:
            return code
    return 0x80
