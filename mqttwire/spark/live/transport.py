"""The live source's connection to its broker: plain TCP, TLS, MQTT over WebSocket, or
WebSocket over TLS, behind one small interface (:class:`Transport`) for the subscriber
(:mod:`.subscriber`): send all, receive what is there, wait until readable, close with
linger.

:meth:`Endpoint.open` connects and completes the TLS and WebSocket handshakes.  The
layers are sans-I/O: TLS is the standard library's :class:`ssl.SSLObject` over memory
buffers, and the WebSocket is the ``websockets`` package's
:class:`websockets.client.ClientProtocol` (framing, masking, ping and close are the
library's).  Only the socket does I/O.  So two threads can use a link at once, as the
subscriber does (its thread reads while the caller's thread sends acknowledgements), which
an :class:`ssl.SSLSocket` does not promise: OpenSSL's reads and writes of one connection
are not safe in parallel.  And nothing stays decrypted and unread inside the SSL object
after :meth:`Transport.receive` (it drains every record it can decrypt), so a ``select()`` on
the socket says truly whether more is to come; what a handshake read beyond itself is
kept and reported readable at once (:meth:`Transport.wait_readable`).

Errors say which part failed: :class:`TransportError` (a :class:`ConnectionError`) with the
certificate check, the host name, the client certificate the broker wants or refused,
the WebSocket handshake, or a rule of MQTT over WebSocket ([MQTT-6.0.0-1], [MQTT-6.0.0-4]).
"""

from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from websockets.client import ClientProtocol
    from websockets.frames import Frame

__all__ = ["SCHEMES", "Endpoint", "InsecureTLSWarning", "TlsOptions", "Transport",
           "TransportError"]

#: URL scheme -> (TLS, WebSocket, default port).  ws and wss default to HTTP's ports, as
#: their URLs do (RFC 6455 §3); mqtts and ssl to MQTT's TLS port (IANA: 8883).
SCHEMES: dict[str, tuple[bool, bool, int]] = {
    "mqtt": (False, False, 1883), "tcp": (False, False, 1883),
    "mqtts": (True, False, 8883), "ssl": (True, False, 8883),
    "ws": (False, True, 80), "wss": (True, True, 443),
}

_CHUNK = 1 << 16


class TransportError(ConnectionError):
    """The connection could not be made, or broke: what and where."""


class InsecureTLSWarning(UserWarning):
    """``tlsInsecure``: the broker's certificate and host name are not checked."""


@dataclass(frozen=True)
class TlsOptions:
    """How to check the broker and how to present ourselves: ``ca_file`` (PEM; default:
    the system's CA store), ``cert_file`` and ``key_file`` (mutual TLS; the key may be in
    ``cert_file``), ``key_password`` (an encrypted key's), ``insecure`` (no checks at
    all: for tests only)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    insecure: bool = False

    def check(self) -> None:
        """Raise ValueError for options that cannot work, naming the option."""
        if self.key_file and not self.cert_file:
            raise ValueError("mqtt source: option keyFile needs certFile (the client "
                             "certificate that the key belongs to)")
        if self.key_password is not None and not self.cert_file:
            raise ValueError("mqtt source: option keyPassword needs certFile and keyFile "
                             "(the encrypted key it opens)")
        for name, path in (("caFile", self.ca_file), ("certFile", self.cert_file),
                           ("keyFile", self.key_file)):
            if path is not None and not os.path.isfile(path):
                raise ValueError(f"mqtt source: option {name}: no such file {path!r}")
        self.context()  # the files' contents

    def context(self) -> ssl.SSLContext:
        """The client context: TLS 1.2 or newer, the broker's certificate checked against
        ``ca_file`` or the system's CA store, its host name checked (unless
        ``insecure``), our certificate presented if given."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED, check_hostname
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.insecure:
            warnings.warn("mqtt source: tlsInsecure=true: the broker's certificate and host "
                          "name are not checked, anyone on the path can read and change "
                          "the traffic; for tests only", InsecureTLSWarning, stacklevel=2)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif self.ca_file:
            try:
                ctx.load_verify_locations(cafile=self.ca_file)
            except ssl.SSLError as exc:
                raise ValueError(f"mqtt source: option caFile {self.ca_file!r} holds no "
                                 f"usable CA certificate (PEM): {exc}") from None
        else:
            ctx.load_default_certs()
        if self.cert_file:
            self._load_chain(ctx)
        return ctx

    def _load_chain(self, ctx: ssl.SSLContext) -> None:
        assert self.cert_file is not None
        where = f"certFile {self.cert_file!r}" + (
            f", keyFile {self.key_file!r}" if self.key_file else "")
        key = self.key_file or self.cert_file
        encrypted = _encrypted(key)

        def password() -> str:
            # Without a callback OpenSSL would ask on the terminal for an encrypted key.
            if self.key_password is None:
                raise ValueError(f"mqtt source: the client key ({where}) is encrypted: "
                                 "set option keyPassword")
            return self.key_password

        try:
            ctx.load_cert_chain(self.cert_file, self.key_file, password=password)
        except ssl.SSLError as exc:
            if encrypted and self.key_password is not None:
                why = "option keyPassword does not open the encrypted key"
            elif exc.reason == "KEY_VALUES_MISMATCH":
                why = "the key is not the certificate's"
            else:
                why = "not a PEM certificate and private key"
            raise ValueError(f"mqtt source: cannot load the client certificate ({where}): "
                             f"{why} ({exc})") from None


