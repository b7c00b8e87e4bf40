#!/usr/bin/env python3
"""A small MQTT broker: asyncio sockets around mqttwire's sans-I/O session layer.

Everything MQTT is ``mqttwire.session.Broker``'s (docs/session.md): protocol levels 3, 4
and 5 per connection; QoS 0, 1 and 2 both ways, re-sent on a resumed session; retained
messages; wildcard, overlapping and shared subscriptions and the 5.0 subscription
options; wills with the 5.0 Will Delay Interval; keep-alive, with a Server Keep Alive
cap; clean and persistent sessions with Session Expiry; message expiry; Receive Maximum,
Maximum Packet Size and Topic Aliases both ways; properties forwarded intact.  This file
is only the glue: it accepts connections (over TLS with ``--certfile``), feeds what they
read to the broker, writes what the broker queued, closes the sockets it says to close
(lingering first when it says so: ``Outgoing.linger``), and calls ``tick`` when
``next_deadline`` comes.  The options set the broker's limits, a subscribe deny rule,
and who may connect and do what: Mosquitto's own password and ACL files
(``--password-file``, ``--acl-file``, read by ``mqttwire.session.mosquitto_files``), TLS
client certificates, and SCRAM-SHA-256 enhanced authentication (``--scram-user``).

Memory is bounded by policy (docs/session.md, "Bounds"): each transport's write buffer
has the broker's ``max_unwritten_bytes`` as its high-water mark, and after every write
(and when a paused transport resumes) the glue tells the connection how many bytes the
transport still holds (``ServerConnection.set_unwritten``), so that QoS 0 messages to a
client that does not read are dropped and QoS 1/2 ones wait, within the session's queue
bounds, instead of piling up in the socket's buffer.

Left out: persistence.

Run it with ``python examples/broker.py --host 127.0.0.1 --port 1883`` (port 0 picks a
free one).  The first line it prints is ``listening on HOST:PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
from collections.abc import Callable
from typing import Any

import mqttwire as mw
from mqttwire.session import (
    Accept,
    AuthRequest,
    Broker,
    BrokerConfig,
    ClientConnected,
    ClientReauthenticated,
    ClientRefused,
    ClientSubscribed,
    ConnectionClosed,
    ConnectionInfo,
    DeliveriesDropped,
    Event,
    Refuse,
    ServerConnection,
    SessionExpired,
    WillPublished,
)
from mqttwire.session.auth import Authenticate, AuthResult
from mqttwire.session.mosquitto_files import AclFile, MosquittoFileError, PasswordFile
from mqttwire.session.scram import METHOD as SCRAM
from mqttwire.session.scram import ScramCredentials, ScramServer

log = logging.getLogger("broker")


def levels(topic_filter: str) -> list[str]:
    """The levels of a topic filter, a shared subscription's ``$share/{group}/`` aside."""
    if topic_filter.startswith("$share/"):
        topic_filter = topic_filter.split("/", 2)[2]
    return topic_filter.split("/")


def overlap(a: str, b: str) -> bool:
    """Whether some topic name matches both topic filters (the ``--deny`` rule)."""
    la, lb = levels(a), levels(b)
    for x, y in ((la[0], lb[0]), (lb[0], la[0])):
        if x in ("+", "#") and y.startswith("$"):
            return False  # a wildcard first level matches no $ topic [MQTT-4.7.2-1]
    for x, y in zip(la, lb):
        if "#" in (x, y):
            return True
        if x != y and "+" not in (x, y):
            return False
    return (la[len(lb):] or lb[len(la):]) in ([], ["#"])  # "a/#" matches "a"


