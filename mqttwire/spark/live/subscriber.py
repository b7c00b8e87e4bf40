"""A subscribing MQTT client on a connection and a thread: the I/O around
:class:`mqttwire.session.ClientSession` that the live source (:mod:`.live`) needs.  The
connection is a :class:`.transport.Transport` (TCP, TLS, WebSocket: :mod:`.transport`).

The thread owns the connection's reading side: it feeds what it reads to the session, keeps
the received messages in arrival order, numbered, and sends what the session queues
(acknowledgements, PINGREQ).  QoS 1 and 2 messages are acknowledged only when
:meth:`Subscriber.ack_through` is called (the session's manual acknowledgement), so the
broker keeps them, and sends them again to the next connection of this client id, until
then.

Connection loss: a connection that ends for a reason that may pass (the network, the
broker closing or restarting, its DISCONNECT "server shutting down" or "busy", a
keep-alive timeout) is opened again with backoff (:class:`Reconnect`), resuming the
session (Clean Start 0).  What was received and not yet acknowledged stays where it is
(waiting to be taken, or taken into a batch); the session layer keeps its state for
those messages, and the broker sends them again with their packet identifiers and DUP
set [MQTT-4.4.0-1]: the copies are not delivered twice, and the acknowledgement of one
taken into a batch goes out on the new connection once the batch commits.  A message
the broker does not send again on the new connection (it no longer holds it) is never
acknowledged: its packet identifier may already be another message's (the session layer
forgets it once the PINGRESP after the resuming CONNACK shows the re-sending is over).
If the broker kept no session (Session Present 0), the subscriptions are made again and
the loss is logged as an error (or fails the subscriber: ``fail_on_session_loss``): what
it held for the client id is gone.  Everything else ends the subscriber and is kept as
:attr:`Subscriber.error`: the first connection failing (unreachable, refused), a refused
CONNECT or subscription, a protocol violation by the broker, and a broker away longer
than :attr:`Reconnect.timeout` ("gave up after ...").  Logged on the ``logging`` logger
``mqttwire.spark.live.subscriber``.

Only the standard library and mqttwire: no pyspark.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...session import (
    ClientSession,
    Connected,
    ConnectRefused,
    Disconnected,
    MessageReceived,
    SubscribeCompleted,
)
from ...session.client import ClientState, ReceivedMessage
from .transport import Endpoint, Transport

__all__ = ["Received", "Reconnect", "Subscriber", "SubscriberError"]

log = logging.getLogger(__name__)

#: Server DISCONNECT reason codes (5.0 §3.14.2.1) after which connecting again may work:
#: 0x00 a normal close, 0x89 Server busy, 0x8B Server shutting down, 0x8D Keep Alive
#: timeout, 0x96 Message rate too high, 0x97 Quota exceeded, 0x9F Connection rate
#: exceeded, 0xA0 Maximum connect time.  The others say something about this client
#: (not authorised, a protocol error, session taken over by another connection of the
#: client id, use another server) that a new connection would not change.
TRANSIENT_DISCONNECT = frozenset({0x00, 0x89, 0x8B, 0x8D, 0x96, 0x97, 0x9F, 0xA0})
#: CONNACK reason codes after which a reconnection is tried again: 5.0 0x88 Server
#: unavailable, 0x89 Server busy, 0x97 Quota exceeded, 0x9F Connection rate exceeded;
#: 3.1.1's return code 3, Server unavailable.  Only for reconnections: the first CONNECT
#: refused fails at once.
TRANSIENT_CONNACK = {5: frozenset({0x88, 0x89, 0x97, 0x9F}), 4: frozenset({3}),
                     3: frozenset({3})}


class SubscriberError(ConnectionError):
    """Why the subscriber's connection ended (the broker's reason code when it sent one).
    ``transient``: whether connecting again may work."""

    def __init__(self, message: str, reason_code: int | None = None, *,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.transient = transient


@dataclass(frozen=True)
class Reconnect:
    """How a lost connection is opened again: the first attempt after about ``delay``
    seconds, each further one after twice the last wait, up to ``max_delay`` (each wait
    drawn between half and all of that, so that many clients of a restarted broker do not
    come back at once); giving up ``timeout`` seconds after the connection was lost (0:
    never reconnect).  The wait starts again from ``delay`` after a connection that
    lasted ``max_delay`` seconds or more."""

    delay: float = 1.0
    max_delay: float = 30.0
    timeout: float = 300.0

    def __post_init__(self) -> None:
        if not 0 < self.delay <= self.max_delay:
            raise ValueError(f"reconnect delay must be more than 0 and at most the maximum "
                             f"delay ({self.max_delay:g} s), not {self.delay:g}")
        if self.timeout < 0:
            raise ValueError(f"reconnect timeout must be 0 or more seconds, not "
                             f"{self.timeout:g}")


@dataclass(frozen=True)
class Received:
    """One received message: its number (from 1, in arrival order), the time it arrived
    (ns since the epoch) and the first of our topic filters that it matches."""

    seq: int
    message: ReceivedMessage
    received_ns: int
    subscription: str | None


def _plain_filter(topic_filter: str) -> str:
    """The filter that a topic is matched against: a shared subscription's own."""
    if topic_filter.startswith("$share/"):
        return topic_filter.split("/", 2)[2]
    return topic_filter


