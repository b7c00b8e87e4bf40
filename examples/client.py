#!/usr/bin/env python3
"""A small asyncio MQTT client whose wire layer is mqttwire: an example, not a product.

It speaks MQTT 3.1, 3.1.1 and 5.0 (protocol levels 3, 4 and 5), publishes and receives at
QoS 0, 1 and 2 with the full acknowledgement exchanges, and keeps the connection alive
with PINGREQ.  Bytes go in through ``mqttwire.StreamDecoder`` and out through each
packet's ``.encode()``::

    client = await Client.connect("127.0.0.1", 1883, "example", version=mw.MQTT311)
    await client.subscribe(("sensors/#", 1))
    await client.publish("sensors/kitchen", b"21.5", qos=2, retain=True)
    message = await client.receive(timeout=5)     # an mqttwire.Publish
    await client.disconnect()

Run as a script it publishes one message, or prints the messages of a subscription::

    python examples/client.py --port 1883 pub sensors/kitchen 21.5 --qos 1
    python examples/client.py --port 1883 sub 'sensors/#' --count 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

import mqttwire as mw


class ConnectionRefused(Exception):
    """The server answered CONNECT with a non-zero return / reason code."""

    def __init__(self, connack: Any) -> None:
        super().__init__(f"CONNACK reason code 0x{connack.reason_code:02X}")
        self.connack = connack


class Client:
    """One connection to an MQTT server.  Create it with :meth:`connect`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 version: int, keep_alive: int) -> None:
        self.version = version
        self.keep_alive = keep_alive
        #: The CONNACK the server sent.
        self.connack: Any = None
        #: Application Messages received, as ``mqttwire.Publish`` packets.
        self.messages: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = reader
        self._writer = writer
        self._decoder = mw.StreamDecoder(version)
        # (packet type, packet id) -> future of the acknowledgement we wait for
        self._waiting: dict[tuple[type, int], asyncio.Future[Any]] = {}
        self._connack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pong: asyncio.Future[Any] | None = None
        # Packet ids of the server's QoS 2 PUBLISHes we PUBREC'd and still hold
        # (until its PUBREL), so that a re-sent one is not delivered twice.
        self._awaiting_pubrel: set[int] = set()
        self._last_id = 0
        self._window: asyncio.Semaphore | None = None
        self._last_sent = asyncio.get_running_loop().time()
        self._closed = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        client_id: str = "",
        *,
        version: int = mw.MQTT311,
        clean_start: bool = True,
        keep_alive: int = 60,
        will: Any = None,
        properties: mw.Properties | None = None,
        timeout: float = 10.0,
    ) -> Client:
        """Open the connection, send CONNECT and wait for CONNACK.

        Raises:
            ConnectionRefused: the CONNACK carries a non-zero code (the connection is
                closed).
            TimeoutError: no CONNACK within ``timeout`` seconds.
        """
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        client = cls(reader, writer, version, keep_alive)
        client._tasks.append(asyncio.create_task(client._read_loop()))
        client._send(mw.Connect(
            client_id, protocol_version=version, clean_start=clean_start,
            keep_alive=keep_alive, will=will, properties=properties,
        ))
        try:
            connack = await asyncio.wait_for(client._connack, timeout)
        except BaseException:
            await client.close()
            raise
        client.connack = connack
        if connack.reason_code != 0:
            await client.close()
            raise ConnectionRefused(connack)
        # MQTT 5.0 [MQTT-3.3.4-7]: no more unacknowledged QoS 1/2 PUBLISHes than the
        # server's Receive Maximum (65,535 when absent, §3.2.2.3.3).
        props = connack.properties
        receive_maximum = props.receive_maximum if props is not None else None
        client._window = asyncio.Semaphore(receive_maximum or 65535)
        if keep_alive:
            client._tasks.append(asyncio.create_task(client._ping_loop()))
        return client

    # Requests ----------------------------------------------------------------------------

    async def subscribe(self, *subscriptions: Any, properties: mw.Properties | None = None,
                        timeout: float = 10.0) -> list[int]:
        """Subscribe; each argument is a ``mqttwire.Subscription`` or a (filter, qos) pair.
        Returns the SUBACK's codes, one per subscription."""
        subs = [s if isinstance(s, mw.Subscription) else mw.Subscription(s[0], qos=s[1])
                for s in subscriptions]
        pid = self._next_packet_id()
        suback = await self._request(mw.Subscribe(pid, subs, properties=properties),
                                     mw.SubAck, pid, timeout)
        return list(suback.reason_codes)

    async def unsubscribe(self, *topic_filters: str, timeout: float = 10.0) -> list[int]:
        """Unsubscribe; returns the UNSUBACK's codes (empty before MQTT 5.0)."""
        pid = self._next_packet_id()
        unsuback = await self._request(mw.Unsubscribe(pid, list(topic_filters)),
                                       mw.UnsubAck, pid, timeout)
        return list(unsuback.reason_codes)

    async def publish(self, topic: str, payload: bytes = b"", *, qos: int = 0,
                      retain: bool = False, properties: mw.Properties | None = None,
                      timeout: float = 10.0) -> int | None:
        """Publish, and for QoS 1 and 2 wait until the exchange is complete.

        Returns None for QoS 0, else the reason code of the PUBACK, or of the PUBREC
        when it failed (0x80 or more), or of the PUBCOMP.
        """
        if qos == 0:
            self._send(mw.Publish(topic, payload, retain=retain, properties=properties))
            return None
        assert self._window is not None
        async with self._window:
            pid = self._next_packet_id()
            publish = mw.Publish(topic, payload, qos=qos, retain=retain, packet_id=pid,
                                 properties=properties)
            if qos == 1:
                answer = await self._request(publish, mw.PubAck, pid, timeout)
            else:
                # QoS 2 (MQTT 5.0 §4.3.3): PUBLISH -> PUBREC, PUBREL -> PUBCOMP.
                answer = await self._request(publish, mw.PubRec, pid, timeout)
                if answer.reason_code < 0x80:
                    answer = await self._request(mw.PubRel(pid), mw.PubComp, pid, timeout)
            code: int = answer.reason_code
            return code

    async def receive(self, timeout: float | None = None) -> Any:
        """The next Application Message (a ``mqttwire.Publish``).

        Raises:
            TimeoutError: none within ``timeout`` seconds.
            ConnectionError: the connection closed and no message is left.
        """
        get = asyncio.ensure_future(self.messages.get())
        done, _ = await asyncio.wait({get, self._closed}, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
        if get in done:
            return get.result()
        get.cancel()
        if not self.messages.empty():
            return self.messages.get_nowait()
        if self._closed.done():
            raise ConnectionError("connection closed")
        raise TimeoutError(f"no message within {timeout} s")

    async def ping(self, timeout: float = 10.0) -> None:
        """Send PINGREQ and wait for PINGRESP."""
        self._pong = asyncio.get_running_loop().create_future()
        self._send(mw.PingReq())
        await asyncio.wait_for(self._pong, timeout)

    async def disconnect(self, reason_code: int = 0,
                         properties: mw.Properties | None = None) -> None:
        """Send DISCONNECT (MQTT 5.0: with ``reason_code``) and close the connection."""
        if not self._closed.done():
            self._send(mw.Disconnect(reason_code=reason_code, properties=properties))
        await self.close()

    async def close(self) -> None:
        """Close the connection without DISCONNECT (the server publishes the will)."""
        for task in self._tasks:
            task.cancel()
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._finish(ConnectionError("connection closed"))

    # Internals ---------------------------------------------------------------------------

    def _send(self, packet: Any) -> None:
        if self._closed.done():
            raise ConnectionError("connection closed")
        self._writer.write(packet.encode(version=self.version))
        self._last_sent = asyncio.get_running_loop().time()

    def _next_packet_id(self) -> int:
        """A packet identifier no request of ours is using (3.1.1 [MQTT-2.3.1-2])."""
        pid = self._last_id
        while True:
            pid = pid % 65535 + 1
            if not any(key[1] == pid for key in self._waiting):
                self._last_id = pid
                return pid

    async def _request(self, packet: Any, answer: type, pid: int, timeout: float) -> Any:
        future = asyncio.get_running_loop().create_future()
        self._waiting[(answer, pid)] = future
        try:
            self._send(packet)
            await self._writer.drain()
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiting.pop((answer, pid), None)

    async def _read_loop(self) -> None:
        error: BaseException = ConnectionError("connection closed by the server")
        try:
            while True:
                data = await self._reader.read(65536)
                if not data:
                    break
                for packet in self._decoder.feed(data):
                    self._handle(packet)
        except (ConnectionError, mw.MQTTWireError) as exc:
            # Bad bytes from the server: 5.0 would send DISCONNECT first; an example
            # client just closes.
            error = exc
        finally:
            self._writer.close()
            self._finish(error)

    def _finish(self, error: BaseException) -> None:
        """Fail every pending request: the connection is gone."""
        if not self._closed.done():
            self._closed.set_result(None)
        for future in [self._connack, self._pong, *self._waiting.values()]:
            if future is not None and not future.done():
                future.set_exception(error)

    def _handle(self, packet: Any) -> None:
        kind = type(packet)
        if kind is mw.Publish:
            self._on_publish(packet)
        elif kind is mw.PubRel:
            # QoS 2, receiving side: release the packet id [MQTT-4.3.3-11] (5.0 numbers).
            self._awaiting_pubrel.discard(packet.packet_id)
            self._send(mw.PubComp(packet.packet_id))
        elif kind is mw.ConnAck:
            if not self._connack.done():
                self._connack.set_result(packet)
        elif kind is mw.PingResp:
            if self._pong is not None and not self._pong.done():
                self._pong.set_result(packet)
        elif kind is mw.Disconnect:
            self._finish(ConnectionError(
                f"server sent DISCONNECT 0x{packet.reason_code:02X}"))
        else:
            # PUBACK, PUBREC, PUBCOMP, SUBACK, UNSUBACK answer one of our requests.
            future = self._waiting.get((kind, packet.packet_id))
            if future is not None and not future.done():
                future.set_result(packet)

    def _on_publish(self, packet: Any) -> None:
        pid = packet.packet_id
        if packet.qos == 0:
            self.messages.put_nowait(packet)
        elif packet.qos == 1:
            self.messages.put_nowait(packet)
            self._send(mw.PubAck(pid))
        else:
            # QoS 2: deliver once, then answer every copy with PUBREC until the PUBREL.
            if pid not in self._awaiting_pubrel:
                self._awaiting_pubrel.add(pid)
                self.messages.put_nowait(packet)
            self._send(mw.PubRec(pid))

    async def _ping_loop(self) -> None:
        """3.1.1 [MQTT-3.1.2-23]: send PINGREQ when nothing else went out for Keep Alive
        seconds (a little earlier, to stay clear of the server's 1.5x limit)."""
        loop = asyncio.get_running_loop()
        while not self._closed.done():
            idle = loop.time() - self._last_sent
            if idle >= self.keep_alive * 0.75:
                self._send(mw.PingReq())
                idle = 0
            await asyncio.sleep(self.keep_alive * 0.75 - idle)


# ---------------------------------------------------------------------------------------


async def _main(args: argparse.Namespace) -> None:
    client = await Client.connect(args.host, args.port, args.id, version=args.level)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Publish or subscribe with mqttwire.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1883)
    parser.add_argument("--id", default="", help="client identifier (default: server's)")
    parser.add_argument("--level", type=int, choices=(3, 4, 5), default=4,
                        help="protocol level: 3 = MQTT 3.1, 4 = 3.1.1, 5 = 5.0")
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