class Server:
    """The broker and the sockets of its connections, on one event loop."""

    def __init__(self, config: BrokerConfig) -> None:
        self.broker = Broker(config)
        self.loop = asyncio.get_running_loop()
        self.transports: dict[ServerConnection, asyncio.Transport] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.deadline: float | None = None
        #: Connections closed by the server that are lingering, each until its end.
        self.lingering: set[asyncio.Future[None]] = set()

    def flush(self, events: list[Event]) -> None:
        """After every call into the broker: log, write, close, re-arm the timer."""
        now = self.loop.time()
        while True:
            if log.isEnabledFor(logging.INFO):
                for event in events:
                    describe(event)
            outgoing = self.broker.outgoing()
            if not outgoing:
                break
            events = []
            for out in outgoing:
                transport = self.transports.get(out.connection)
                if transport is None:
                    continue
                if out.data:
                    transport.write(out.data)
                if out.close:
                    del self.transports[out.connection]
                    self.close(transport, out.linger)  # after the data written above
                else:
                    # What the transport could not hand to the socket yet counts against
                    # the connection's bound (an Outgoing with no data: the connection
                    # asks for this report); with room, its queued messages come out
                    # at once (hence the loop: until no connection has more).
                    events += out.connection.set_unwritten(
                        transport.get_write_buffer_size(), now)
        deadline = self.broker.next_deadline()
        if deadline != self.deadline:
            if self.timer is not None:
                self.timer.cancel()
            self.deadline = deadline
            self.timer = None if deadline is None else self.loop.call_at(deadline, self.tick)

    def close(self, transport: asyncio.Transport, linger: float) -> None:
        """Close a connection, lingering when the broker says so (``Outgoing.linger``):
        the client may still be writing, and a socket closed with unread input, or that
        input reaches after it closed, answers with a TCP reset that can make the client
        fail before it reads the DISCONNECT (or the refusing CONNACK) written last.  So
        shut the write side (FIN after what is queued), let the protocol read and discard
        (Connection.data_received) until the client closes (eof_received), and close
        for good after ``linger`` seconds at most."""
        protocol = transport.get_protocol()
        if not linger or not transport.can_write_eof() or not isinstance(protocol, Connection):
            transport.close()
            return
        transport.write_eof()
        protocol.lingered = self.loop.create_future()
        self.lingering.add(protocol.lingered)
        protocol.lingered.add_done_callback(self.lingering.discard)
        # abort(), not close(): close() would wait for a client that reads nothing to
        # take what is still queued.
        protocol.linger_timer = self.loop.call_later(linger, transport.abort)

    async def drain(self) -> None:
        """Wait for the lingering connections to end (at shutdown)."""
        if self.lingering:
            await asyncio.wait(list(self.lingering))

    def tick(self) -> None:
        self.timer = self.deadline = None
        self.flush(self.broker.tick(self.loop.time()))


class Connection(asyncio.Protocol):
    """One client's socket: bytes in to its ``ServerConnection``, out via the server."""

    def __init__(self, server: Server) -> None:
        self.server = server
        #: Set by Server.close when the broker closed the connection and it lingers.
        self.lingered: asyncio.Future[None] | None = None
        self.linger_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        tls = transport.get_extra_info("ssl_object") is not None
        subject = certificate_subject(transport.get_extra_info("peercert"))
        info = ConnectionInfo(f"{peer[0]}:{peer[1]}" if peer else None, subject, tls)
        self.conn = self.server.broker.new_connection(self.server.loop.time(), info=info)
        self.server.transports[self.conn] = transport
        self.transport = transport
        # The transport pauses us (pause_writing) at the connection's bound (asyncio
        # pauses above ``high``; the layer is behind at the bound itself), and resumes
        # us when it has written down to a quarter of it.
        bound = self.server.broker.config.max_unwritten_bytes
        transport.set_write_buffer_limits(high=bound - 1, low=bound // 4)
        self.server.flush([])  # the CONNECT timeout is a deadline

    def data_received(self, data: bytes) -> None:
        if self.lingered is not None:
            return  # closed by the broker: read and discarded while lingering
        self.server.flush(self.conn.receive_data(data, self.server.loop.time()))

    def resume_writing(self) -> None:
        """The transport's buffer drained to its low-water mark: tell the connection,
        whose queued messages can go out now."""
        if self.lingered is None and not self.conn.closed:
            self.server.flush(self.conn.set_unwritten(
                self.transport.get_write_buffer_size(), self.server.loop.time()))

    def eof_received(self) -> bool | None:
        return None  # the client closed its side: the transport closes ours (lingering or not)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.lingered is not None:
            if self.linger_timer is not None:
                self.linger_timer.cancel()
            if not self.lingered.done():
                self.lingered.set_result(None)
            return  # the broker closed it already
        self.server.transports.pop(self.conn, None)
        self.server.flush(self.conn.connection_lost(self.server.loop.time()))


def certificate_subject(cert: dict[str, Any] | None) -> str | None:
    """A verified client certificate's subject as ``CN=...,O=...`` (in the certificate's
    order), or None (no TLS, no certificate)."""
    if not cert or "subject" not in cert:
        return None
    return ",".join(f"{_SHORT.get(k, k)}={v}" for rdn in cert["subject"] for k, v in rdn)


_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
          "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
          "emailAddress": "emailAddress"}


