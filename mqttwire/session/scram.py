"""SCRAM-SHA-256 (RFC 5802, RFC 7677) as an MQTT 5.0 enhanced authentication method
(§4.12): the server side as an ``authenticate`` hook, the client side as a
``ClientSession`` authenticator.  hashlib and hmac only.

The exchange, with Authentication Method ``"SCRAM-SHA-256"``::

    CONNECT   data = client-first   "n,,n=alice,r=<client nonce>"
    AUTH 0x18 data = server-first   "r=<client nonce><server nonce>,s=<salt>,i=4096"
    AUTH 0x18 data = client-final   "c=biws,r=<nonce>,p=<client proof>"
    CONNACK   data = server-final   "v=<server signature>"  (or a refusal, 0x86)

Re-authentication (AUTH 0x19 with a new client-first) runs the same steps and ends with
AUTH 0x00 Success instead of the CONNACK.  The server keeps only each user's
``ScramCredentials`` (salt, iterations, StoredKey, ServerKey), never the password.  No
channel binding (the GS2 header is ``n,,``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .._constants import ReasonCode
from .auth import Accept, AuthRequest, AuthResult, Challenge, Refuse

__all__ = ["METHOD", "ScramCredentials", "ScramServer", "ScramClient"]

METHOD = "SCRAM-SHA-256"


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.digest(key, data, "sha256")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _salted(password: str, salt: bytes, iterations: int) -> bytes:
    # RFC 5802 §2.2 Hi() is PBKDF2 with HMAC; the password SASLprep'd (ASCII ones are
    # unchanged: this module takes the password as given).
    return hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)


def _escape(name: str) -> str:
    """RFC 5802 §5.1 saslname: ',' and '=' escaped."""
    return name.replace("=", "=3D").replace(",", "=2C")


def _unescape(name: str) -> str:
    if "=" in name.replace("=3D", "").replace("=2C", ""):
        raise ValueError(f"bad saslname {name!r} (RFC 5802 §5.1)")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        key, sep, value = part.partition("=")
        if not sep or len(key) != 1:
            raise ValueError(f"bad SCRAM attribute {part!r} (RFC 5802 §5)")
        out.setdefault(key, value)
    return out


@dataclass(frozen=True)
class ScramCredentials:
    """What the server stores for one user (RFC 5802 §3): no password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, password: str, *, iterations: int = 4096,
                      salt: bytes | None = None) -> ScramCredentials:
        salt = secrets.token_bytes(16) if salt is None else salt
        salted = _salted(password, salt, iterations)
        return cls(salt, iterations, hashlib.sha256(_hmac(salted, b"Client Key")).digest(),
                   _hmac(salted, b"Server Key"))

    def __repr__(self) -> str:
        return f"ScramCredentials(iterations={self.iterations}, <keys hidden>)"


@dataclass(frozen=True)
class _ServerState:
    username: str
    nonce: str
    auth_prefix: str  # client-first-bare "," server-first
    credentials: ScramCredentials


