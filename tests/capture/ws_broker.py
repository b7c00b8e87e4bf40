"""The project's example broker (examples/broker.py) behind a WebSocket listener, for the
real MQTT-over-WebSocket captures of test_capture_websocket.py.

The ``websockets`` package serves the HTTP Upgrade (subprotocol ``mqtt``, no compression
extension); each binary message a client sends goes to its broker connection.  What the
broker writes goes out as fragmented binary messages: the writes queued at that moment
joined (a frame may then hold several MQTT packets), their first byte in a frame of its
own and the rest in a continuation frame (a packet split across frames, as MQTT Explorer
sends its packets).  Run: ``python ws_broker.py PORT``; it prints ``listening on
127.0.0.1:PORT`` and the mqttwire it runs once it listens.
"""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _load_broker() -> Any:
    spec = importlib.util.spec_from_file_location("example_broker", EXAMPLES / "broker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


example = _load_broker()


class Outgoing:
    """What examples/broker.py's Server takes for a client's transport: ``write`` and
    ``close``, queued in order for the WebSocket, and ``get_write_buffer_size`` (the
    bytes queued and not yet handed to it), which the broker reports to the session
    layer's bound on unwritten output."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)
        self.queue.put_nowait(data)

    def get_write_buffer_size(self) -> int:
        return self.size

    def close(self) -> None:
        self.queue.put_nowait(None)

    # examples/broker.py's close() lingers over a TCP connection (write_eof, its
    # protocol reading on); here it closes at once, and the WebSocket's closing handshake
    # is the orderly end.  Without these two, a client's DISCONNECT failed the handler
    # (AttributeError) and the client got close code 1011 instead of 1000.
    def get_protocol(self) -> None:
        return None

    def can_write_eof(self) -> bool:
        return False


async def _writer(ws: ServerConnection, out: Outgoing) -> None:
    queue = out.queue
    while (data := await queue.get()) is not None:
        closing = False
        while not queue.empty():  # join what else is queued
            more = queue.get_nowait()
            if more is None:
                closing = True
                break
            data += more
        out.size -= len(data)
        # An iterable of bytes: one binary message in fragments (RFC 6455 §5.4).
        await ws.send([data[:1], data[1:]] if len(data) > 1 else data)
        if closing:
            break
    await ws.close()


async def main(port: int) -> None:
    server = example.Server(example.BrokerConfig())
    loop = server.loop

    async def client(ws: ServerConnection) -> None:
        out = Outgoing()
        conn = server.broker.new_connection(loop.time(), name=str(ws.remote_address))
        server.transports[conn] = out
        server.flush([])
        writer = asyncio.create_task(_writer(ws, out))
        try:
            async for message in ws:
                if isinstance(message, str):  # a text frame [MQTT-6.0.0-1]: close
                    break
                server.flush(conn.receive_data(message, loop.time()))
        except ConnectionClosed:
            pass  # a client that drops the TCP connection without a close frame
        finally:
            server.transports.pop(conn, None)
            server.flush(conn.connection_lost(loop.time()))
            out.close()
            await writer

    async with serve(client, "127.0.0.1", port, subprotocols=[Subprotocol("mqtt")],
                     compression=None):
        print(f"listening on 127.0.0.1:{port} ({example.mw.__file__})", flush=True)
        await asyncio.Future()  # until terminated


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
