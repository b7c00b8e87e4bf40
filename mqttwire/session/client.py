"""The client side: one object holds a client's session across network connections.

No sockets, no clock: ``connect(now)`` starts a network connection (the caller opened
the socket), ``receive_data(data, now)`` takes what it reads, ``data_to_send()`` gives
what to write, ``tick(now)`` sends PINGREQ and detects a silent server, and
``connection_lost(now)`` says the socket is gone.  Calling ``connect`` again resumes the
session (Clean Start 0) when the server kept it.

Received QoS 1/2 messages can be acknowledged later (``auto_ack=False``, then
``ack(message, now=...)``): the PUBACK or PUBREC goes out only then, in the order the
messages arrived ([MQTT-4.6.0-2], [MQTT-4.6.0-3]), and the server sends no more than our
Receive Maximum unacknowledged ones [MQTT-3.3.4-9], which throttles it.  Rule numbers
are MQTT 5.0's unless marked 3.1.1.
"""

from __future__ import annotations

import enum
import math
from collections import OrderedDict, deque
from types import ModuleType
from typing import Any

from .._codec.properties import Properties
from .._constants import PacketType, ReasonCode
from .._errors import MQTTWireError, ProtocolError
from ._codec_choice import Codec
from ._ids import PacketIds
from .aliases import InboundAliases, OutboundAliases
from .errors import SessionError, check_reason_code, disconnect_reason
from .events import (
    Connected,
    ConnectRefused,
    Disconnected,
    Event,
    MessageReceived,
    PublishCompleted,
    Reauthenticated,
    SubscribeCompleted,
    UnsubscribeCompleted,
)

__all__ = ["ClientSession", "ClientState", "OutgoingMessage", "ReceivedMessage"]


class ClientState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"  # CONNECT sent, CONNACK awaited
    CONNECTED = "connected"


class OutgoingMessage:
    """A PUBLISH of ours.  ``state``: "queued" (waiting for the connection or for room in
    the server's Receive Maximum), "sent" (QoS 1/2 awaiting PUBACK/PUBREC), "released"
    (QoS 2: PUBREL sent, awaiting PUBCOMP), "done", or "failed" (dropped)."""

    __slots__ = ("topic", "payload", "qos", "retain", "properties", "packet_id", "state")

    def __init__(self, topic: str, payload: bytes, qos: int, retain: bool,
                 properties: Properties | None) -> None:
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.properties = properties
        self.packet_id: int | None = None
        self.state = "queued"

    def __repr__(self) -> str:
        pid = f", packet_id={self.packet_id}" if self.packet_id is not None else ""
        return (f"OutgoingMessage({self.topic!r}, {self.payload!r}, qos={self.qos}"
                f"{pid}, state={self.state!r})")


class ReceivedMessage:
    """An Application Message from the server.  ``topic`` is the real Topic Name (a Topic
    Alias is resolved); ``properties`` are as received."""

    __slots__ = ("topic", "payload", "qos", "retain", "dup", "packet_id", "properties",
                 "_epoch", "_serial")

    def __init__(self, publish: Any, topic: str, epoch: int, serial: int = 0) -> None:
        self.topic = topic
        self.payload: bytes = publish.payload
        self.qos: int = publish.qos
        self.retain: bool = publish.retain
        self.dup: bool = publish.dup
        self.packet_id: int | None = publish.packet_id
        self.properties: Properties | None = publish.properties
        self._epoch = epoch
        self._serial = serial  # its place among the session's received QoS 1/2 messages

    def __repr__(self) -> str:
        pid = f", packet_id={self.packet_id}" if self.packet_id is not None else ""
        return f"ReceivedMessage({self.topic!r}, {self.payload!r}, qos={self.qos}{pid})"


class _Inbound:
    """A received QoS 1/2 message whose PUBACK/PUBREC is not sent yet."""

    __slots__ = ("message", "acked", "reason_code", "present")

    def __init__(self, message: ReceivedMessage) -> None:
        self.message = message
        self.acked = False
        self.reason_code = 0
        #: False from a resumed CONNACK until the server's re-sent copy arrives (or the
        #: PINGRESP that shows its re-sending is over): an acknowledgement sent before
        #: the copy would make the copy a new message [MQTT-4.3.2-5].
        self.present = True


