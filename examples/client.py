#!/usr/bin/env python3
"""A small asyncio MQTT client: an asyncio socket around mqttwire's sans-I/O
``ClientSession``.

The session (docs/session.md) does the MQTT: MQTT 3.1, 3.1.1 and 5.0 (protocol levels 3,
4 and 5), QoS 0, 1 and 2 with the full acknowledgement exchanges, the server's Receive
Maximum, Topic Aliases both ways, PINGREQ at the Keep Alive (or the server's Server Keep
Alive).  This file turns its calls into coroutines and its events into futures::

    client = await Client.connect("127.0.0.1", 1883, "example", version=4)
    await client.subscribe(("sensors/#", 1))
    await client.publish("sensors/kitchen", b"21.5", qos=2, retain=True)
    message = await client.receive(timeout=5)     # topic, payload, qos, retain, properties
    await client.disconnect()

Run as a script it publishes one message, or prints the messages of a subscription::

    python examples/client.py --port 1883 pub sensors/kitchen 21.5 --qos 1
    python examples/client.py --port 1883 sub 'sensors/#' --count 3
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import mqttwire as mw
from mqttwire.session import (
    ClientSession,
    Connected,
    ConnectRefused,
    Disconnected,
    Event,
    MessageReceived,
    OutgoingMessage,
    PublishCompleted,
    Reauthenticated,
    ReceivedMessage,
    SubscribeCompleted,
    UnsubscribeCompleted,
)


class ConnectionRefused(Exception):
    """The server answered CONNECT with a non-zero return / reason code."""

    def __init__(self, connack: Any) -> None:
        super().__init__(f"CONNACK reason code 0x{connack.reason_code:02X}")
        self.connack = connack


class Client(asyncio.Protocol):
    """One connection to an MQTT server.  Create it with :meth:`connect`."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.loop = asyncio.get_running_loop()
        #: Application Messages received (``mqttwire.session.ReceivedMessage``).
        self.messages: asyncio.Queue[ReceivedMessage] = asyncio.Queue()
        #: Done when the MQTT connection is over (the socket may still linger).
        self.closed = self.loop.create_future()
        #: Done when the socket is closed (connection_lost).
        self._socket_closed = self.loop.create_future()
        #: Set once we close the socket (lingering or not): input is discarded from then.
        self._ending = False
        self._linger_timer: asyncio.TimerHandle | None = None
        self._connack = self.loop.create_future()
        #: Resolved by the server's AUTH 0x00 while ``reauthenticate`` waits.
        self._reauthenticated: asyncio.Future[Any] | None = None
        # Packet identifier of a SUBSCRIBE / UNSUBSCRIBE, or a QoS 1/2 OutgoingMessage ->
        # the future of its reason codes / code.
        self._waiting: dict[int | OutgoingMessage, asyncio.Future[Any]] = {}
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    @classmethod
    async def connect(cls, host: str, port: int, client_id: str = "", *,
                      timeout: float = 10.0, **options: Any) -> Client:
        """Open the connection, send CONNECT and wait for CONNACK.  ``options`` go to
        ``ClientSession`` (``version`` (default 4), ``clean_start``, ``keep_alive``,
        ``will``, ``session_expiry_interval``, ``receive_maximum``,
        ``topic_alias_maximum``, ``properties``, ...).

        Raises:
            ConnectionRefused: the CONNACK carries a non-zero code.
            TimeoutError: no CONNACK within ``timeout`` seconds.
        """
        options.setdefault("version", 4)
        session = ClientSession(client_id, **options)
        loop = asyncio.get_running_loop()
        _, client = await asyncio.wait_for(
            loop.create_connection(lambda: cls(session), host, port), timeout)
        try:
            await asyncio.wait_for(asyncio.shield(client._connack), timeout)
        except BaseException:
            await client.close()
            raise
        return client

    @property
    def connack(self) -> Any:
        """The CONNACK the server sent."""
        return self.session.connack

    # Requests ----------------------------------------------------------------------------

    async def subscribe(self, *subscriptions: Any, properties: mw.Properties | None = None,
                        timeout: float = 10.0) -> list[int]:
        """Subscribe; each argument is a ``mqttwire.Subscription`` or a (filter, qos) pair.
        Returns the SUBACK's codes, one per subscription."""
        self._check_open()
        pid = self.session.subscribe(list(subscriptions), properties=properties,
                                     now=self.loop.time())
        codes: list[int] = await self._wait(pid, timeout)
        return codes

    async def unsubscribe(self, *topic_filters: str, timeout: float = 10.0) -> list[int]:
        """Unsubscribe; returns the UNSUBACK's codes (empty before MQTT 5.0)."""
        self._check_open()
        pid = self.session.unsubscribe(list(topic_filters), now=self.loop.time())
        codes: list[int] = await self._wait(pid, timeout)
        return codes

    async def publish(self, topic: str, payload: bytes = b"", *, qos: int = 0,
                      retain: bool = False, properties: mw.Properties | None = None,
                      timeout: float = 10.0) -> int | None:
        """Publish, and for QoS 1 and 2 wait until the exchange is complete (the session
        holds it back while the server's Receive Maximum is reached).

        Returns None for QoS 0, else the reason code of the PUBACK, or of the PUBREC
        when it failed (0x80 or more), or of the PUBCOMP.
        """
        self._check_open()
        message = self.session.publish(topic, payload, qos=qos, retain=retain,
                                       properties=properties, now=self.loop.time())
        if qos == 0:
            self._flush([])
            return None
        code: int = await self._wait(message, timeout)
        return code

    async def receive(self, timeout: float | None = None) -> ReceivedMessage:
        """The next Application Message.

        Raises:
            TimeoutError: none within ``timeout`` seconds.
            ConnectionError: the connection closed and no message is left.
        """
        get = asyncio.ensure_future(self.messages.get())
        done, _ = await asyncio.wait({get, self.closed}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        if not self.messages.empty():
            return self.messages.get_nowait()
        if self.closed.done():
            raise ConnectionError("connection closed")
        raise TimeoutError(f"no message within {timeout} s")

    async def reauthenticate(self, timeout: float = 10.0) -> bytes | None:
        """MQTT 5.0 re-authentication with the ``authenticator`` given to ``connect``
        (AUTH 0x19, §4.12.1); returns the server's final Authentication Data.

        Raises:
            ConnectionError: the server refused it (and closed the connection).
        """
        self._check_open()
        self.session.reauthenticate(self.loop.time())
        self._reauthenticated = future = self.loop.create_future()
        self._flush([])
        try:
            data: bytes | None = await asyncio.wait_for(asyncio.shield(future), timeout)
        finally:
            self._reauthenticated = None
        return data

    async def disconnect(self, reason_code: int = 0,
                         session_expiry_interval: int | None = None) -> None:
        """Send DISCONNECT (MQTT 5.0: with ``reason_code``) and close the connection."""
        if self.session.connected:
            self._flush(self.session.disconnect(self.loop.time(), reason_code=reason_code,
                                                session_expiry_interval=session_expiry_interval))
        await self.close()

    async def close(self) -> None:
        """Close the connection without DISCONNECT (the server publishes the will), and
        wait until the socket is closed (after a linger that ``disconnect`` began)."""
        if self._transport is not None and not self._ending:
            self._ending = True
            self._transport.close()
        await asyncio.shield(self._socket_closed)

    # Internals ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed.done():
            raise ConnectionError("connection closed")

    async def _wait(self, key: int | OutgoingMessage, timeout: float) -> Any:
        future = self._waiting[key] = self.loop.create_future()
        self._flush([])  # writes the request and collects what it caused
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiting.pop(key, None)

    def connection_made(self, transport: Any) -> None:
        self._transport = transport
        self.session.connect(self.loop.time())
        self._flush([])

    def data_received(self, data: bytes) -> None:
        if self._ending:
            return  # read and discarded while lingering
        self._flush(self.session.receive_data(data, self.loop.time()))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._linger_timer is not None:
            self._linger_timer.cancel()
            self._linger_timer = None
        self._flush(self.session.connection_lost(self.loop.time()))  # no-op after Disconnected
        self._finish(ConnectionError("connection closed"))
        _resolve(self._socket_closed, None)

    def _end(self, linger: float) -> None:
        """Close the socket after the session's Disconnected, lingering when it says so
        (``Disconnected.linger``): we sent DISCONNECT (or gave up on the server) while
        the server may still be sending, and a socket closed with unread input answers
        with a TCP reset that can lose the DISCONNECT before the server reads it.  So
        shut the write side (FIN after what is queued), read and discard
        (data_received) until the server closes (eof_received, asyncio's default: the
        transport closes ours), and close for good after ``linger`` seconds at most."""
        transport = self._transport
        if transport is None or self._ending:
            return
        self._ending = True
        if linger and transport.can_write_eof():
            transport.write_eof()
            # abort(), not close(): close() would wait for a server that reads nothing to
            # take what is still queued.
            self._linger_timer = self.loop.call_later(linger, transport.abort)
        else:
            transport.close()

    def _tick(self) -> None:
        self._timer = None
        self._flush([])

    def _flush(self, events: list[Event]) -> None:
        """After every call into the session: handle its events, write what it queued,
        and re-arm the timer for its next deadline."""
        events += self.session.tick(self.loop.time())  # does only what is due
        for event in events:
            self._handle(event)
        data = self.session.data_to_send()
        if data and self._transport is not None:
            self._transport.write(data)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.session.next_deadline()
        if deadline is not None:
            self._timer = self.loop.call_at(deadline, self._tick)
        for event in events:
            if isinstance(event, Disconnected):  # after the data written above
                self._end(event.linger)
                self._finish(ConnectionError(f"connection closed: {event.reason}"))

    def _handle(self, event: Event) -> None:
        if isinstance(event, Connected):
            _resolve(self._connack, event.connack)
        elif isinstance(event, ConnectRefused):
            self._connack.set_exception(ConnectionRefused(event.connack))
        elif isinstance(event, MessageReceived):
            self.messages.put_nowait(event.message)
        elif isinstance(event, PublishCompleted):
            _resolve(self._waiting.get(event.message), event.reason_code)
        elif isinstance(event, (SubscribeCompleted, UnsubscribeCompleted)):
            _resolve(self._waiting.get(event.packet_id), event.reason_codes)
        elif isinstance(event, Reauthenticated):
            _resolve(self._reauthenticated, event.data)

    def _finish(self, error: Exception) -> None:
        """The connection is gone: fail whatever still waits."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in [self._connack, self._reauthenticated, *self._waiting.values()]:
            if future is None:
                continue
            if not future.done():
                future.set_exception(error)
        _resolve(self.closed, None)


def _resolve(future: asyncio.Future[Any] | None, value: Any) -> None:
    if future is not None and not future.done():
        future.set_result(value)


# ---------------------------------------------------------------------------------------


async def _main(args: argparse.Namespace) -> None:
    client = await Client.connect(args.host, args.port, args.id, version=args.level,
                                  keep_alive=args.keep_alive)
    try:
        if args.command == "pub":
            await client.publish(args.topic, args.message.encode(), qos=args.qos,
                                 retain=args.retain)
        else:
            await client.subscribe((args.topic, args.qos))
            for _ in range(args.count):
                message = await client.receive()
                print(message.topic, message.payload.decode(errors="replace"), flush=True)
    finally:
        await client.disconnect()


def port_number(text: str) -> int:
    """``--port``: a TCP port, 1 to 65535, checked here so that one out of range is a
    usage error like one that is not a number (not an OverflowError from the socket)."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1 to 65535)")
    return port


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Publish or subscribe with mqttwire.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port_number, default=1883)
    parser.add_argument("--id", default="", help="client identifier (default: server's)")
    parser.add_argument("--level", type=int, choices=(3, 4, 5), default=4,
                        help="protocol level: 3 = MQTT 3.1, 4 = 3.1.1, 5 = 5.0")
    parser.add_argument("--keep-alive", type=int, default=60, metavar="SECONDS")
    commands = parser.add_subparsers(dest="command", required=True)
    pub = commands.add_parser("pub", help="publish one message")
    pub.add_argument("topic")
    pub.add_argument("message")
    pub.add_argument("--retain", action="store_true")
    sub = commands.add_parser("sub", help="print the messages of a subscription")
    sub.add_argument("topic")
    sub.add_argument("--count", type=int, default=1)
    for command in (pub, sub):
        command.add_argument("--qos", type=int, choices=(0, 1, 2), default=0)
    asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
