"""A subscribing MQTT client on a connection and a thread: the I/O around
:class:`mqttwire.session.ClientSession` that the live source (:mod:`.live`) needs.  The
connection is a :class:`.links.Link` (TCP, TLS, WebSocket: :mod:`.links`).

The thread owns the connection's reading side: it feeds what it reads to the session, keeps
the received messages in arrival order, numbered, and sends what the session queues
(acknowledgements, PINGREQ).  QoS 1 and 2 messages are acknowledged only when
:meth:`Subscriber.ack_through` is called (the session's manual acknowledgement), so the
broker keeps them, and sends them again to the next connection of this client id, until
then.  Anything that ends the connection (refused, unreachable, a refused subscription,
a protocol violation by the broker, the broker gone) is kept as :attr:`Subscriber.error`
and the thread stops: it does not reconnect (the live source fails its query, and the
query's restart reconnects and resumes the session).

Only the standard library and mqttwire: no pyspark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..session import (
    ClientSession,
    Connected,
    ConnectRefused,
    Disconnected,
    MessageReceived,
    SubscribeCompleted,
)
from ..session.client import ReceivedMessage
from .links import Endpoint, Link

__all__ = ["Received", "Subscriber", "SubscriberError"]


class SubscriberError(ConnectionError):
    """Why the subscriber's connection ended (the broker's reason code when it sent one)."""

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        super().__init__(message)
        self.reason_code = reason_code


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
    every message received.  ``session`` is the :class:`ClientSession` to use (its
    client id, level, Clean Start, Session Expiry, credentials; made with
    ``auto_ack=False``).  ``endpoint``: how to reach the broker (TLS, WebSocket); default
    plain TCP to ``host:port``."""

    def __init__(self, host: str, port: int, filters: Sequence[tuple[str, int]],
                 session: ClientSession, *, connect_timeout: float = 10.0,
                 endpoint: Endpoint | None = None) -> None:
        if session.auto_ack:
            raise ValueError("the session must be made with auto_ack=False")
        self.host = host
        self.port = port
        self.endpoint = endpoint or Endpoint(host, port)
        self.filters = list(filters)
        self.session = session
        self.connect_timeout = connect_timeout
        #: Why the connection ended, or None while it runs.
        self.error: SubscriberError | None = None
        self._lock = threading.Lock()
        self._messages: list[Received] = []  # received, not yet taken
        self._taken: list[Received] = []  # taken, not yet acknowledged
        self._seq = 0
        self._sock: Link | None = None
        self._ready = threading.Event()  # subscribed, or failed
        self._stop = False
        #: Disconnected.linger of the session's end (0.0 until it ended).
        self._linger = 0.0
        self._thread = threading.Thread(target=self._run, name="mqttwire-subscriber",
                                        daemon=True)
        self._matchers = [(f, _plain_filter(f)) for f, _ in self.filters]
        from .. import topic_matches

        self._matches = topic_matches

    def __repr__(self) -> str:
        state = "failed" if self.error else "subscribed" if self._ready.is_set() else "starting"
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
        """Raise :attr:`error` if the connection has ended."""
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
        arrival order, as the session sends them); returns how many."""
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
        if self.error is None:
            self.error = error
        self._ready.set()

    def _flush(self) -> None:
        """Send what the session queued (under the lock)."""
        data = self.session.data_to_send()
        if data and self._sock is not None:
            try:
                self._sock.send_all(data)
            except OSError as exc:
                self._fail(SubscriberError(f"sending to {self.host}:{self.port} failed: {exc}"))

    def _run(self) -> None:
        try:
            sock = self.endpoint.open(self.connect_timeout)  # TCP, TLS, WebSocket
        except OSError as exc:  # a LinkError: says what failed (.links)
            self._fail(SubscriberError(str(exc)))
            return
        # Blocking with a timeout: reads happen only after select() says there is data,
        # and a burst of acknowledgements (one PUBACK per message of a committed batch)
        # may be larger than the socket's buffer, which a non-blocking sendall() would
        # give up on.
        sock.settimeout(max(self.connect_timeout, 30.0))
        self._sock = sock
        with self._lock:
            self.session.connect(time.monotonic())
            self._flush()
        while not self._stop and self.error is None:
            deadline = self.session.next_deadline()
            wait = 0.5 if deadline is None else max(0.0, min(0.5, deadline - time.monotonic()))
            try:
                # None: nothing for MQTT (none came, or a part of a TLS record, a ping).
                data = sock.receive() if sock.wait_readable(wait) else None
            except OSError as exc:
                if not self._stop:
                    self._fail(SubscriberError(f"reading from {self.host}:{self.port} "
                                               f"failed: {exc}"))
                return
            with self._lock:
                now = time.monotonic()
                if data is None:
                    events = self.session.tick(now)
                elif data:
                    events = self.session.receive_data(data, now)
                else:
                    events = self.session.connection_lost(now)
                    if not self._stop and not any(isinstance(e, Disconnected)
                                                  for e in events):
                        self._fail(SubscriberError(
                            f"{self.host}:{self.port} closed the connection"))
                for event in events:
                    self._event(event, now)
                self._flush()
        if self._linger and not self._stop:
            # The session ended the connection (its DISCONNECT for the broker's protocol
            # violation, a keep-alive timeout): close now, lingering, as close() would.
            with self._lock:
                sock, self._sock = self._sock, None
            if sock is not None:
                sock.close(self._linger)

    def _event(self, event: Any, now: float) -> None:
        """Handle one session event (under the lock)."""
        if isinstance(event, MessageReceived):
            message = event.message
            self._seq += 1
            match = next((f for f, plain in self._matchers
                          if self._matches(plain, message.topic)), None)
            self._messages.append(Received(self._seq, message, time.time_ns(), match))
        elif isinstance(event, Connected):
            if not event.session_present:
                # A new session (or one the broker lost): subscribe.  A resumed session
                # keeps its subscriptions [MQTT-3.1.2-4].
                self.session.subscribe(list(self.filters), now=now)
            else:
                self._ready.set()
        elif isinstance(event, SubscribeCompleted):
            refused = [(f, code) for (f, _), code in zip(self.filters, event.reason_codes)
                       if code >= 0x80]
            if refused:
                self._fail(SubscriberError(
                    "the broker refused the subscription to " + ", ".join(
                        f"{f!r} (reason code 0x{code:02X})" for f, code in refused),
                    refused[0][1]))
            else:
                self._ready.set()
        elif isinstance(event, ConnectRefused):
            self._fail(SubscriberError(
                f"the broker at {self.host}:{self.port} refused the connection "
                f"(CONNACK reason code 0x{event.reason_code:02X})", event.reason_code))
        elif isinstance(event, Disconnected):
            self._linger = event.linger
            if self._stop:
                return
            why = event.reason
            if event.error is not None and str(event.error) not in why:
                why = f"{why}: {event.error}"
            elif event.reason_code is not None:
                why = f"{why} (reason code 0x{event.reason_code:02X})"
            self._fail(SubscriberError(f"connection to {self.host}:{self.port} ended: {why}",
                                       event.reason_code))
