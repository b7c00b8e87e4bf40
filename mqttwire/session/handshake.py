"""The server's side of the CONNECT and AUTH handshake (MQTT 5.0 §3.1, §3.2, §4.12;
3.1.1 §3.1, §3.2), as the base class of :class:`~.connection.ServerConnection`.
Rule numbers are MQTT 5.0's unless marked 3.1.1."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .._codec.properties import Properties
from .._constants import REASON_CODES, PacketType, ReasonCode
from .._errors import MQTTWireError, ProtocolError
from ._codec_choice import Codec
from .aliases import InboundAliases, OutboundAliases
from .auth import (
    Accept,
    AuthRequest,
    Challenge,
    ConnectionInfo,
    Principal,
    Refuse,
    v3_return_code,
)
from .errors import SessionError
from .events import (
    ClientConnected,
    ClientReauthenticated,
    ClientRefused,
)
from .server_config import SESSION_NEVER_EXPIRES

if TYPE_CHECKING:
    from .broker import Broker
    from .connection import ServerConnection
    from .server_session import Delivery, ServerSession

__all__ = ["AuthExchange", "ConnectionState", "Handshake"]


class ConnectionState(enum.Enum):
    """Where a connection is (:attr:`.connection.ServerConnection.state`)."""

    AWAITING_CONNECT = "awaiting CONNECT"
    #: CONNECT received, an enhanced authentication exchange (AUTH) before CONNACK.
    AUTHENTICATING = "authenticating"
    CONNECTED = "connected"
    CLOSED = "closed"


@dataclass(eq=False, slots=True)
class AuthExchange:
    """An enhanced authentication exchange in progress on one connection: the CONNECT
    that started it (None for a re-authentication), and where the hook is."""

    connect: Any
    client_id: str
    assigned: str | None
    username: str | None
    step: int = 0
    state: Any = None


class Handshake:
    """The CONNECT and AUTH handshake of a :class:`~.connection.ServerConnection` (its
    base class): CONNECT checked and answered with CONNACK, the authentication hook and
    5.0 enhanced authentication (§4.12), re-authentication, and the session taken up.
    The attributes and methods declared here are the connection's."""

    broker: Broker
    codec: Codec
    info: ConnectionInfo
    state: ConnectionState
    version: int | None
    client_id: str | None
    session: ServerSession | None
    principal: Principal | None
    auth_method: str | None
    _exchange: AuthExchange | None
    will: Any
    keep_alive: int
    send_window: int
    max_send_size: float
    _aliases_in: InboundAliases
    _aliases_out: OutboundAliases

    @property
    def _connection(self) -> ServerConnection:
        """This object as the connection it is (the only class made on this one)."""
        return cast("ServerConnection", self)

    if TYPE_CHECKING:
        def _send(self, packet: Any) -> bool: ...
        def _close(self, now: float, reason: str, *, reason_code: int | None = None,
                   error: MQTTWireError | None = None, by_client: bool = False,
                   publish_will: bool = True) -> None: ...
        def _pump(self, now: float) -> None: ...
        def _send_delivery(self, delivery: Delivery, packet_id: int | None, now: float,
                           dup: bool = False) -> bool: ...

    def _on_connect(self, packet: Any, now: float) -> None:
        config = self.broker.config
        self.version = version = packet.protocol_version
        props = packet.properties
        client_id = packet.client_id
        assigned = None
        method = props.authentication_method if version == 5 and props is not None else None
        if method is not None and method not in config.authentication_methods:
            # [MQTT-4.12.0-1]: a method no hook handles is refused.
            self._refuse(ReasonCode.BAD_AUTHENTICATION_METHOD, f"Authentication Method "
                         f"{method!r} is not supported [MQTT-4.12.0-1]", now)
            return
        if not client_id:
            if version == 3 or not packet.clean_start:
                # MQTT 3.1 needs 1 to 23 characters; 3.1.1 [MQTT-3.1.3-8] refuses an
                # empty one without Clean Session (5.0 allows it: §3.1.3.1).
                if version != 5:
                    self._refuse(0x02, "empty Client Identifier without Clean Session "
                                 "[MQTT-3.1.3-8]", now)
                    return
            # 3.1.1 [MQTT-3.1.3-6] / 5.0 [MQTT-3.1.3-6], [MQTT-3.1.3-7]: assign one.
            client_id = assigned = config.assigned_id_prefix + uuid.uuid4().hex
        elif version == 3 and len(client_id) > 23:
            self._refuse(0x02, "MQTT 3.1 Client Identifier longer than 23 characters", now)
            return
        self.auth_method = method
        if config.authenticate is None:
            principal = Principal(client_id, packet.username, self.info, authenticated=False)
            self._accept(packet, client_id, assigned, principal, None, now)
            return
        self._exchange = AuthExchange(packet, client_id, assigned, packet.username)
        self._authenticate(AuthRequest(
            client_id, packet.username, packet.password, version, self.info, method,
            props.authentication_data if props is not None else None), now)

    # Authentication ------------------------------------------------------------------

    def _authenticate(self, request: AuthRequest, now: float) -> None:
        """Ask the ``authenticate`` hook about one step and act on its answer."""
        exchange = self._exchange
        assert exchange is not None
        result = self.broker.config.authenticate(request)  # type: ignore[misc]
        reauth = request.reauthenticate
        if isinstance(result, Challenge):
            if self.auth_method is None:
                raise SessionError(
                    "the authenticate hook answered a Challenge to a CONNECT without an "
                    "Authentication Method: the server must not send AUTH [MQTT-4.12.0-6]")
            exchange.step = request.step + 1
            exchange.state = result.state
            if not reauth:
                self.state = ConnectionState.AUTHENTICATING
            self._send(self.codec.Auth(  # [MQTT-4.12.0-2], [MQTT-4.12.0-5]
                reason_code=ReasonCode.CONTINUE_AUTHENTICATION, properties=Properties(
                    authentication_method=self.auth_method, authentication_data=result.data)))
        elif isinstance(result, Refuse):
            self._exchange = None
            if reauth:
                # [MQTT-4.12.1-2]: DISCONNECT with a code a DISCONNECT may carry (0x86 is
                # a CONNACK's only: 0x87 says the same), then close.
                code = result.reason_code
                if code not in REASON_CODES[PacketType.DISCONNECT]:
                    code = ReasonCode.NOT_AUTHORIZED
                self._close(now, f"re-authentication refused: {result.reason}",
                            reason_code=code)
            else:
                # [MQTT-4.12.0-4] (5.0), 3.1.1 §3.2.2.3: CONNACK with the code, close.
                code = result.reason_code if self.version == 5 else \
                    v3_return_code(result.reason_code)
                self._refuse(code, result.reason, now)
        elif isinstance(result, Accept):
            self._exchange = None
            username = result.username if result.username is not None else exchange.username
            principal = Principal(exchange.client_id, username, self.info, authenticated=True)
            if reauth:
                self.principal = principal
                if self.session is not None:
                    self.session.principal = principal
                self.broker._events.append(ClientReauthenticated(
                    self._connection, exchange.client_id, principal))
                self._send(self.codec.Auth(reason_code=0, properties=Properties(
                    authentication_method=self.auth_method,
                    authentication_data=result.data)))  # §4.12.1: AUTH 0x00 Success
            else:
                self._accept(exchange.connect, exchange.client_id, exchange.assigned,
                             principal, result.data, now)
        else:
            raise SessionError(f"the authenticate hook must answer Accept, Refuse or "
                               f"Challenge, not {result!r}")

    def _on_auth(self, packet: Any, now: float) -> None:
        """An AUTH from the client: the next step of an exchange the server started with
        a Challenge (0x18), or a re-authentication (0x19)."""
        method = self.auth_method
        if method is None:
            raise ProtocolError("AUTH", "AUTH from a Client whose CONNECT had no "
                                "Authentication Method", rule="MQTT-4.12.0-7")
        props = packet.properties
        if props is None or props.authentication_method != method:
            raise ProtocolError("AUTH", f"Authentication Method "
                                f"{props.authentication_method if props else None!r} is not "
                                f"the CONNECT's {method!r}", rule="MQTT-4.12.0-5")
        code = packet.reason_code
        exchange = self._exchange
        if code == ReasonCode.CONTINUE_AUTHENTICATION:
            if exchange is None or exchange.step == 0:
                # [MQTT-4.12.0-3]: the Client's AUTH 0x18 answers the Server's.
                raise ProtocolError("AUTH", "AUTH 0x18 Continue authentication that "
                                    "answers no AUTH from the Server", rule="MQTT-4.12.0-3")
            reauth = self.state is ConnectionState.CONNECTED
        elif code == ReasonCode.RE_AUTHENTICATE:
            if self.state is not ConnectionState.CONNECTED:
                raise ProtocolError("AUTH", "AUTH 0x19 Re-authenticate before CONNACK",
                                    rule="§4.12.1")
            if exchange is not None:
                raise ProtocolError("AUTH", "AUTH 0x19 Re-authenticate while an "
                                    "authentication exchange is in progress", rule="§4.12.1")
            principal = self.principal
            assert principal is not None and self.client_id is not None
            exchange = self._exchange = AuthExchange(None, self.client_id, None,
                                                     principal.username)
            reauth = True
        else:
            # §3.15.2.1: 0x00 Success is the Server's to send.
            raise ProtocolError("AUTH", f"AUTH 0x{code:02X} from a Client", rule="§3.15.2.1")
        username = exchange.connect.username if exchange.connect is not None else \
            exchange.username
        self._authenticate(AuthRequest(
            exchange.client_id, username, None, 5, self.info, method,
            props.authentication_data, exchange.step, reauth, exchange.state), now)

    def _accept(self, packet: Any, client_id: str, assigned: str | None,
                principal: Principal, auth_data: bytes | None, now: float) -> None:
        """CONNACK 0x00: the session attached, the connection open for traffic."""
        config = self.broker.config
        version: int = packet.protocol_version
        props = packet.properties
        self.principal = principal
        keep_alive = packet.keep_alive
        server_keep_alive = None
        if version == 5:
            expiry = (props.session_expiry_interval if props is not None else None) or 0
            if props is not None and props.receive_maximum is not None:
                self.send_window = props.receive_maximum
            else:
                self.send_window = 65535  # absent: 65,535 (§3.1.2.11.3)
            if props is not None and props.maximum_packet_size is not None:
                self.max_send_size = props.maximum_packet_size
            self._aliases_in = InboundAliases(config.topic_alias_maximum)
            if config.assign_topic_aliases and props is not None and props.topic_alias_maximum:
                self._aliases_out = OutboundAliases(props.topic_alias_maximum)
            cap = config.max_keep_alive
            if cap is not None and (keep_alive == 0 or keep_alive > cap):
                # §3.2.2.3.14: the client must use our value [MQTT-3.2.2-21].
                keep_alive = server_keep_alive = cap
        else:
            # 3.x Clean Session 0: the session lasts until a Clean Session 1 connect.
            expiry = 0 if packet.clean_start else SESSION_NEVER_EXPIRES
        if not self._will_within_limits(packet.will, now):
            return
        granted_expiry = self.broker._capped_expiry(expiry)
        expiry_changed = granted_expiry != expiry
        expiry = granted_expiry
        self.broker._timers.cancel(("conn", self))
        session, resumed = self.broker._attach(self._connection, client_id,
                                               packet.clean_start, expiry, now)
        self.session = session
        session.principal = principal
        self.client_id = client_id
        self.will = packet.will
        self.keep_alive = keep_alive
        self.state = ConnectionState.CONNECTED
        if keep_alive:
            self.broker._timers.set(("conn", self), now + 1.5 * keep_alive)
        connack_props = None
        if version == 5:
            connack_props = Properties(
                receive_maximum=config.receive_maximum,
                maximum_packet_size=config.max_packet_size,
                # [MQTT-3.2.2-9]: absent means 2; Retain Available absent means 1.
                maximum_qos=config.maximum_qos if config.maximum_qos < 2 else None,
                retain_available=int(config.retain_available),
                # §3.2.2.3.2: the interval the server uses, when not the client's.
                session_expiry_interval=expiry if expiry_changed else None,
                wildcard_subscription_available=1,
                subscription_identifier_available=1,
                shared_subscription_available=1,
                topic_alias_maximum=config.topic_alias_maximum,
                assigned_client_identifier=assigned,
                server_keep_alive=server_keep_alive,
                # [MQTT-4.12.0-5]: the CONNECT's method, and the final data, if any.
                authentication_method=self.auth_method,
                authentication_data=auth_data,
            )
        # Session Present: [MQTT-3.2.2-2], [MQTT-3.2.2-3]; MQTT 3.1 has no such flag.
        self._send(self.codec.ConnAck(session_present=resumed and version > 3,
                                      properties=connack_props))
        self.broker._events.append(ClientConnected(self._connection, client_id, resumed, version))
        # [MQTT-4.4.0-1]: on a resumed session, re-send unacknowledged PUBLISHes (DUP 1,
        # [MQTT-3.3.1-1]) and PUBRELs with their original identifiers, in order.
        for pid, entry in session.inflight.items():
            if entry.released:
                self._send(self.codec.PubRel(pid))
            else:
                self._send_delivery(entry.delivery, pid, now, dup=True)
        self._pump(now)

    def _will_within_limits(self, will: Any, now: float) -> bool:
        """A Will Message above Maximum QoS or retained without Retain Available refuses
        the connection: 5.0 CONNACK 0x9B [MQTT-3.2.2-12] or 0x9A [MQTT-3.2.2-13]; 3.x
        has no such return code, so the connection closes without CONNACK (3.1.1
        [MQTT-3.2.2-6])."""
        config = self.broker.config
        if will is None:
            return True
        if will.qos > config.maximum_qos:
            code, reason = ReasonCode.QOS_NOT_SUPPORTED, (
                f"Will QoS {will.qos} above the Maximum QoS {config.maximum_qos} "
                "[MQTT-3.2.2-12]")
        elif will.retain and not config.retain_available:
            code, reason = ReasonCode.RETAIN_NOT_SUPPORTED, (
                "Will Retain 1 without Retain Available [MQTT-3.2.2-13]")
        else:
            return True
        if self.version == 5:
            self._refuse(code, reason, now)
        else:
            self._close(now, f"CONNECT refused: {reason} (3.1.1 [MQTT-3.2.2-6])")
        return False

    def _refuse(self, code: int, reason: str, now: float) -> None:
        """CONNACK with ``code``, then close (3.1.1 [MQTT-3.2.2-5], 5.0 [MQTT-3.2.2-7])."""
        self._send(self.codec.ConnAck(reason_code=code))
        self.broker._events.append(ClientRefused(self._connection, code, reason))
        self._close(now, f"CONNECT refused: {reason}")