class ScramServer:
    """The server side: an ``authenticate`` hook (``BrokerConfig(authenticate=
    ScramServer(users), authentication_methods={METHOD})``).  ``users`` maps a user name
    to its ``ScramCredentials`` (a dict, or any mapping looked up per attempt).
    ``fallback`` answers requests of another method, or none (a plain CONNECT with user
    name and password); without it they are refused with 0x8C / 0x87."""

    def __init__(self, users: Mapping[str, ScramCredentials], *,
                 fallback: Callable[[AuthRequest], AuthResult] | None = None,
                 nonce: Callable[[], str] | None = None) -> None:
        self.users = users
        self.fallback = fallback
        #: Makes the server's part of the nonce (a test can fix it: RFC 7677's vector).
        self._nonce = nonce if nonce is not None else lambda: _b64(secrets.token_bytes(18))

    def __repr__(self) -> str:
        return f"ScramServer({len(self.users)} users)"

    def __call__(self, request: AuthRequest) -> AuthResult:
        if request.method != METHOD:
            if self.fallback is not None:
                return self.fallback(request)
            if request.method is None:
                return Refuse(ReasonCode.NOT_AUTHORIZED, "SCRAM-SHA-256 authentication only")
            return Refuse(ReasonCode.BAD_AUTHENTICATION_METHOD,
                          f"unsupported method {request.method!r}")
        try:
            if request.state is None:
                return self._first(request)
            return self._final(request, request.state)
        except (ValueError, UnicodeDecodeError) as exc:
            return Refuse(ReasonCode.NOT_AUTHORIZED, f"SCRAM: {exc}")

    def _first(self, request: AuthRequest) -> AuthResult:
        text = (request.data or b"").decode("utf-8")
        if not text.startswith("n,,"):
            raise ValueError("client-first-message without the GS2 header 'n,,' "
                             "(no channel binding, RFC 5802 §7)")
        bare = text[3:]
        attrs = _attributes(bare)
        username, client_nonce = _unescape(attrs.get("n", "")), attrs.get("r", "")
        if not username or not client_nonce:
            raise ValueError("client-first-message without n= or r=")
        credentials = self.users.get(username)
        if credentials is None:
            return Refuse(ReasonCode.BAD_USER_NAME_OR_PASSWORD, f"SCRAM: unknown user "
                          f"{username!r}")
        nonce = client_nonce + self._nonce()
        server_first = f"r={nonce},s={_b64(credentials.salt)},i={credentials.iterations}"
        return Challenge(server_first.encode("ascii"),
                         _ServerState(username, nonce, f"{bare},{server_first}", credentials))

    def _final(self, request: AuthRequest, state: _ServerState) -> AuthResult:
        text = (request.data or b"").decode("utf-8")
        without_proof, _, proof_part = text.rpartition(",p=")
        attrs = _attributes(without_proof)
        if attrs.get("c") != "biws" or attrs.get("r") != state.nonce or not proof_part:
            raise ValueError("client-final-message with a wrong channel binding or nonce")
        auth_message = f"{state.auth_prefix},{without_proof}".encode()
        creds = state.credentials
        signature = _hmac(creds.stored_key, auth_message)
        proof = base64.b64decode(proof_part, validate=True)
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if len(proof) != len(signature) or not hmac.compare_digest(
                hashlib.sha256(client_key).digest(), creds.stored_key):
            return Refuse(ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                          f"SCRAM: wrong password for {state.username!r}")
        server_final = "v=" + _b64(_hmac(creds.server_key, auth_message))
        return Accept(server_final.encode("ascii"), username=state.username)


class ScramClient:
    """The client side, for ``ClientSession(authenticator=ScramClient(user, password))``:
    ``start()`` makes the client-first-message (for CONNECT, or AUTH 0x19),
    ``challenge(data)`` answers the server-first, ``finish(data)`` checks the server's
    signature (False: the server does not know the password, and the client ends the
    connection)."""

    method = METHOD

    def __init__(self, username: str, password: str, *,
                 nonce: Callable[[], str] | None = None) -> None:
        self.username = username
        self._password = password
        #: Makes the client nonce (a test can fix it: RFC 7677's vector).
        self._make_nonce = nonce if nonce is not None else lambda: _b64(secrets.token_bytes(18))
        self._nonce = ""
        self._bare = ""
        self._auth_message = b""
        self._salted = b""

    def __repr__(self) -> str:
        return f"ScramClient({self.username!r})"

    def start(self) -> bytes:
        self._nonce = self._make_nonce()
        self._bare = f"n={_escape(self.username)},r={self._nonce}"
        self._auth_message = b""
        return ("n,," + self._bare).encode("utf-8")

    def challenge(self, data: bytes | None) -> bytes:
        server_first = (data or b"").decode("utf-8")
        attrs = _attributes(server_first)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
        if not nonce.startswith(self._nonce) or salt is None or not iterations.isdigit():
            raise ValueError(f"bad SCRAM server-first-message {server_first!r}")
        self._salted = _salted(self._password, base64.b64decode(salt), int(iterations))
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._bare},{server_first},{without_proof}".encode()
        client_key = _hmac(self._salted, b"Client Key")
        signature = _hmac(hashlib.sha256(client_key).digest(), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def finish(self, data: bytes | None) -> bool:
        if not self._auth_message:
            return False
        expected = "v=" + _b64(_hmac(_hmac(self._salted, b"Server Key"), self._auth_message))
        return hmac.compare_digest((data or b"").decode("ascii", "replace"), expected)