class Subscriber:
    """Connect to ``host:port``, subscribe to ``filters`` ((filter, QoS) pairs), and keep
    every message received, reconnecting as ``reconnect`` says.  ``session`` is the
    :class:`ClientSession` to use (its client id, level, Clean Start, Session Expiry,
    credentials; made with ``auto_ack=False``).  ``fail_on_session_loss``: a broker that
    kept no session for a reconnection ends the subscriber, rather than a logged error.
    ``endpoint``: how to reach the broker (TLS, WebSocket); default plain TCP to
    ``host:port``."""

    def __init__(self, host: str, port: int, filters: Sequence[tuple[str, int]],
                 session: ClientSession, *, connect_timeout: float = 10.0,
                 endpoint: Endpoint | None = None, reconnect: Reconnect | None = None,
                 fail_on_session_loss: bool = False) -> None:
        if session.auto_ack:
            raise ValueError("the session must be made with auto_ack=False")
        self.host = host
        self.port = port
        self.endpoint = endpoint or Endpoint(host, port)
        self.filters = list(filters)
        self.session = session
        self.connect_timeout = connect_timeout
        self.reconnect = reconnect if reconnect is not None else Reconnect()
        self.fail_on_session_loss = fail_on_session_loss
        #: Why the subscriber ended, or None while it runs (or reconnects).
        self.error: SubscriberError | None = None
        #: How many connections were opened and accepted (CONNACK 0), the first included.
        self.connections = 0
        self._lock = threading.Lock()
        self._messages: list[Received] = []  # received, not yet taken
        self._taken: list[Received] = []  # taken, not yet acknowledged
        self._seq = 0
        self._sock: Transport | None = None
        self._ready = threading.Event()  # first subscribed, or failed
        self._stop = False
        self._stopped = threading.Event()  # wakes a reconnection's wait
        #: Why the current connection ended (None while it runs).
        self._ended: SubscriberError | None = None
        #: Whether a read or write of the current connection failed (nothing more is sent).
        self._transport_failed = False
        self._up_since: float | None = None  # when the current connection was accepted
        #: Disconnected.linger of the current connection's end (0.0 until it ended).
        self._linger = 0.0
        #: The session's overrun counts when last logged (``_log_overrun``).
        self._overruns = (0, 0)
        self._thread = threading.Thread(target=self._run, name="mqttwire-subscriber",
                                        daemon=True)
        self._matchers = [(f, _plain_filter(f)) for f, _ in self.filters]
        from ... import topic_matches

        self._matches = topic_matches

    def __repr__(self) -> str:
        state = ("failed" if self.error else "subscribed" if self.session.connected
                 else "reconnecting" if self.connections else "starting")
        return (f"<Subscriber {self.session.client_id!r} to {self.endpoint.url} {state}, "
                f"{len(self._messages)} waiting, {len(self._taken)} unacknowledged>")

    # -- the caller's side ----------------------------------------------------------------

    def start(self, timeout: float | None = None) -> None:
        """Connect and subscribe; return once subscribed, or raise why not."""
        self._thread.start()
        if not self._ready.wait(self.connect_timeout * 2 if timeout is None else timeout):
            self.close()
            raise SubscriberError(f"no CONNACK and SUBACK from {self.host}:{self.port} "
                                  f"within {self.connect_timeout * 2:g} s")
        self.raise_error()

    def raise_error(self) -> None:
        """Raise :attr:`error` if the subscriber has ended (not while it reconnects)."""
        if self.error is not None:
            raise self.error

    def take(self, limit: int | None = None) -> list[Received]:
        """The messages received since the last call (at most ``limit``), in order;
        they stay unacknowledged until :meth:`ack_through`."""
        with self._lock:
            n = len(self._messages) if limit is None else min(limit, len(self._messages))
            taken, self._messages = self._messages[:n], self._messages[n:]
            self._taken.extend(taken)
        return taken

    def ack_through(self, seq: int) -> int:
        """Acknowledge every taken message numbered ``seq`` or less (PUBACK, PUBREC: in
        arrival order, as the session sends them; while reconnecting, on the connection
        that resumes the session); returns how many."""
        with self._lock:
            done = [r for r in self._taken if r.seq <= seq]
            self._taken = [r for r in self._taken if r.seq > seq]
            now = time.monotonic()
            for r in done:
                self.session.ack(r.message, now=now)
            self._flush()
        return len(done)

    def close(self) -> None:
        """Disconnect (DISCONNECT, the session kept by the broker for its expiry) and
        stop the thread; the socket closes after lingering as the session says."""
        self._stop = True
        self._stopped.set()
        with self._lock:
            if self.session.connected and self._sock is not None:
                for event in self.session.disconnect(time.monotonic()):
                    self._event(event, time.monotonic())  # its Disconnected: the linger
                self._flush()
        if self._thread.is_alive():
            self._thread.join(5)
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close(self._linger)

    # -- the thread -------------------------------------------------------------------------

    def _fail(self, error: SubscriberError) -> None:
        """The subscriber is over: no reconnection."""
        if self.error is None:
            self.error = error
        self._ready.set()

    def _end(self, error: SubscriberError) -> None:
        """The current connection is over (the first reason kept)."""
        if self._ended is None:
            self._ended = error

    def _open(self) -> Transport:
        """A connection to the broker: TCP, TLS, WebSocket (a TransportError, an OSError
        saying what failed, if not: .transport)."""
        sock = self.endpoint.open(self.connect_timeout)
        # Blocking with a timeout: reads happen only after select() says there is data,
        # and a burst of acknowledgements (one PUBACK per message of a committed batch)
        # may be larger than the socket's buffer, which a non-blocking sendall() would
        # give up on.
        sock.settimeout(max(self.connect_timeout, 30.0))
        return sock

    def _flush(self) -> None:
        """Send what the session queued (under the lock)."""
        data = self.session.data_to_send()
        # Sent even when the connection is ending: a DISCONNECT the session queued as it
        # ended it (the broker's protocol violation, a refused subscription) must go out
        # before the lingering close.  Not on a transport that already failed.
        if data and self._sock is not None and not self._transport_failed:
            try:
                self._sock.send_all(data)
            except OSError as exc:
                self._transport_failed = True
                self._end(SubscriberError(f"sending to {self.host}:{self.port} failed: {exc}",
                                          transient=True))

    def _run(self) -> None:
        """Connections, one after another, until stopped or failed."""
        policy = self.reconnect
        delay = policy.delay
        lost: SubscriberError | None = None  # why the last accepted connection ended
        lost_at = 0.0
        attempts = 0
        while True:
            error = self._connection()
            if error is None or self._stop:
                return
            now = time.monotonic()
            if self._up_since is not None:  # this connection had been accepted
                if now - self._up_since >= policy.max_delay:
                    delay = policy.delay
                self._up_since = None
                lost, lost_at, attempts = error, now, 0
                if not error.transient or not policy.timeout:
                    self._fail(error)
                    return
                log.warning("%s; reconnecting (for up to %g s)", error, policy.timeout)
            elif lost is None or not error.transient:
                # The first connection, or a permanent refusal: the subscriber is over.
                self._fail(error)
                return
            else:
                attempts += 1
                if now - lost_at >= policy.timeout:
                    self._fail(SubscriberError(
                        f"gave up after {now - lost_at:.0f} s reconnecting to {self.host}:"
                        f"{self.port} (reconnectTimeout {policy.timeout:g} s, {attempts} "
                        f"attempts; the last: {error}); the connection had ended: {lost}",
                        error.reason_code))
                    return
                log.info("reconnection %d to %s:%d failed: %s", attempts, self.host,
                         self.port, error)
            wait = min(random.uniform(delay / 2, delay), lost_at + policy.timeout - now)
            delay = min(delay * 2, policy.max_delay)
            if self._stopped.wait(max(wait, 0.0)):
                return

    def _connection(self) -> SubscriberError | None:
        """Open one connection and serve it until it ends: why it ended (None: stopped)."""
        try:
            sock = self._open()
        except OSError as exc:  # a TransportError: says what failed (.transport)
            return SubscriberError(str(exc), transient=True)
        with self._lock:
            if self._stop:
                sock.close()
                return None
            self._sock = sock
            self._ended = None
            self._transport_failed = False
            self._linger = 0.0
            self.session.connect(time.monotonic())
            self._flush()
        while not self._stop and self._ended is None:
            deadline = self.session.next_deadline()
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            try:
                # None: nothing for MQTT (none came, or a part of a TLS record, a ping).
                data = sock.receive() if sock.wait_readable(wait) else None
            except OSError as exc:
                data = b""  # as a closed connection: the session is told it is lost
                self._transport_failed = True
                self._end(SubscriberError(f"reading from {self.host}:{self.port} failed: "
                                          f"{exc}", transient=True))
            with self._lock:
                now = time.monotonic()
                if self._stop:
                    break  # close() ends the session and the socket
                if data is None:
                    events = self.session.tick(now)
                elif data:
                    events = self.session.receive_data(data, now)
                else:
                    events = self.session.connection_lost(now)
                for event in events:
                    self._event(event, now)
                self._flush()
                if self.session.tolerate_overrun:
                    self._log_overrun()
        if self._stop:
            return None
        with self._lock:
            if self.session.state is not ClientState.DISCONNECTED:
                # A send failed (in ack_through): the session is told here.
                for event in self.session.connection_lost(time.monotonic()):
                    self._event(event, time.monotonic())
            sock, self._sock = self._sock, None
        if sock is not None:
            # Lingering when the session ended the connection (its DISCONNECT for the
            # broker's protocol violation, a keep-alive timeout), as close() would.
            sock.close(self._linger)
        return self._ended

    def _event(self, event: Any, now: float) -> None:
        """Handle one session event (under the lock)."""
        if isinstance(event, MessageReceived):
            message = event.message
            self._seq += 1
            match = next((f for f, plain in self._matchers
                          if self._matches(plain, message.topic)), None)
            self._messages.append(Received(self._seq, message, time.time_ns(), match))
        elif isinstance(event, Connected):
            self.connections += 1
            if self.connections > 1 and not self._reconnected(event, now):
                return
            if not event.session_present:
                # A new session (or one the broker lost): subscribe.  A resumed session
                # keeps its subscriptions [MQTT-3.1.2-4].
                self.session.subscribe(list(self.filters), now=now)
            else:
                self._up(now)
        elif isinstance(event, SubscribeCompleted):
            refused = [(f, code) for (f, _), code in zip(self.filters, event.reason_codes)
                       if code >= 0x80]
            if refused:
                self._end(SubscriberError(
                    "the broker refused the subscription to " + ", ".join(
                        f"{f!r} (reason code 0x{code:02X})" for f, code in refused),
                    refused[0][1]))
                self._close_session(now)
            else:
                self._up(now)
        elif isinstance(event, ConnectRefused):
            code = event.reason_code
            self._end(SubscriberError(
                f"the broker at {self.host}:{self.port} refused the connection "
                f"(CONNACK reason code 0x{code:02X})", code,
                transient=code in TRANSIENT_CONNACK[self.session.version]))
        elif isinstance(event, Disconnected):
            self._linger = event.linger
            if self._stop:
                return
            why = event.reason
            if event.error is not None and str(event.error) not in why:
                why = f"{why}: {event.error}"
            elif event.reason_code is not None:
                why = f"{why} (reason code 0x{event.reason_code:02X})"
            transient = event.error is None and (
                not event.by_server or event.reason_code in TRANSIENT_DISCONNECT)
            self._end(SubscriberError(f"connection to {self.host}:{self.port} ended: {why}",
                                      event.reason_code, transient=transient))

    def _log_overrun(self) -> None:
        """Log (a warning, at most once per 10,000) what the broker sent beyond our
        Receive Maximum or with a packet identifier still in use: taken as new messages
        (``ClientSession.tolerate_overrun``); a broker with more than 65,535 messages in
        flight for this client (docs/live.md, Mosquitto 2.0.11 with a backlog)."""
        counts = (self.session.receive_maximum_exceeded, self.session.ids_reused)
        total, logged = sum(counts), sum(self._overruns)
        if total == logged or (logged and total // 10_000 == logged // 10_000):
            return
        self._overruns = counts
        log.warning("the broker at %s:%d overran this client's in-flight window: %d messages "
                    "beyond the Receive Maximum, %d with a packet identifier still in use "
                    "(taken as new messages; each acknowledged after the earlier one with "
                    "its identifier); so far", self.host, self.port, *counts)

    def _up(self, now: float) -> None:
        """The connection is accepted and subscribed (under the lock)."""
        self._up_since = now
        self._ready.set()

    def _close_session(self, now: float) -> None:
        """End the session's connection from our side (under the lock)."""
        if self.session.connected:
            for event in self.session.disconnect(now):
                self._event(event, now)

    def _reconnected(self, event: Connected, now: float) -> bool:
        """Log a reconnection; a lost session is an error (under the lock).  False if
        that ends the connection (``fail_on_session_loss``)."""
        if event.session_present:
            log.warning("reconnected to %s:%d as %r: session resumed, %d messages "
                        "unacknowledged", self.host, self.port, self.session.client_id,
                        len(self.session.unacknowledged))
            return True
        lost = SubscriberError(
            f"reconnected to {self.host}:{self.port} as {self.session.client_id!r}, but "
            "the broker kept no session for it (Session Present 0): the messages it held "
            "for the client id (queued while away, sent and not yet acknowledged) are "
            "lost to this query; a broker keeps sessions across its restarts only with "
            "persistence (Mosquitto: persistence true), and a session only for its "
            "expiry (sessionExpiry)")
        if self.fail_on_session_loss:
            self._end(lost)
            self._close_session(now)
            return False
        log.error("%s; subscribing again", lost)
        return True