def _encrypted(path: str) -> bool:
    """Whether the PEM file holds an encrypted private key (PKCS #8 or OpenSSL's own)."""
    try:
        with open(path, "rb") as f:
            text = f.read(1 << 20)
    except OSError:
        return False
    return b"ENCRYPTED PRIVATE KEY" in text or b"Proc-Type: 4,ENCRYPTED" in text


@dataclass(frozen=True)
class Endpoint:
    """Where the broker is and how to reach it: ``tls`` if TLS, ``ws_path`` (the path and
    query of a ws:// or wss:// URL) if MQTT travels over a WebSocket."""

    host: str
    port: int
    tls: TlsOptions | None = None
    ws_path: str | None = None

    @property
    def scheme(self) -> str:
        if self.ws_path is not None:
            return "wss" if self.tls else "ws"
        return "mqtts" if self.tls else "mqtt"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.ws_path or ''}"

    def __str__(self) -> str:
        return self.url

    def open(self, timeout: float) -> Transport:
        """Connect, and complete the TLS and WebSocket handshakes, each step bounded by
        ``timeout`` seconds; raise :class:`TransportError` (an OSError) saying which failed."""
        try:
            context = self.tls.context() if self.tls else None
        except ValueError as exc:
            raise TransportError(str(exc)) from None
        try:
            sock = socket.create_connection((self.host, self.port), timeout)
        except OSError as exc:
            raise TransportError(f"cannot connect to {self.host}:{self.port}: "
                                 f"{exc.strerror or exc}") from None
        transport = Transport(sock, self)
        try:
            if context is not None:
                transport._start_tls(context)
            if self.ws_path is not None:
                transport._start_websocket()
        except BaseException:
            sock.close()
            raise
        return transport