class ClientSession:
    """An MQTT client's session state and its current network connection.

    Args:
        client_id: empty asks the server to assign one (5.0; 3.1.1 only with Clean
            Start); the assigned one is kept for reconnections.
        version: protocol level 3, 4 or 5.
        clean_start: Clean Start (3.x: Clean Session) of the first ``connect``; later
            ones default to False, to resume the session.
        keep_alive: seconds; the server's Server Keep Alive replaces it [MQTT-3.2.2-21].
        session_expiry_interval: 5.0 Session Expiry Interval (0: the session ends with
            the connection).
        receive_maximum: 5.0: how many QoS 1/2 messages the server may have
            unacknowledged towards us (None: the protocol's 65,535).
        topic_alias_maximum: 5.0: how many Topic Aliases the server may use towards us.
        use_topic_aliases: 5.0: assign Topic Aliases to our PUBLISHes within the server's
            Topic Alias Maximum.
        maximum_packet_size: 5.0 Maximum Packet Size we accept (None: no limit).
        will: an ``mqttwire.Will`` (its 5.0 properties may carry will_delay_interval).
        auto_ack: acknowledge received QoS 1/2 messages at once; False leaves it to
            ``ack()``.
        ping_timeout: seconds to wait for PINGRESP (None: the Keep Alive).
        connect_timeout: seconds to wait for CONNACK.
        linger_timeout: seconds at most to linger over a connection we close (our
            DISCONNECT sent, or a timeout) before closing the socket: see
            ``Disconnected.linger``.  0: close at once.
        authenticator: 5.0 enhanced authentication (§4.12): an object with ``method``
            (the Authentication Method), ``start() -> bytes | None`` (the CONNECT's, or a
            re-authentication's, Authentication Data), ``challenge(data) -> bytes | None``
            (the answer to the server's AUTH 0x18) and ``finish(data) -> bool`` (the
            final data of the CONNACK or AUTH 0x00 accepted; False ends the connection).
            ``mqttwire.session.scram.ScramClient`` is one.
        codec: ``mqttwire._speedups`` or ``mqttwire._pure``; None for ``mqttwire``'s.
        tolerate_overrun: take what a server sends beyond our Receive Maximum, and a
            PUBLISH whose packet identifier is still in use by an exchange already seen
            on this connection, as new messages rather than protocol errors
            ([MQTT-3.3.4-9], 5.0 [MQTT-2.2.1-4], 3.1.1 [MQTT-2.3.1-4]).  For a server
            that puts more than 65,535 messages in flight towards us, which then share
            identifiers (Mosquitto 2.0.11 with a backlog: docs/live.md).  Such a
            message's acknowledgement waits until the earlier exchange with its
            identifier has ended (our PUBACK, or our PUBCOMP), so that the server, which
            matches an acknowledgement to the first message in flight with that
            identifier, takes each for the right message (as far as a client can see:
            docs/live.md has where Mosquitto 2.0.11 still lost track).  A copy a server
            sends again on
            the same connection (only 3.1.1 servers may) is then delivered twice: a
            duplicate rather than a loss.  Counted in ``receive_maximum_exceeded`` and
            ``ids_reused``.
    """

    def __init__(
        self, client_id: str = "", *, version: int = 5, clean_start: bool = True,
        keep_alive: int = 60, session_expiry_interval: int = 0,
        receive_maximum: int | None = None, topic_alias_maximum: int = 0,
        use_topic_aliases: bool = True, maximum_packet_size: int | None = None,
        will: Any = None, username: str | None = None, password: bytes | None = None,
        properties: Properties | None = None, auto_ack: bool = True,
        ping_timeout: float | None = None, connect_timeout: float = 30.0,
        linger_timeout: float = 2.0, authenticator: Any = None,
        codec: ModuleType | None = None, tolerate_overrun: bool = False,
    ) -> None:
        if version not in (3, 4, 5):
            raise SessionError(f"version must be 3, 4 or 5, not {version!r}")
        if version != 5 and (session_expiry_interval or receive_maximum is not None
                             or topic_alias_maximum or maximum_packet_size is not None):
            raise SessionError("session expiry, receive maximum, topic aliases and maximum "
                               "packet size are MQTT 5.0 properties")
        if receive_maximum is not None and not 1 <= receive_maximum <= 65535:
            raise SessionError(f"receive_maximum must be 1..65535, not {receive_maximum}")
        if not 0 <= linger_timeout < math.inf:
            raise SessionError(f"linger_timeout must be 0 or more seconds, not "
                               f"{linger_timeout}")
        if authenticator is not None and version != 5:
            raise SessionError("enhanced authentication (an authenticator) is MQTT 5.0's")
        self.authenticator = authenticator
        #: A re-authentication we started awaits the server's AUTH 0x00 (§4.12.1).
        self._reauthenticating = False
        self.codec = Codec(codec)
        self.client_id = client_id
        self.version = version
        self.clean_start = clean_start
        self.keep_alive = keep_alive
        self.session_expiry_interval = session_expiry_interval
        self.receive_maximum = receive_maximum
        self.topic_alias_maximum = topic_alias_maximum
        self.use_topic_aliases = use_topic_aliases
        self.maximum_packet_size = maximum_packet_size
        self.will = will
        self.username = username
        self.password = password
        self.properties = properties
        self.auto_ack = auto_ack
        self.ping_timeout = ping_timeout
        self.connect_timeout = connect_timeout
        self.linger_timeout = linger_timeout
        self.tolerate_overrun = tolerate_overrun
        #: With ``tolerate_overrun``: QoS 1/2 PUBLISHes taken beyond our Receive Maximum,
        #: and PUBLISHes taken whose packet identifier was still in use.
        self.receive_maximum_exceeded = 0
        self.ids_reused = 0
        self.state = ClientState.DISCONNECTED
        #: The last CONNACK.
        self.connack: Any = None
        # Session state (kept across connections while the server keeps the session).
        self._ids = PacketIds()
        self._queue: deque[OutgoingMessage] = deque()
        self._inflight: OrderedDict[int, OutgoingMessage] = OrderedDict()
        # Received QoS 1/2 messages not yet acknowledged, by arrival number (the order
        # their acknowledgements go out in), and those with each identifier, in arrival
        # order (more than one only with tolerate_overrun).
        self._inbound: OrderedDict[int, _Inbound] = OrderedDict()
        self._holders: dict[int, list[_Inbound]] = {}
        self._received = 0
        self._awaiting_pubrel: set[int] = set()
        # After a resuming CONNACK, until its PINGRESP: the PUBRELs not yet sent again.
        self._resending = False
        self._pubrel_due: set[int] = set()
        self._requests: dict[int, tuple[str, int]] = {}  # pid -> (kind, filter count)
        self._has_session = False
        self._sent_clean_start = clean_start
        self._epoch = 0
        # Per connection.
        self._decoder: Any = None
        self._output: list[bytes] = []
        self._events: list[Event] = []
        self._held: list[Any] = []  # requests made before CONNACK
        self._aliases_in = InboundAliases(0)
        self._aliases_out = OutboundAliases(0)
        self._send_window = 65535
        self._server_max_packet: int | None = None
        self._maximum_qos = 2
        self._retain_available = True
        self._effective_keep_alive = keep_alive
        self._last_sent = 0.0
        self._ping_sent: float | None = None
        self._connect_sent = 0.0
        self._connects = 0

    def __repr__(self) -> str:
        return (f"<ClientSession {self.client_id!r} v{self.version} {self.state.value}, "
                f"{len(self._inflight)} in flight, {len(self._queue)} queued, "
                f"{len(self._inbound)} unacknowledged>")

    # Properties ------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.state is ClientState.CONNECTED

    @property
    def effective_keep_alive(self) -> int:
        """The Keep Alive in force: the server's Server Keep Alive if it sent one."""
        return self._effective_keep_alive

    @property
    def inflight(self) -> list[OutgoingMessage]:
        """Our QoS 1/2 PUBLISHes awaiting their acknowledgement, in sending order."""
        return list(self._inflight.values())

    @property
    def unacknowledged(self) -> list[ReceivedMessage]:
        """Received QoS 1/2 messages whose PUBACK/PUBREC is not sent yet."""
        return [entry.message for entry in self._inbound.values()]

    @property
    def awaiting_pubrel(self) -> list[int]:
        """The packet identifiers of received QoS 2 messages whose PUBREC is sent and
        whose PUBREL has not come: their exchange ends with our PUBCOMP."""
        return sorted(self._awaiting_pubrel)

    # Connection ------------------------------------------------------------------------

    def connect(self, now: float, *, clean_start: bool | None = None) -> None:
        """Start a network connection: queue CONNECT.  Clean Start defaults to the
        constructor's on the first call and to False afterwards."""
        if self.state is not ClientState.DISCONNECTED:
            raise SessionError(f"connect() while {self.state.value}")
        if clean_start is None:
            clean_start = self.clean_start if self._connects == 0 else False
        if not self.client_id and not clean_start and self.version != 5:
            raise SessionError("an empty Client Identifier needs Clean Start "
                               "(3.1.1 [MQTT-3.1.3-7])")
        self._connects += 1
        self._sent_clean_start = clean_start
        self._resending = False
        self._pubrel_due = set()
        self.state = ClientState.CONNECTING
        self._decoder = self.codec.StreamDecoder(
            self.version, max_packet_size=self.maximum_packet_size)
        self._output = []
        self._held = []
        self._aliases_in = InboundAliases(self.topic_alias_maximum if self.version == 5 else 0)
        self._aliases_out = OutboundAliases(0)
        self._ping_sent = None
        self._reauthenticating = False
        props = None
        if self.version == 5:
            items = dict(self.properties.items()) if self.properties is not None else {}
            if self.authenticator is not None:
                items.update(authentication_method=self.authenticator.method,
                             authentication_data=self.authenticator.start())
            items.update(session_expiry_interval=self.session_expiry_interval or None,
                         receive_maximum=self.receive_maximum,
                         topic_alias_maximum=self.topic_alias_maximum or None,
                         maximum_packet_size=self.maximum_packet_size)
            props = Properties(**items) or None
        self._write(self.codec.Connect(
            self.client_id, protocol_version=self.version, clean_start=clean_start,
            keep_alive=self.keep_alive, username=self.username, password=self.password,
            will=self.will, properties=props).encode(self.version), now)
        self._connect_sent = now

    def connection_lost(self, now: float) -> list[Event]:
        """The socket closed or failed."""
        if self.state is not ClientState.DISCONNECTED:
            self._end("network connection lost", lost=True)
        return self._take_events()

    def disconnect(self, now: float, *, reason_code: int = 0,
                   session_expiry_interval: int | None = None) -> list[Event]:
        """Send DISCONNECT and end the connection (5.0: ``reason_code``, 0x04 to have the
        will published; a new Session Expiry Interval)."""
        if self.state is not ClientState.CONNECTED:
            raise SessionError(f"disconnect() while {self.state.value}")
        check_reason_code(PacketType.DISCONNECT, reason_code)
        props = None
        if session_expiry_interval is not None:
            if self.version != 5:
                raise SessionError("session_expiry_interval is an MQTT 5.0 property")
            if self.session_expiry_interval == 0 and session_expiry_interval != 0:
                raise SessionError("the Session Expiry Interval cannot be set on DISCONNECT "
                                   "when CONNECT set it to 0 (§3.14.2.2.2)")
            self.session_expiry_interval = session_expiry_interval
            props = Properties(session_expiry_interval=session_expiry_interval)
        if self.version != 5 and reason_code:
            raise SessionError("DISCONNECT has no reason code before MQTT 5.0")
        self._send(self.codec.Disconnect(reason_code=reason_code, properties=props), now)
        self._end("disconnected by the client",
                  reason_code=reason_code if self.version == 5 else None)
        return self._take_events()

    def reauthenticate(self, now: float) -> None:
        """Start a 5.0 re-authentication (§4.12.1): AUTH 0x19 with the authenticator's
        ``start()`` data and the CONNECT's method [MQTT-4.12.1-1].  Other traffic goes on;
        the server's AUTH 0x00 Success gives a ``Reauthenticated`` event, its refusal a
        DISCONNECT (``Disconnected``)."""
        if self.state is not ClientState.CONNECTED:
            raise SessionError(f"reauthenticate() while {self.state.value}")
        if self.authenticator is None:
            raise SessionError("re-authentication needs the authenticator the CONNECT used "
                               "[MQTT-4.12.1-1]")
        if self._reauthenticating:
            raise SessionError("a re-authentication is already in progress")
        self._reauthenticating = True
        self._send_auth(0x19, self.authenticator.start(), now)

    def _send_auth(self, code: int, data: bytes | None, now: float) -> None:
        # [MQTT-4.12.0-5]: every AUTH carries the CONNECT's Authentication Method.
        self._send(self.codec.Auth(reason_code=code, properties=Properties(
            authentication_method=self.authenticator.method, authentication_data=data)), now)

    def _on_auth(self, packet: Any, now: float) -> None:
        auth = self.authenticator
        if auth is None:
            raise ProtocolError("AUTH", "AUTH to a Client whose CONNECT had no "
                                "Authentication Method", rule="MQTT-4.12.0-6")
        props = packet.properties
        method = props.authentication_method if props is not None else None
        if method != auth.method:
            raise ProtocolError("AUTH", f"Authentication Method {method!r} is not the "
                                f"CONNECT's {auth.method!r}", rule="MQTT-4.12.0-5")
        data = props.authentication_data if props is not None else None
        code = packet.reason_code
        if code == 0x18:
            if self.state is ClientState.CONNECTED and not self._reauthenticating:
                raise ProtocolError("AUTH", "AUTH 0x18 with no re-authentication in "
                                    "progress", rule="§4.12.1")
            try:
                answer = auth.challenge(data)
            except ValueError as exc:
                self._auth_failed(f"the server's challenge: {exc}", now)
                return
            self._send_auth(0x18, answer, now)  # [MQTT-4.12.0-3]
        elif code == 0x00 and self._reauthenticating:
            self._reauthenticating = False
            if not auth.finish(data):
                self._auth_failed("the server's final authentication data", now)
                return
            self._events.append(Reauthenticated(data))
        else:
            # The Server ends a first authentication with CONNACK, a re-authentication
            # with AUTH 0x00; it never sends 0x19 (§3.15.2.1, §4.12).
            raise ProtocolError("AUTH", f"AUTH 0x{code:02X} from the Server here",
                                rule="§4.12")

    def _auth_failed(self, what: str, now: float) -> None:
        """The server did not prove itself (or spoke nonsense): end the connection, with
        DISCONNECT 0x80 when allowed [MQTT-4.12.1-2] (before CONNACK only DISCONNECT or
        AUTH may be sent [MQTT-3.1.2-30], and DISCONNECT is)."""
        self._send(self.codec.Disconnect(reason_code=0x80), now)
        self._end(f"authentication failed: {what} was not accepted", reason_code=0x80)

    def data_to_send(self) -> bytes:
        """Take the bytes queued for the socket."""
        data = b"".join(self._output)
        self._output.clear()
        return data

    # Time ------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """When ``tick`` next has work: a PINGREQ to send, a PINGRESP or CONNACK overdue."""
        if self.state is ClientState.CONNECTING:
            return self._connect_sent + self.connect_timeout
        if self.state is not ClientState.CONNECTED:
            return None
        if self._ping_sent is not None:
            return self._ping_sent + self._ping_timeout()
        if self._effective_keep_alive:
            return self._last_sent + self._effective_keep_alive
        return None

    def _ping_timeout(self) -> float:
        if self.ping_timeout is not None:
            return self.ping_timeout
        return float(self._effective_keep_alive or 30)

    def tick(self, now: float) -> list[Event]:
        """Do what is due at ``now``."""
        if self.state is ClientState.CONNECTING:
            if now >= self._connect_sent + self.connect_timeout:
                self._end(f"no CONNACK within {self.connect_timeout} s")
        elif self.state is ClientState.CONNECTED:
            if self._ping_sent is not None:
                if now >= self._ping_sent + self._ping_timeout():
                    # 3.1.1 §3.1.2.10 / 5.0 §3.1.2.10: no PINGRESP in a reasonable time:
                    # close the network connection.
                    self._end("no PINGRESP from the server (keep-alive)")
            elif self._effective_keep_alive and \
                    now >= self._last_sent + self._effective_keep_alive:
                # [MQTT-3.1.2-20] (3.1.1 [MQTT-3.1.2-23]): nothing else sent for Keep
                # Alive seconds: PINGREQ.
                self._send(self.codec.PingReq(), now)
                self._ping_sent = now
        return self._take_events()

    # Requests --------------------------------------------------------------------------

    def publish(self, topic: str, payload: bytes = b"", *, qos: int = 0, retain: bool = False,
                properties: Properties | None = None, now: float) -> OutgoingMessage:
        """Queue a PUBLISH; it goes out now if the connection and the server's Receive
        Maximum allow [MQTT-3.3.4-7], else when they do.  Completion of QoS 1/2 comes as
        a ``PublishCompleted`` event."""
        if qos not in (0, 1, 2):
            raise SessionError(f"QoS must be 0, 1 or 2, not {qos!r}")
        self.codec.validate_topic_name(topic, version=self.version)
        if properties is not None and (properties.topic_alias is not None
                                       or properties.subscription_identifiers):
            raise SessionError("topic_alias is managed by the session, and a Client must not "
                               "send a Subscription Identifier [MQTT-3.3.4-6]")
        if self.connected:
            if qos > self._maximum_qos:
                raise SessionError(f"QoS {qos} is above the server's Maximum QoS "
                                   f"{self._maximum_qos} [MQTT-3.2.2-11]")
            if retain and not self._retain_available:
                raise SessionError("the server has no retained messages (Retain Available 0,"
                                   " [MQTT-3.2.2-14])")
        message = OutgoingMessage(topic, bytes(payload), qos, retain, properties)
        self._queue.append(message)
        self._pump(now)
        # Events this caused (a PublishCompleted for a packet too large for the server)
        # come with the next call that returns events.
        return message

    def subscribe(self, subscriptions: list[Any] | Any, *, properties: Properties | None = None,
                  now: float) -> int:
        """Send SUBSCRIBE (held until CONNACK while connecting); returns its packet
        identifier, which the ``SubscribeCompleted`` event carries."""
        subs = subscriptions if isinstance(subscriptions, list) else [subscriptions]
        subs = [s if isinstance(s, self.codec.Subscription) else
                self.codec.Subscription(s[0], qos=s[1]) if isinstance(s, tuple) else
                self.codec.Subscription(s) for s in subs]
        if not subs:
            raise SessionError("SUBSCRIBE needs at least one filter [MQTT-3.8.3-2]")
        for sub in subs:
            self.codec.validate_topic_filter(sub.topic_filter, version=self.version)
        pid = self._ids.allocate()
        self._requests[pid] = ("subscribe", len(subs))
        self._request(self.codec.Subscribe(pid, subs, properties=properties), now)
        return pid

    def unsubscribe(self, topic_filters: list[str] | str, *, now: float) -> int:
        """Send UNSUBSCRIBE; returns its packet identifier (``UnsubscribeCompleted``)."""
        filters = [topic_filters] if isinstance(topic_filters, str) else list(topic_filters)
        if not filters:
            raise SessionError("UNSUBSCRIBE needs at least one filter [MQTT-3.10.3-2]")
        pid = self._ids.allocate()
        self._requests[pid] = ("unsubscribe", len(filters))
        self._request(self.codec.Unsubscribe(pid, filters), now)
        return pid

    def _request(self, packet: Any, now: float) -> None:
        problem = None
        if self.state is ClientState.CONNECTED:
            if not self._send(packet, now):
                problem = ("larger than the server's Maximum Packet Size "
                           f"{self._server_max_packet} ([MQTT-3.2.2-15])")
        elif self.state is ClientState.CONNECTING:
            self._held.append(packet)
        else:
            problem = "not connected: call connect() first"
        if problem is not None:
            self._requests.pop(packet.packet_id, None)
            self._ids.release(packet.packet_id)
            raise SessionError(f"{type(packet).__name__.upper()} not sent: {problem}")

    def ack(self, message: ReceivedMessage, *, reason_code: int = 0, now: float) -> bool:
        """Acknowledge a received QoS 1/2 message (manual acknowledgement): PUBACK, or
        PUBREC for QoS 2 (then PUBCOMP follows PUBREL by itself).  Acknowledgements go
        out in the order the messages arrived ([MQTT-4.6.0-2], [MQTT-4.6.0-3]): this one
        may wait for earlier ones.  5.0 ``reason_code`` 0x80 or more refuses the message;
        one that a PUBACK (PUBREC) cannot carry raises :class:`SessionError`.

        Returns False when there is nothing to acknowledge: QoS 0, already acknowledged,
        or the session it came in was discarded (the server will send it again if it
        still has it).  While disconnected the acknowledgement waits for the next
        connection that resumes the session.
        """
        if message.qos == 0 or message.packet_id is None or message._epoch != self._epoch:
            return False
        entry = self._inbound.get(message._serial)
        if entry is None or entry.message is not message or entry.acked:
            return False
        if reason_code and self.version != 5:
            raise SessionError("acknowledgements carry no reason code before MQTT 5.0")
        # Checked here, not when the acknowledgement is encoded: by then the message would
        # be out of the session and never acknowledged.
        check_reason_code(PacketType.PUBACK if message.qos == 1 else PacketType.PUBREC,
                          reason_code)
        entry.acked = True
        entry.reason_code = reason_code
        self._flush_acks(now)
        return True

    # Input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[Event]:
        """Bytes read from the socket, in any chunking."""
        if self.state is ClientState.DISCONNECTED:
            return []
        error: MQTTWireError | None = None
        try:
            packets = self._decoder.feed(data)
        except MQTTWireError as exc:
            packets, error = exc.packets, exc
        for packet in packets:
            if not self._open():
                break
            self._handle(packet, now)
        if error is not None and self._open():
            self._protocol_error(error, now)
        return self._take_events()

    def receive_packet(self, packet: Any, now: float) -> list[Event]:
        """A packet decoded by the caller."""
        if self.state is not ClientState.DISCONNECTED:
            self._handle(packet, now)
        return self._take_events()

    # Internals -------------------------------------------------------------------------

    def _open(self) -> bool:
        return self.state is not ClientState.DISCONNECTED

    def _take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def _write(self, data: bytes, now: float) -> None:
        self._output.append(data)
        self._last_sent = now

    def _send(self, packet: Any, now: float) -> bool:
        data = packet.encode(self.version)
        if self._server_max_packet is not None and len(data) > self._server_max_packet:
            return False  # [MQTT-3.2.2-15]: never more than the server's maximum
        self._write(data, now)
        return True

    def _end(self, reason: str, *, reason_code: int | None = None, by_server: bool = False,
             error: MQTTWireError | None = None, lost: bool = False) -> None:
        """The connection is over.  We linger when we close first (our DISCONNECT, a
        timeout): the server may still be sending (``Disconnected.linger``)."""
        self.state = ClientState.DISCONNECTED
        # A SUBSCRIBE or UNSUBSCRIBE not answered on this connection never will be (only
        # PUBLISH and PUBREL are re-sent, [MQTT-4.4.0-1]): forget it, free its identifier.
        for pid in self._requests:
            self._ids.release(pid)
        self._requests.clear()
        self._held = []
        linger = 0.0 if by_server or lost else self.linger_timeout
        self._events.append(Disconnected(reason, reason_code, by_server, error, linger))

    def _protocol_error(self, error: MQTTWireError, now: float) -> None:
        """The server broke a rule: 5.0 sends DISCONNECT with the reason code first
        (§4.13), 3.x just closes."""
        code = None
        if self.version == 5 and self.state is ClientState.CONNECTED:
            code = disconnect_reason(error)
            self._send(self.codec.Disconnect(reason_code=code), now)
        self._end(f"protocol violation by the server: {error}", reason_code=code, error=error)

    def _handle(self, packet: Any, now: float) -> None:
        codec = self.codec
        try:
            if self.state is ClientState.CONNECTING:
                if isinstance(packet, codec.Auth):
                    self._on_auth(packet, now)  # enhanced authentication, before CONNACK
                    return
                if not isinstance(packet, codec.ConnAck):
                    raise ProtocolError(type(packet).__name__.upper(),
                                        "a packet before CONNACK", rule="MQTT-3.2.0-1")
                self._on_connack(packet, now)
            elif isinstance(packet, codec.Publish):
                self._on_publish(packet, now)
            elif isinstance(packet, codec.PubAck):
                self._on_puback(packet, now)
            elif isinstance(packet, codec.PubRec):
                self._on_pubrec(packet, now)
            elif isinstance(packet, codec.PubRel):
                self._on_pubrel(packet, now)
            elif isinstance(packet, codec.PubComp):
                self._on_pubcomp(packet, now)
            elif isinstance(packet, (codec.SubAck, codec.UnsubAck)):
                self._on_request_ack(packet)
            elif isinstance(packet, codec.PingResp):
                self._ping_sent = None
                if self._resending:
                    self._resent(now)
            elif isinstance(packet, codec.Disconnect):
                self._end(f"DISCONNECT 0x{packet.reason_code:02X} from the server",
                          reason_code=packet.reason_code, by_server=True)
            elif isinstance(packet, codec.ConnAck):
                raise ProtocolError("CONNACK", "a second CONNACK", rule="MQTT-3.2.0-2")
            elif isinstance(packet, codec.Auth):
                self._on_auth(packet, now)
            else:
                # CONNECT, SUBSCRIBE, UNSUBSCRIBE, PINGREQ go only from client to server.
                raise ProtocolError(type(packet).__name__.upper(),
                                    "a packet only a Client sends", rule="§2.1.2")
        except MQTTWireError as exc:
            self._protocol_error(exc, now)

    def _on_connack(self, packet: Any, now: float) -> None:
        self.connack = packet
        if packet.reason_code != 0:
            self._events.append(ConnectRefused(packet, packet.reason_code))
            self._end(f"CONNECT refused with 0x{packet.reason_code:02X}",
                      reason_code=packet.reason_code, by_server=True)
            return
        if packet.session_present and self._sent_clean_start:
            raise ProtocolError("CONNACK", "Session Present 1 after Clean Start 1",
                                rule="MQTT-3.2.2-2" if self.version == 5 else "MQTT-3.2.2-1")
        props = packet.properties
        method = props.authentication_method if props is not None else None
        if self.authenticator is not None:
            if method != self.authenticator.method:
                raise ProtocolError("CONNACK", f"Authentication Method {method!r} is not "
                                    f"the CONNECT's", rule="MQTT-4.12.0-5")
            if not self.authenticator.finish(props.authentication_data):
                self._auth_failed("the CONNACK's Authentication Data", now)
                return
        elif method is not None:
            raise ProtocolError("CONNACK", "an Authentication Method the CONNECT did not "
                                "have", rule="MQTT-4.12.0-6")
        self._send_window = 65535
        self._server_max_packet = None
        self._maximum_qos = 2
        self._retain_available = True
        self._effective_keep_alive = self.keep_alive
        if self.version == 5 and props is not None:
            if props.receive_maximum is not None:
                self._send_window = props.receive_maximum  # §3.2.2.3.3
            if props.maximum_packet_size is not None:
                self._server_max_packet = props.maximum_packet_size
            if props.maximum_qos is not None:
                self._maximum_qos = props.maximum_qos
            if props.retain_available is not None:
                self._retain_available = bool(props.retain_available)
            if props.server_keep_alive is not None:
                self._effective_keep_alive = props.server_keep_alive  # [MQTT-3.2.2-21]
            if props.assigned_client_identifier is not None:
                self.client_id = props.assigned_client_identifier
            if self.use_topic_aliases and props.topic_alias_maximum:
                self._aliases_out = OutboundAliases(props.topic_alias_maximum)
        self.state = ClientState.CONNECTED
        discarded: list[OutgoingMessage] = []
        present = bool(packet.session_present)
        if self.version == 3:
            # MQTT 3.1 has no Session Present flag: a Clean Session 0 connection is taken
            # to find its session.
            present = not self._sent_clean_start
        if not present and self._has_session:
            # No session on the server: ours is discarded too (§3.2.2.1.1).
            discarded = self._discard_session()
        self._has_session = True
        self._events.append(Connected(packet, present, self.client_id, discarded))
        # [MQTT-4.4.0-1]: re-send unacknowledged PUBLISHes (DUP 1) and PUBRELs with their
        # identifiers, in the original order [MQTT-4.6.0-1].
        for pid, message in self._inflight.items():
            if message.state == "released":
                self._send(self.codec.PubRel(pid), now)
            else:
                self._send_publish(message, pid, now, dup=True)
        for held in self._held:
            self._send(held, now)
        self._held = []
        if present and (self._inbound or self._awaiting_pubrel):
            # The server re-sends the PUBLISHes we have not acknowledged and the PUBRELs
            # we await [MQTT-4.4.0-1] right after CONNACK.  Their acknowledgements wait
            # for those copies, so that a copy arriving after our PUBACK is not taken for
            # a new message; a PINGREQ marks the end: its PINGRESP comes after everything
            # sent before it (then _resent).
            for entry in self._inbound.values():
                entry.present = False
            self._pubrel_due = set(self._awaiting_pubrel)
            self._resending = True
            self._send(self.codec.PingReq(), now)
            self._ping_sent = now
        self._flush_acks(now)
        self._pump(now)

    def _resent(self, now: float) -> None:
        """The server's re-sending after a resuming CONNACK is over (its PINGRESP came).
        What it did not send again it no longer holds for us: a message never sent again
        is forgotten, not acknowledged, and a PUBREL never sent again no longer awaited.
        Either identifier is free on the server's side and may be a new message's: a
        PUBACK or PUBREC for the old message would acknowledge that one, which we may not
        have received, and a new PUBLISH with it would be taken for a protocol error."""
        self._resending = False
        for serial, entry in [item for item in self._inbound.items() if not item[1].present]:
            del self._inbound[serial]
            self._forget(entry)
        self._awaiting_pubrel -= self._pubrel_due
        self._pubrel_due = set()
        self._flush_acks(now)

    def _discard_session(self) -> list[OutgoingMessage]:
        discarded = list(self._inflight.values())
        for message in discarded:
            message.state = "failed"
        self._inflight.clear()
        self._inbound.clear()
        self._holders.clear()
        self._awaiting_pubrel.clear()
        self._ids.keep_only(self._requests)
        self._epoch += 1
        return discarded

    # Our PUBLISHes ---------------------------------------------------------------------

    def _pump(self, now: float) -> None:
        if self.state is not ClientState.CONNECTED:
            return
        while self._queue:
            message = self._queue[0]
            if message.qos and len(self._inflight) >= self._send_window:
                return  # [MQTT-3.3.4-7]
            self._queue.popleft()
            if message.qos > self._maximum_qos or (message.retain and not self._retain_available):
                # Queued before this server said it does not allow it ([MQTT-3.2.2-11],
                # [MQTT-3.2.2-14]): dropped, with the code that says why.
                message.state = "failed"
                self._events.append(PublishCompleted(message, ReasonCode.QOS_NOT_SUPPORTED
                                                     if message.qos > self._maximum_qos
                                                     else ReasonCode.RETAIN_NOT_SUPPORTED))
                continue
            if message.qos == 0:
                message.state = "done" if self._send_publish(message, None, now) else "failed"
                continue
            pid = self._ids.allocate()
            if self._send_publish(message, pid, now):
                message.packet_id = pid
                message.state = "sent"
                self._inflight[pid] = message
            else:
                self._ids.release(pid)
                message.state = "failed"
                self._events.append(PublishCompleted(message, ReasonCode.PACKET_TOO_LARGE))

    def _send_publish(self, message: OutgoingMessage, pid: int | None, now: float,
                      dup: bool = False) -> bool:
        alias, with_topic = self._aliases_out.plan(message.topic)
        props = message.properties
        if alias is not None:
            items = dict(props.items()) if props is not None else {}
            items["topic_alias"] = alias
            props = Properties(**items)
        packet = self.codec.Publish(message.topic if with_topic else "", message.payload,
                                    qos=message.qos, retain=message.retain, dup=dup,
                                    packet_id=pid, properties=props)
        if not self._send(packet, now):
            return False
        if alias is not None:
            self._aliases_out.commit(message.topic, alias)
        return True

    def _complete(self, pid: int, reason_code: int, now: float) -> None:
        message = self._inflight.pop(pid)
        self._ids.release(pid)
        message.state = "done" if reason_code < 0x80 else "failed"
        self._events.append(PublishCompleted(message, reason_code))
        self._pump(now)

    def _on_puback(self, packet: Any, now: float) -> None:
        message = self._inflight.get(packet.packet_id)
        if message is not None and message.qos == 1:
            self._complete(packet.packet_id, packet.reason_code, now)

    def _on_pubrec(self, packet: Any, now: float) -> None:
        pid = packet.packet_id
        message = self._inflight.get(pid)
        if message is None or message.qos != 2:
            self._send(self.codec.PubRel(pid, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
                                         if self.version == 5 else 0), now)
            return
        if packet.reason_code >= 0x80:
            self._complete(pid, packet.reason_code, now)  # [MQTT-4.4.0-2]
            return
        message.state = "released"
        self._send(self.codec.PubRel(pid), now)  # [MQTT-4.3.3-4]

    def _on_pubcomp(self, packet: Any, now: float) -> None:
        message = self._inflight.get(packet.packet_id)
        if message is not None and message.state == "released":
            self._complete(packet.packet_id, packet.reason_code, now)

    def _on_request_ack(self, packet: Any) -> None:
        is_suback = isinstance(packet, self.codec.SubAck)
        kind = "subscribe" if is_suback else "unsubscribe"
        request = self._requests.get(packet.packet_id)
        if request is None or request[0] != kind:
            raise ProtocolError(type(packet).__name__.upper(),
                                f"packet identifier {packet.packet_id} answers no {kind.upper()}"
                                " of ours", rule="MQTT-3.8.4-2" if is_suback else "MQTT-3.10.4-4")
        codes = list(packet.reason_codes)
        if (is_suback or self.version == 5) and len(codes) != request[1]:
            raise ProtocolError(type(packet).__name__.upper(),
                                f"{len(codes)} reason codes for {request[1]} topic filters",
                                rule="MQTT-3.9.3-1" if is_suback else "§3.11.3")
        del self._requests[packet.packet_id]
        self._ids.release(packet.packet_id)
        if is_suback:
            self._events.append(SubscribeCompleted(packet.packet_id, codes))
        else:
            self._events.append(UnsubscribeCompleted(packet.packet_id, codes))

    # The server's PUBLISHes ------------------------------------------------------------

    def _on_publish(self, packet: Any, now: float) -> None:
        props = packet.properties
        topic = packet.topic
        if self.version == 5:
            # [MQTT-3.3.2-10]: aliases up to our Topic Alias Maximum; above: 0x94.
            topic = self._aliases_in.resolve(topic, props.topic_alias if props else None)
        pid = packet.packet_id
        if packet.qos == 0:
            self._events.append(MessageReceived(ReceivedMessage(packet, topic, self._epoch)))
            return
        holders = self._holders.get(pid)
        if holders or pid in self._awaiting_pubrel:
            # The copy a server sends again after a resuming CONNACK [MQTT-4.4.0-1], of
            # the earliest message with this identifier not yet sent again (the server
            # sends them again in their order).
            pending = next((e for e in holders if not e.present), holders[-1]) \
                if holders else None
            resent = not pending.present if pending is not None else pid in self._pubrel_due
            held_qos = pending.message.qos if pending is not None else 2
            if not self.tolerate_overrun or (resent and packet.dup and held_qos == packet.qos):
                self._publish_in_use(packet, pending, held_qos, now)
                return
            # An identifier in use by an exchange already seen on this connection: a new
            # message from a server with more than 65,535 in flight (tolerate_overrun).
            self.ids_reused += 1
        limit = self.receive_maximum if self.receive_maximum is not None else 65535
        if self.version == 5 and len(self._inbound) + len(self._awaiting_pubrel) >= limit:
            if not self.tolerate_overrun:
                # [MQTT-3.3.4-9] is the server's duty; exceeding it: DISCONNECT 0x93
                # (§3.3.4).
                raise ProtocolError(
                    "PUBLISH", f"more than Receive Maximum ({limit}) unacknowledged QoS 1/2 "
                    "PUBLISHes", rule="MQTT-3.3.4-9",
                    reason_code=ReasonCode.RECEIVE_MAXIMUM_EXCEEDED)
            self.receive_maximum_exceeded += 1
        self._received += 1
        message = ReceivedMessage(packet, topic, self._epoch, self._received)
        entry = self._inbound[self._received] = _Inbound(message)
        self._holders.setdefault(pid, []).append(entry)
        self._events.append(MessageReceived(message))
        if self.auto_ack:
            entry.acked = True
            self._flush_acks(now)

    def _publish_in_use(self, packet: Any, pending: _Inbound | None, held_qos: int,
                        now: float) -> None:
        """A PUBLISH whose identifier a received message holds (``pending``), or a QoS 2
        exchange awaiting PUBREL (``pending`` None): a copy sent again, or an error."""
        pid = packet.packet_id
        if held_qos != packet.qos:
            # §2.2.1: a new PUBLISH needs an identifier that is not in use.
            raise ProtocolError("PUBLISH", f"QoS {packet.qos} PUBLISH with packet "
                                f"identifier {pid}, in use by a QoS {held_qos} message",
                                rule="§2.2.1")
        if not packet.dup:
            # A re-sent PUBLISH has DUP 1 [MQTT-3.3.1-1]; a new one needs an unused
            # identifier (5.0 [MQTT-2.2.1-4], 3.1.1 [MQTT-2.3.1-4]).  Taking it for
            # a re-send would lose the new message without a word.
            raise ProtocolError(
                "PUBLISH", f"new PUBLISH (DUP 0) with packet identifier {pid}, in use "
                "by a message not yet acknowledged",
                rule="MQTT-2.2.1-4" if self.version == 5 else "MQTT-2.3.1-4")
        if pending is None:
            self._pubrel_due.discard(pid)  # the server holds it: its PUBREL will come
            self._send(self.codec.PubRec(pid), now)  # [MQTT-4.3.3-10]
        elif not pending.present:
            pending.present = True
            self._flush_acks(now)
        # else sent again before we acknowledged it: not delivered twice

    def _forget(self, entry: _Inbound) -> None:
        """``entry`` has left ``_inbound``: its identifier's holder no more."""
        pid = entry.message.packet_id
        assert pid is not None  # QoS 1/2
        holders = self._holders[pid]
        holders.remove(entry)
        if not holders:
            del self._holders[pid]

    def _flush_acks(self, now: float) -> None:
        """Send the acknowledgements that are ready, in arrival order: stop at the first
        message the application has not acknowledged yet."""
        if self.state is not ClientState.CONNECTED:
            return
        while self._inbound:
            serial, entry = next(iter(self._inbound.items()))
            if not (entry.acked and entry.present):
                return
            pid = entry.message.packet_id
            assert pid is not None  # QoS 1/2
            if pid in self._awaiting_pubrel:
                # tolerate_overrun: a QoS 2 exchange with this identifier is still open
                # (our PUBREC sent, its PUBREL not yet come): the server would take this
                # acknowledgement for that message.  It goes after our PUBCOMP.
                return
            del self._inbound[serial]
            self._forget(entry)
            code = entry.reason_code
            if entry.message.qos == 1:
                self._send(self.codec.PubAck(pid, reason_code=code), now)  # [MQTT-4.3.2-4]
            else:
                self._send(self.codec.PubRec(pid, reason_code=code), now)  # [MQTT-4.3.3-8]
                if code < 0x80:
                    self._awaiting_pubrel.add(pid)  # else [MQTT-4.3.3-9]: done

    def _on_pubrel(self, packet: Any, now: float) -> None:
        pid = packet.packet_id
        if pid in self._awaiting_pubrel:
            self._awaiting_pubrel.discard(pid)
            self._pubrel_due.discard(pid)
            self._send(self.codec.PubComp(pid), now)  # [MQTT-4.3.3-11]
            self._flush_acks(now)  # an acknowledgement may wait for this identifier
        else:
            self._send(self.codec.PubComp(pid, reason_code=ReasonCode.PACKET_IDENTIFIER_NOT_FOUND
                                          if self.version == 5 else 0), now)
