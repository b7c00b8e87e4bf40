"""Errors of the session layer.

Bad input from the peer is never raised out of a session method: it becomes the
connection's outcome (MQTT 5.0: DISCONNECT with the reason code, then close; 3.x: close),
reported in an event that carries the ``mqttwire.MQTTWireError`` (``ProtocolError``,
``MalformedPacket``, ...) naming the rule.  ``SessionError`` is for the local
application's own mistakes: calling a method in a state where it makes no sense, or
asking for something the protocol or the peer does not allow.
"""

from __future__ import annotations

__all__ = ["SessionError"]


class SessionError(Exception):
    """The application used a session object wrongly (not the peer: see the module)."""