class Transport:
    """An open connection: bytes in and out of MQTT's byte stream, whatever carries it.
    Safe for one reading thread and one or more sending threads at once."""

    def __init__(self, sock: socket.socket, endpoint: Endpoint) -> None:
        self.sock = sock
        self.endpoint = endpoint
        self._lock = threading.Lock()  # the TLS and WebSocket state, and sending
        self._tls: ssl.SSLObject | None = None
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        self._ws: ClientProtocol | None = None
        self._ws_text = False  # the WebSocket message under way is text
        self._pending = bytearray()  # MQTT bytes read during a handshake, not yet returned
        self._ended = False  # the peer ended the stream (TCP, TLS close_notify, WS close)
        self._received_any = False  # any MQTT bytes arrived (see _tls_failure)

    def __repr__(self) -> str:
        tls = f" {self._tls.version()}" if self._tls is not None else ""
        return f"<Transport {self.endpoint.url}{tls}{' ended' if self._ended else ''}>"

    # -- what the subscriber uses ---------------------------------------------------------

    def fileno(self) -> int:
        return self.sock.fileno()

    def settimeout(self, timeout: float | None) -> None:
        """The socket's timeout for sending (and the rare read that blocks)."""
        self.sock.settimeout(timeout)

    def wait_readable(self, timeout: float) -> bool:
        """Whether :meth:`receive` has something (bytes, or the end) within ``timeout``
        seconds: at once if a handshake left bytes over."""
        if self._pending or self._ended:
            return True
        readable, _, _ = select.select([self.sock], [], [], timeout)
        return bool(readable)

    def receive(self) -> bytes | None:
        """After :meth:`wait_readable`: the MQTT bytes that arrived; ``b""`` once the
        broker has ended the connection; None if what arrived carried no MQTT bytes (a
        part of a TLS record, a WebSocket ping)."""
        if self._pending:
            with self._lock:
                data, self._pending = bytes(self._pending), bytearray()
            return data
        if self._ended:
            return b""
        try:
            raw = self.sock.recv(_CHUNK)
        except (ConnectionResetError, BrokenPipeError):
            if self._tls is not None and not self._received_any:
                raise self._tls_failure(None) from None
            raise
        if self._tls is None and self._ws is None:
            self._received_any = self._received_any or bool(raw)
            return raw
        with self._lock:
            data = self._unwrap(raw)
        if data:
            self._received_any = True
            return data
        return b"" if self._ended else None

    def send_all(self, data: bytes) -> None:
        """Send ``data`` (MQTT bytes) whole: in one binary WebSocket message, encrypted."""
        with self._lock:
            if self._ws is not None:
                from websockets.protocol import State

                if self._ws.state is not State.OPEN:
                    raise TransportError(f"the WebSocket to {self.endpoint.url} is "
                                         f"{self._ws.state.name.lower()}")
                self._ws.send_binary(data)
                data = b"".join(self._ws.data_to_send())
            try:
                self._send_wire(data)
            except (ConnectionResetError, BrokenPipeError):
                if self._tls is not None and not self._received_any:
                    raise self._tls_failure(None) from None  # what the reset means
                raise

    def close(self, linger: float = 0.0) -> None:
        """Close: the WebSocket's close frame and TLS's close_notify first, then, when
        ``linger`` says so (the session's ``Disconnected.linger``), shut the write side
        and read and discard until the broker closes or ``linger`` seconds pass.  The
        broker may still be sending (messages, while it has not read our DISCONNECT), and
        a socket closed with unread input answers with a TCP reset, on which a broker can
        drop the connection before it reads the DISCONNECT (Mosquitto then reports the
        client "closed its connection" and publishes its will)."""
        sock = self.sock
        try:
            with self._lock:
                if self._ws is not None and not self._ended:
                    from websockets.protocol import State

                    if self._ws.state is State.OPEN:
                        self._ws.send_close(1000)  # normal closure (RFC 6455 §7.4.1)
                        self._send_wire(b"".join(self._ws.data_to_send()))
                if self._tls is not None:
                    try:
                        self._tls.unwrap()  # our close_notify (RFC 8446 §6.1)
                    except ssl.SSLError:
                        pass  # the broker's close_notify not (yet) read: no matter
                    self._send_wire(b"")
            if linger:
                sock.shutdown(socket.SHUT_WR)
                deadline = time.monotonic() + linger
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([sock], [], [], left)
                    if readable and not sock.recv(_CHUNK):
                        break  # the broker closed its side
        except OSError:
            pass  # reset or gone already: nothing to wait for
        sock.close()

    # -- the layers (under the lock) --------------------------------------------------------

    def _send_wire(self, data: bytes) -> None:
        """Encrypt ``data`` (if TLS) and send it, with what TLS itself has to send."""
        if self._tls is not None:
            if data:
                self._tls.write(data)
            data = self._tls_out.read()
        if data:
            self.sock.sendall(data)

    def _unwrap(self, raw: bytes) -> bytes:
        """The MQTT bytes in ``raw`` (b"" at the end of the TCP stream)."""
        data = raw
        if self._tls is not None:
            data = self._decrypt(raw)
        if not raw:
            self._ended = True  # the end of the TCP stream: the end of every layer
        if self._ws is not None:
            if data:
                self._ws.receive_data(data)
            if self._ended:
                self._ws.receive_eof()
            data = self._ws_data()
        return data

    def _decrypt(self, raw: bytes | None) -> bytes:
        """The plaintext of ``raw`` and what came before it (``b""``: the end of the TCP
        stream; None: nothing new, decrypt what is buffered)."""
        assert self._tls is not None
        if raw:
            self._tls_in.write(raw)
        elif raw is not None:
            self._tls_in.write_eof()
        out = bytearray()
        while True:
            try:
                chunk = self._tls.read(_CHUNK)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                # close_notify, or the TCP stream ended without one: the end either way
                # (RFC 8446 §6.1 lets a peer that sends nothing more skip close_notify's
                # wait; MQTT's own DISCONNECT says whether the end was orderly).
                if not (out or self._received_any):
                    raise self._tls_failure(None) from None
                self._ended = True
                break
            except ssl.SSLError as exc:
                raise self._tls_failure(exc) from None
            if not chunk:
                self._ended = True
                break
            out += chunk
        # TLS's own answers (a KeyUpdate's) go out now.
        pending = self._tls_out.read()
        if pending:
            self.sock.sendall(pending)
        return bytes(out)

    def _tls_failure(self, exc: ssl.SSLError | None) -> TransportError:
        """What a TLS alert, or an end of the connection right after the TLS handshake
        (``exc`` None: before any MQTT byte came), means."""
        tls = self.endpoint.tls
        assert tls is not None
        reason = getattr(exc, "reason", None) or ""
        url = self.endpoint.url
        if reason == "TLSV13_ALERT_CERTIFICATE_REQUIRED":
            return TransportError(f"the broker at {url} requires a client certificate "
                                  f"(certFile/keyFile): {exc}")
        if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE" and not tls.cert_file:
            # TLS 1.2's answer to a missing client certificate, among other things.
            return TransportError(f"the broker at {url} refused the TLS handshake ({exc}): does "
                                  "it require a client certificate (certFile/keyFile)?")
        if exc is None and not tls.cert_file:
            # TLS 1.3 ends the client's side of the handshake before the server has
            # checked the client's certificate: a broker that wants one and got none
            # sends the alert 'certificate required' and closes, or (Mosquitto 2.0.11)
            # resets the connection, and the reset can overtake the alert.
            return TransportError(f"the broker at {url} requires a client certificate "
                                  "(certFile/keyFile), it seems: it ended the connection after "
                                  "the TLS handshake, before any MQTT packet")
        if tls.cert_file and (exc is None or reason.startswith(
                ("TLSV1_ALERT_", "SSLV3_ALERT_", "TLSV13_ALERT_"))):
            said = f" ({exc})" if exc is not None else ", before any MQTT packet"
            return TransportError(f"the broker at {url} refused the client certificate "
                                  f"(certFile {tls.cert_file!r}), it seems: it ended the "
                                  f"connection after the TLS handshake{said}; is it signed by a "
                                  "CA that the broker trusts?")
        return TransportError(f"TLS with {url} failed: {exc}")

    def _ws_data(self, frames: list[Frame] | None = None) -> bytes:
        """The binary payloads of ``frames`` (default: those the WebSocket protocol has
        parsed); its own answers (pong, the close frame's echo) sent."""
        from websockets.frames import Frame, Opcode

        assert self._ws is not None
        if frames is None:
            frames = [e for e in self._ws.events_received() if isinstance(e, Frame)]
        out = bytearray()
        for frame in frames:
            if frame.opcode is Opcode.TEXT or (frame.opcode is Opcode.CONT and self._ws_text):
                self._ws_text = True
                self._ws.fail(1003, "MQTT travels in binary frames [MQTT-6.0.0-1]")
                self._send_wire(b"".join(self._ws.data_to_send()))
                raise TransportError(f"{self.endpoint.url} sent a text WebSocket frame: MQTT "
                                     "packets travel in binary frames only [MQTT-6.0.0-1]")
            if frame.opcode in (Opcode.BINARY, Opcode.CONT):
                self._ws_text = False
                # Frames need not align with MQTT packets [MQTT-6.0.0-2]: a byte stream.
                out += frame.data
            elif frame.opcode is Opcode.CLOSE:
                self._ended = True
        self._send_wire(b"".join(d for d in self._ws.data_to_send() if d))
        if self._ws.handshake_exc is None and self._ws.close_expected():
            self._ended = True
        return bytes(out)

    # -- the handshakes (in Endpoint.open) -------------------------------------------------

    def _read_handshake(self, what: str) -> bytes:
        try:
            raw = self.sock.recv(_CHUNK)
        except TimeoutError:
            raise TransportError(f"no {what} from {self.endpoint.url} within "
                                 f"{self.sock.gettimeout():g} s") from None
        except OSError as exc:
            raw = b""
            said = f"{exc.strerror or exc}"
        else:
            said = "it closed the connection"
        if not raw:
            raise TransportError(f"{what} with {self.endpoint.url} failed: {said} (is port "
                                 f"{self.endpoint.port} a "
                                 f"{'TLS' if what.startswith('TLS') else 'WebSocket'} listener?)")
        return raw

    def _start_tls(self, context: ssl.SSLContext) -> None:
        endpoint = self.endpoint
        tls = endpoint.tls
        assert tls is not None
        # server_hostname: the name checked against the certificate, and sent as SNI
        # (not for an IP address: RFC 6066 §3).
        self._tls = context.wrap_bio(self._tls_in, self._tls_out,
                                     server_hostname=endpoint.host)
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                out = self._tls_out.read()
                if out:
                    self.sock.sendall(out)
                self._tls_in.write(self._read_handshake("TLS handshake"))
            except ssl.SSLCertVerificationError as exc:
                raise self._verify_failure(exc) from None
            except ssl.SSLError as exc:
                raise self._tls_failure(exc) from None
        out = self._tls_out.read()  # our Finished
        if out:
            self.sock.sendall(out)
        # Anything decrypted already (a broker that speaks first) is MQTT's.
        self._pending += self._decrypt(None)

    def _verify_failure(self, exc: ssl.SSLCertVerificationError) -> TransportError:
        endpoint = self.endpoint
        tls = endpoint.tls
        assert tls is not None
        if exc.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, _IP_ADDRESS_
            kind = "IP address" if _is_ip(endpoint.host) else "host name"
            return TransportError(f"{kind} {endpoint.host!r} does not match the broker's "
                                  f"certificate ({exc.verify_message}); connect by a name the "
                                  "certificate holds")
        store = (f"caFile {tls.ca_file!r}" if tls.ca_file else
                 "the system's CA store; set caFile to the CA that signed it")
        return TransportError(f"certificate verify failed: {exc.verify_message} "
                              f"(the broker at {endpoint.url}, checked against {store})")

    def _start_websocket(self) -> None:
        from websockets.client import ClientProtocol
        from websockets.frames import Frame
        from websockets.typing import Subprotocol
        from websockets.uri import parse_uri

        endpoint = self.endpoint
        assert endpoint.ws_path is not None
        host = f"[{endpoint.host}]" if ":" in endpoint.host else endpoint.host
        uri = parse_uri(f"{endpoint.scheme}://{host}:{endpoint.port}{endpoint.ws_path}")
        # The client offers "mqtt" [MQTT-6.0.0-3]; no size limit on a message: MQTT's
        # own limits apply to the packets inside.
        ws = ClientProtocol(uri, subprotocols=[Subprotocol("mqtt")], max_size=None)
        ws.send_request(ws.connect())
        self._send_wire(b"".join(ws.data_to_send()))
        while True:
            raw = self._read_handshake("WebSocket handshake")
            data = self._decrypt(raw) if self._tls is not None else raw
            ws.receive_data(data)
            if ws.handshake_exc is not None:
                raise TransportError(f"WebSocket handshake with {endpoint.url} failed: "
                                     f"{ws.handshake_exc}")
            events = ws.events_received()
            if events:  # the Response, and any frames after it
                break
        if ws.subprotocol != "mqtt":
            ws.fail(1002, "no subprotocol mqtt")  # protocol error (RFC 6455 §4.1, §7.4.1)
            self._send_wire(b"".join(ws.data_to_send()))
            raise TransportError(f"{endpoint.url} accepted the WebSocket without the subprotocol "
                                 f"'mqtt' ({ws.subprotocol or 'none'}): the server must select "
                                 "'mqtt' [MQTT-6.0.0-4]")
        self._ws = ws
        # Frames that came with the response.
        self._pending += self._ws_data([e for e in events[1:] if isinstance(e, Frame)])


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True