def common_name(subject: str | None) -> str | None:
    """The CN of a subject made by ``certificate_subject``."""
    for part in (subject or "").split(","):
        if part.startswith("CN="):
            return part[3:]
    return None


def make_authenticate(passwords: PasswordFile | None, scram_users: dict[str, ScramCredentials],
                      use_identity_as_username: bool) -> Authenticate | None:
    """The ``authenticate`` hook of the options: SCRAM-SHA-256 for CONNECTs with that
    method, the password file for the others (none: everyone), and with
    ``--use-identity-as-username`` the certificate's CN as user name (Mosquitto's
    option: the CONNECT's user name and password are then ignored, and a connection
    without a certificate is refused)."""

    def plain(request: AuthRequest) -> AuthResult:
        if use_identity_as_username:
            name = common_name(request.connection.certificate_subject)
            if name is None:
                return Refuse(0x87, "no client certificate to take the user name from")
            return Accept(username=name)
        if passwords is not None:
            return passwords(request)
        return Accept()

    if scram_users:
        return ScramServer(scram_users, fallback=plain)
    if passwords is None and not use_identity_as_username:
        return None
    return plain


def describe(event: Event) -> None:
    """The log line of a server event (``--verbose``)."""
    if isinstance(event, ClientConnected):
        log.info("%s: %s connected at level %d%s", event.connection.name, event.client_id,
                 event.version, " (session resumed)" if event.session_present else "")
    elif isinstance(event, ClientReauthenticated):
        log.info("%s: %s re-authenticated as %s", event.connection.name, event.client_id,
                 event.principal.username)
    elif isinstance(event, ClientRefused):
        log.info("%s: CONNECT refused with 0x%02X: %s", event.connection.name,
                 event.reason_code, event.reason)
    elif isinstance(event, ClientSubscribed) and any(c >= 0x80 for c in event.reason_codes):
        log.info("%s: %s: SUBACK %s", event.connection.name, event.client_id,
                 " ".join(f"0x{c:02X}" for c in event.reason_codes))
    elif isinstance(event, ConnectionClosed):
        log.info("%s: %s closed: %s", event.connection.name, event.client_id or "client",
                 event.reason)
    elif isinstance(event, WillPublished):
        log.info("%s: will published to %s", event.client_id, event.message.topic)
    elif isinstance(event, SessionExpired):
        log.info("%s: session ended", event.client_id)
    elif isinstance(event, DeliveriesDropped):
        log.info("%s: dropping messages (%s), %d so far", event.client_id, event.reason,
                 event.total)


class CannotListen(Exception):
    """The listening socket could not be opened (the port taken, an unknown host, ...)."""


async def serve(host: str, port: int, config: BrokerConfig,
                tls: ssl.SSLContext | None = None) -> None:
    server = Server(config)
    try:
        listener = await server.loop.create_server(lambda: Connection(server), host, port,
                                                   ssl=tls)
    except OSError as exc:  # socket.gaierror included
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    address = listener.sockets[0].getsockname()
    # The first line tells whoever started us where we listen (port 0 picks a free one).
    print(f"listening on {address[0]}:{address[1]}", flush=True)
    print(f"mqttwire implementation: {mw.IMPLEMENTATION}", flush=True)
    try:
        async with listener:
            await listener.serve_forever()
    finally:  # 5.0 clients get DISCONNECT 0x8B Server shutting down
        server.flush(server.broker.shutdown(server.loop.time()))
        await server.drain()  # at most BrokerConfig.linger_timeout


