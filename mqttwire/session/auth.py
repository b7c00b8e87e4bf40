"""Who may connect and what they may do: the server's authentication and authorisation
hooks, and their types.

The ``Broker`` calls them; the application (or ``mosquitto_files``) writes them:

- ``BrokerConfig.authenticate(request) -> Accept | Refuse | Challenge``: once per
  CONNECT, and once per AUTH of a 5.0 enhanced authentication exchange (MQTT 5.0 §4.12),
  on connection and on re-authentication.  ``request`` is an ``AuthRequest``: what the
  CONNECT (or AUTH) carries and what the I/O glue knows (``ConnectionInfo``).
- ``BrokerConfig.authorize_publish(principal, topic, qos, retain) -> bool``,
  ``authorize_subscribe(principal, subscription) -> bool`` and
  ``authorize_delivery(principal, message) -> bool``: what an authenticated client may
  write, subscribe to and read.

docs/session.md ("Authentication", "Authorisation") says when each is called and what
the broker does with the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._constants import REASON_CODES, PacketType, ReasonCode

__all__ = [
    "ConnectionInfo",
    "AuthRequest",
    "Accept",
    "Refuse",
    "Challenge",
    "AuthResult",
    "Authenticate",
    "Principal",
    "v3_return_code",
]


@dataclass(frozen=True)
class ConnectionInfo:
    """What the I/O glue knows of a network connection, given to
    ``Broker.new_connection``: the peer's address (as the glue writes it, e.g.
    ``"192.0.2.7:51234"``) and, on a TLS connection with a verified client certificate,
    its subject (e.g. ``"CN=sensor-1,O=Example"``)."""

    peer: str | None = None
    certificate_subject: str | None = None
    tls: bool = False


@dataclass(frozen=True)
class AuthRequest:
    """One authentication step, as the ``authenticate`` hook sees it.

    ``step`` is 0 for the CONNECT, then 1, 2, ... for each AUTH 0x18 Continue
    authentication the client sent in answer to a ``Challenge``.  ``reauthenticate`` is
    True from the client's AUTH 0x19 Re-authenticate on a live connection (MQTT 5.0
    §4.12.1) and for the steps that follow it.  ``method`` is the 5.0 Authentication
    Method (None: plain CONNECT authentication, the only kind before 5.0), ``data`` the
    Authentication Data of this step's packet.  ``state`` is what the previous
    ``Challenge`` of this exchange kept (None on step 0), so that the hook itself can
    stay stateless.  ``client_id`` is the one the session will have (an assigned one
    when the client sent none).  ``username`` and ``password`` are the CONNECT's
    (``password`` is None on the AUTH steps; on a re-authentication ``username`` is the
    one the client was accepted as)."""

    client_id: str
    username: str | None
    password: bytes | None
    version: int
    connection: ConnectionInfo
    method: str | None = None
    data: bytes | None = None
    step: int = 0
    reauthenticate: bool = False
    state: Any = None

    def __repr__(self) -> str:  # the password stays out of logs
        secret = "<hidden>" if self.password is not None else None
        return (f"AuthRequest(client_id={self.client_id!r}, username={self.username!r}, "
                f"password={secret}, version={self.version}, method={self.method!r}, "
                f"step={self.step}, reauthenticate={self.reauthenticate}, "
                f"connection={self.connection!r})")


@dataclass(frozen=True)
class Accept:
    """The client is who it says.  ``data``: 5.0 Authentication Data for the CONNACK
    (or AUTH 0x00 Success, on re-authentication) that ends an enhanced exchange, e.g.
    SCRAM's server signature.  ``username``: the name the authorisation hooks see
    instead of the CONNECT's (e.g. the certificate's subject, as Mosquitto's
    ``use_identity_as_username``); None keeps the CONNECT's."""

    data: bytes | None = None
    username: str | None = None


@dataclass(frozen=True)
class Refuse:
    """The client may not connect (or stay connected, on re-authentication).
    ``reason_code`` is a 5.0 CONNACK reason code of 0x80 or more, typically 0x86 Bad
    User Name or Password or 0x87 Not authorized; a 3.x client gets the 3.1.1 return
    code that says the same (``v3_return_code``).  ``reason`` is for the server's log
    (``ClientRefused.reason``); it is not sent."""

    reason_code: int = ReasonCode.NOT_AUTHORIZED
    reason: str = "not authorized"

    def __post_init__(self) -> None:
        # Checked here, where the application gives it: the CONNACK's encoder would
        # refuse it later, inside the broker's receive_data.
        if self.reason_code < 0x80 or self.reason_code not in REASON_CODES[PacketType.CONNACK]:
            raise ValueError(f"0x{self.reason_code:02X} is not a CONNACK failure reason code "
                             "(MQTT 5.0 §3.2.2.2: 0x80 and above, as listed there)")


@dataclass(frozen=True)
class Challenge:
    """More is needed (5.0 enhanced authentication only): the server sends AUTH 0x18
    Continue authentication with ``data`` [MQTT-4.12.0-2] and calls the hook again with
    the client's answer, ``state`` passed back as ``AuthRequest.state``."""

    data: bytes | None = None
    state: Any = None


AuthResult = Accept | Refuse | Challenge

#: The ``authenticate`` hook.
Authenticate = Callable[[AuthRequest], AuthResult]


@dataclass(frozen=True)
class Principal:
    """Who an authenticated client is, as the authorisation hooks see it: kept with the
    session (``ServerSession.principal``), so that messages routed to it while it is
    offline are checked too.  ``username`` is the CONNECT's, or the one ``Accept`` gave;
    ``authenticated`` is False when no ``authenticate`` hook is configured (the
    CONNECT's user name is then unchecked)."""

    client_id: str
    username: str | None
    connection: ConnectionInfo
    authenticated: bool = False


# MQTT 3.1.1 §3.2.2.3, Table 3.1: the return codes a 3.x CONNACK can carry.
_V3_CODES: dict[int, int] = {
    ReasonCode.BAD_USER_NAME_OR_PASSWORD: 0x04,
    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID: 0x02,
    ReasonCode.SERVER_UNAVAILABLE: 0x03,
    ReasonCode.SERVER_BUSY: 0x03,
    ReasonCode.UNSUPPORTED_PROTOCOL_VERSION: 0x01,
}


def v3_return_code(reason_code: int) -> int:
    """The 3.1.1 (and 3.1) CONNACK return code for a 5.0 refusal: 0x86 -> 0x04 Bad user
    name or password, 0x85 -> 0x02 Identifier rejected, 0x88/0x89 -> 0x03 Server
    unavailable, 0x84 -> 0x01, anything else -> 0x05 Not authorized."""
    return _V3_CODES.get(reason_code, 0x05)