#: The bounds options, one per BrokerConfig field: (field, type, metavar, help).  The
#: option is the field's name with dashes ("--max-queued-messages"), its default the
#: field's default.
BOUNDS: tuple[tuple[str, Callable[[str], Any], str, str], ...] = (
    ("max_unwritten_bytes", int, "BYTES",
     "bytes waiting to be written to one client past which QoS 0 messages to it are "
     "dropped (%(default)s)"),
    ("max_unwritten_messages", int, "N", "the same bound in PUBLISH packets (%(default)s)"),
    ("max_queued_messages", int, "N",
     "messages queued per session, past which new ones are dropped (%(default)s; 0: no "
     "bound)"),
    ("max_queued_bytes", int, "BYTES",
     "payload bytes queued per session (%(default)s; 0: no bound)"),
    ("write_stall_timeout", float, "SECONDS",
     "disconnect a client over its unwritten bound this long (%(default)s; 0: never)"),
    ("max_session_expiry", int, "SECONDS",
     "cap on the Session Expiry Interval (default: none)"),
)
#: The fields whose 0 on the command line means None in BrokerConfig (no bound).
ZERO_IS_NONE = frozenset({"max_queued_messages", "max_queued_bytes", "write_stall_timeout"})


def port_number(text: str) -> int:
    """``--port``: a TCP port, 0 to 65535.  Checked here, so that a port out of range is a
    usage error like one that is not a number (socket.bind would raise OverflowError)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (0 to 65535)")
    return port


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=1883,
                        help="0 to 65535; 0 picks a free port")
    parser.add_argument("-v", "--verbose", action="store_true", help="log connections")
    parser.add_argument("--max-keep-alive", type=int, metavar="SECONDS",
                        help="cap a 5.0 client's Keep Alive (CONNACK Server Keep Alive)")
    parser.add_argument("--topic-alias-maximum", type=int, default=16, metavar="N",
                        help="Topic Aliases a 5.0 client may use (default 16; 0: none)")
    parser.add_argument("--no-assign-aliases", action="store_true",
                        help="never assign Topic Aliases to 5.0 clients that allow them")
    parser.add_argument("--receive-maximum", type=int, default=64, metavar="N",
                        help="unacknowledged QoS 2 PUBLISHes a 5.0 client may send (64)")
    parser.add_argument("--max-packet-size", type=int, default=1 << 20, metavar="BYTES",
                        help="largest packet accepted (1 MiB)")
    parser.add_argument("--deny", action="append", default=[], metavar="FILTER",
                        help="refuse subscriptions that can match a topic FILTER matches "
                        "(SUBACK 0x87, 3.1.1: 0x80); repeatable")
    bounds = parser.add_argument_group(
        "bounds", "memory and what the server offers (docs/session.md, \"Bounds\")")
    defaults = BrokerConfig()
    for field, kind, metavar, text in BOUNDS:
        # The option is the field's name, its default the field's own.
        bounds.add_argument("--" + field.replace("_", "-"), type=kind, metavar=metavar,
                            default=getattr(defaults, field), help=text)
    bounds.add_argument("--max-qos", type=int, choices=(0, 1, 2), default=2,
                        help="Maximum QoS accepted and granted (2)")
    bounds.add_argument("--no-retain", action="store_true",
                        help="no retained messages (Retain Available 0)")
    access = parser.add_argument_group("who may connect and do what (Mosquitto's files)")
    access.add_argument("--password-file", metavar="FILE",
                        help="Mosquitto password file (mosquitto_passwd: $7$ or $6$ hashes)")
    access.add_argument("--allow-anonymous", action="store_true",
                        help="with --password-file: accept CONNECTs without a user name "
                        "(Mosquitto's allow_anonymous true)")
    access.add_argument("--acl-file", metavar="FILE",
                        help="Mosquitto ACL file: who may publish to and read which topics")
    access.add_argument("--scram-user", action="append", default=[], metavar="USER:PASSWORD",
                        help="accept 5.0 enhanced authentication SCRAM-SHA-256 for USER; "
                        "repeatable (a demonstration: a deployment stores its users' "
                        "ScramCredentials, never passwords)")
    tls = parser.add_argument_group("TLS (as Mosquitto's listener options)")
    tls.add_argument("--certfile", metavar="PEM", help="server certificate: listen with TLS")
    tls.add_argument("--keyfile", metavar="PEM", help="server private key")
    tls.add_argument("--cafile", metavar="PEM",
                     help="CA certificates that client certificates are verified against")
    tls.add_argument("--require-certificate", action="store_true",
                     help="refuse TLS clients without a valid certificate (needs --cafile)")
    tls.add_argument("--use-identity-as-username", action="store_true",
                     help="the client certificate's CN is the user name (needs "
                     "--require-certificate); user names and passwords are ignored")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(message)s")
    for topic_filter in args.deny:
        try:
            mw.validate_topic_filter(topic_filter)
        except mw.MQTTWireError as exc:
            parser.error(f"--deny {topic_filter!r}: {exc}")
    denied: list[str] = args.deny
    try:
        passwords = PasswordFile.load(args.password_file, allow_anonymous=args.allow_anonymous) \
            if args.password_file else None
        acl = AclFile.load(args.acl_file) if args.acl_file else None
    except (OSError, MosquittoFileError) as exc:
        parser.error(str(exc))
    scram_users: dict[str, ScramCredentials] = {}
    for item in args.scram_user:
        name, sep, password = item.partition(":")
        if not sep or not name:
            parser.error(f"--scram-user {item!r}: not USER:PASSWORD")
        scram_users[name] = ScramCredentials.from_password(password)
    context = None
    if args.certfile or args.keyfile or args.cafile or args.require_certificate:
        if not args.certfile:
            parser.error("TLS needs --certfile (and --keyfile unless the key is in it)")
        if (args.require_certificate or args.use_identity_as_username) and not args.cafile:
            parser.error("--require-certificate needs --cafile to verify certificates with")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(args.certfile, args.keyfile)
            if args.cafile:
                context.load_verify_locations(args.cafile)
        except (OSError, ssl.SSLError) as exc:
            parser.error(f"TLS: {exc}")
        if args.cafile:
            context.verify_mode = ssl.CERT_REQUIRED if args.require_certificate else \
                ssl.CERT_OPTIONAL
    if args.use_identity_as_username and not args.require_certificate:
        parser.error("--use-identity-as-username needs --require-certificate")
    bound_values: dict[str, Any] = {
        field: (getattr(args, field) or None) if field in ZERO_IS_NONE else getattr(args, field)
        for field, *_ in BOUNDS}
    try:
        config = BrokerConfig(
            max_keep_alive=args.max_keep_alive,
            topic_alias_maximum=args.topic_alias_maximum,
            assign_topic_aliases=not args.no_assign_aliases,
            receive_maximum=args.receive_maximum,
            max_packet_size=args.max_packet_size,
            **bound_values,
            maximum_qos=args.max_qos,
            retain_available=not args.no_retain,
            deny_subscription=(lambda client_id, sub: any(
                overlap(d, sub.topic_filter) for d in denied)) if denied else None,
            authenticate=make_authenticate(passwords, scram_users,
                                           args.use_identity_as_username),
            authentication_methods=frozenset({SCRAM} if scram_users else ()),
            authorize_publish=acl.may_publish if acl is not None else None,
            authorize_delivery=acl.may_read if acl is not None else None,
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        asyncio.run(serve(args.host, args.port, config, context))
    except KeyboardInterrupt:
        pass
    except CannotListen as exc:  # not a usage error: the same command may work later
        print(f"{parser.prog}: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
