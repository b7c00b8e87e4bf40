"""Messages per second through a broker: examples/broker.py on the Cython extension and on
the pure-Python fallback, and Mosquitto, under the same load in one run.

One publisher sends a fixed number of small QoS 0 or QoS 1 PUBLISHes (MQTT 3.1.1) to one
topic; N subscribers (1 and 10) receive them at the same QoS and acknowledge QoS 1.  The
time measured runs from the first PUBLISH written until every subscriber has all
messages (and, at QoS 1, the publisher all its PUBACKs); connecting and subscribing
happen before, outside it.  The load generator is the same for every broker: raw asyncio
protocols on pre-encoded bytes, which only frame the incoming packets, so it costs little
and does not depend on the codec under test.  It runs in this process, on the same
machine as the broker: ``extra_info`` records the share of the measured time it spent on
the CPU, and near 1.0 the figure is the generator's limit rather than the broker's.

The messages per second in ``extra_info`` come from the median round.

Run:  python -m pytest benchmarks/bench_broker.py --benchmark-only \
          --benchmark-group-by=group --benchmark-columns=median,min,max,rounds
"""

from __future__ import annotations

import asyncio
import itertools
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from local_servers import start_mosquitto

import mqttwire as mw

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
MESSAGES = 5000
ROUNDS = 5
PAYLOAD = b"x" * 32
TOPIC = "bench/topic"
#: QoS 1 PUBLISHes the publisher keeps unacknowledged (Mosquitto gets the same window
#: towards its subscribers below; the example broker keeps 64 towards 3.1.1 clients).
WINDOW = 64
#: Bound on one measured transfer, and on starting a broker.
TIMEOUT = 120.0

BROKERS = [
    pytest.param("cython", id="mqttwire-cython"),
    pytest.param("python", id="mqttwire-python"),
    pytest.param("mosquitto", id="mosquitto"),
]

_ids = itertools.count()


# ---------------------------------------------------------------------------------------
# Brokers


def _stop(proc: subprocess.Popen[Any]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _start_example(implementation: str) -> tuple[subprocess.Popen[bytes], int]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("MQTTWIRE_PURE_PYTHON", None)
    if implementation == "python":
        env["MQTTWIRE_PURE_PYTHON"] = "1"
    # No session queue bound, as Mosquitto gets below (the example broker's default,
    # 1,000 messages as Mosquitto's, drops QoS 1 messages queued past it: a slow broker
    # would then never deliver them all, and the measure would hang).
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "broker.py"), "--host", HOST, "--port", "0",
         "--max-queued-messages", "0", "--max-queued-bytes", "0"],
        stdout=subprocess.PIPE, bufsize=0, env=env,
    )
    assert proc.stdout is not None
    data = b""
    deadline = time.monotonic() + TIMEOUT
    # "listening on HOST:PORT", then "mqttwire implementation: NAME"
    while data.count(b"\n") < 2:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(proc.stdout.fileno(), 4096) if ready else b""
        if not chunk:
            _stop(proc)
            raise RuntimeError(f"examples/broker.py did not start: {data!r}")
        data += chunk
    first, second = data.decode().splitlines()[:2]
    if second.split(":")[-1].strip() != implementation:
        _stop(proc)
        raise RuntimeError(f"broker runs {second!r}, wanted {implementation}")
    return proc, int(first.rsplit(":", 1)[1])


def _start_mosquitto(workdir: Path) -> tuple[subprocess.Popen[bytes], int]:
    # No queue limit (by default Mosquitto drops QoS 0 messages beyond 1000 queued for a
    # client), the same QoS 1 window towards subscribers as the example broker, and
    # TCP_NODELAY as asyncio sets it for the example broker (Mosquitto leaves Nagle's
    # algorithm on by default, which about halves its rate here).
    return start_mosquitto(workdir, f"allow_anonymous true\nmax_queued_messages 0\n"
                                    f"max_inflight_messages {WINDOW}\nset_tcp_nodelay true\n")


@pytest.fixture(scope="module", params=BROKERS)
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """(name, port) of a running broker, one per kind for the whole module."""
    if request.param == "mosquitto":
        proc, port = _start_mosquitto(tmp_path_factory.mktemp("mosquitto"))
    else:
        if request.param == "cython":
            request.getfixturevalue("speedups")  # skips on a pure-Python install
        proc, port = _start_example(request.param)
    try:
        yield request.param, port
    finally:
        _stop(proc)


# ---------------------------------------------------------------------------------------
# The load generator


class Peer(asyncio.Protocol):
    """An MQTT 3.1.1 connection that frames what it receives (fixed header and
    Remaining Length, MQTT 3.1.1 §2.2), answers QoS 1 PUBLISHes with PUBACK, and counts
    the packets of one type: PUBLISH for a subscriber, PUBACK for the publisher."""

    def __init__(self, counted: int, expected: int, ready_on: int) -> None:
        self.counted = counted  # packet type counted
        self.expected = expected  # ``done`` once that many came
        self.ready_on = ready_on  # packet type that completes ``ready``: SUBACK or CONNACK
        self.count = 0
        loop = asyncio.get_running_loop()
        self.ready = loop.create_future()
        self.done = loop.create_future()
        self.on_ack: Any = None  # called on each PUBACK
        self._buffer = bytearray()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buf = self._buffer
        buf += data
        end = len(buf)
        pos = 0
        acks = bytearray()
        while end - pos >= 2:
            length, multiplier, i = 0, 1, pos + 1
            while i < end:
                byte = buf[i]
                i += 1
                length += (byte & 0x7F) * multiplier
                multiplier <<= 7
                if byte < 0x80:
                    break
            else:
                break  # the Remaining Length is not complete yet
            if i + length > end:
                break
            kind = buf[pos] >> 4
            if kind == self.counted:
                self.count += 1
            if kind == 3 and buf[pos] & 0x06:  # QoS 1 PUBLISH: PUBACK 0x40, 2, packet id
                topic_end = i + 2 + (buf[i] << 8 | buf[i + 1])
                acks += b"\x40\x02" + buf[topic_end:topic_end + 2]
            elif kind == 4 and self.on_ack is not None:
                self.on_ack()
            elif kind == self.ready_on and not self.ready.done():
                self.ready.set_result(None)
            pos = i + length
        del buf[:pos]
        if acks:
            self.transport.write(bytes(acks))
        if self.count >= self.expected and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.ready, self.done):
            if not future.done():
                future.set_exception(ConnectionError("broker closed the connection"))


async def _connect(port: int, subscribe_qos: int | None) -> Peer:
    """A subscriber (``subscribe_qos`` given) or the publisher, connected and ready."""
    loop = asyncio.get_running_loop()
    if subscribe_qos is None:  # the publisher: counts PUBACKs, ready on CONNACK
        _, peer = await loop.create_connection(lambda: Peer(4, MESSAGES, 2), HOST, port)
    else:  # a subscriber: counts PUBLISHes, ready on SUBACK
        _, peer = await loop.create_connection(lambda: Peer(3, MESSAGES, 9), HOST, port)
    packets: list[Any] = [mw.Connect(f"bench-{next(_ids)}", protocol_version=4, keep_alive=0)]
    if subscribe_qos is not None:
        packets.append(mw.Subscribe(1, [mw.Subscription(TOPIC, qos=subscribe_qos)]))
    peer.transport.write(b"".join(p.encode(version=4) for p in packets))
    await asyncio.wait_for(peer.ready, TIMEOUT)
    return peer


async def _transfer(publisher: Peer, subscribers: list[Peer], publishes: list[bytes],
                    qos: int) -> None:
    """Send every PUBLISH and wait for the last delivery (and PUBACK)."""
    if qos == 0:
        publisher.transport.write(b"".join(publishes))
    else:
        pending = iter(publishes[WINDOW:])
        publisher.on_ack = lambda: publisher.transport.write(next(pending, b""))
        publisher.transport.write(b"".join(publishes[:WINDOW]))
    waits = [s.done for s in subscribers] + ([publisher.done] if qos else [])
    await asyncio.wait_for(asyncio.gather(*waits), TIMEOUT)


@pytest.mark.parametrize("subscribers", [1, 10])
@pytest.mark.parametrize("qos", [0, 1])
def test_broker_throughput(benchmark: Any, broker: tuple[str, int], qos: int,
                           subscribers: int) -> None:
    name, port = broker
    # Encoded once, outside the measurement; packet ids 1..MESSAGES for QoS 1.
    publishes = [
        mw.Publish(TOPIC, PAYLOAD, qos=qos, packet_id=n + 1 if qos else None).encode(version=4)
        for n in range(MESSAGES)
    ]
    disconnect = mw.Disconnect().encode(version=4)
    loop = asyncio.new_event_loop()
    cpu: list[float] = []  # CPU seconds the load generator used per round

    def setup() -> tuple[tuple[Any, ...], dict[str, Any]]:
        async def connect_all() -> tuple[Peer, list[Peer]]:
            subs = [await _connect(port, qos) for _ in range(subscribers)]
            return await _connect(port, None), subs

        return loop.run_until_complete(connect_all()), {}

    def transfer(publisher: Peer, subs: list[Peer]) -> None:
        started = time.process_time()
        loop.run_until_complete(_transfer(publisher, subs, publishes, qos))
        cpu.append(time.process_time() - started)

    def teardown(publisher: Peer, subs: list[Peer]) -> None:
        for peer in (publisher, *subs):
            peer.transport.write(disconnect)
            peer.transport.close()
        loop.run_until_complete(asyncio.sleep(0.05))  # let the broker drop them

    benchmark.group = f"QoS {qos}, 1 publisher -> {subscribers} subscriber(s)"
    try:
        benchmark.pedantic(transfer, setup=setup, teardown=teardown, rounds=ROUNDS)
    finally:
        loop.close()
    if benchmark.disabled:  # --benchmark-disable: one untimed round, no statistics
        return
    # The median round: the machine is shared, and one busy moment should not decide.
    seconds = benchmark.stats.stats.median
    benchmark.extra_info.update(
        broker=name,
        messages=MESSAGES,
        deliveries=MESSAGES * subscribers,
        published_per_s=round(MESSAGES / seconds),
        delivered_per_s=round(MESSAGES * subscribers / seconds),
        # Near 1.0, the load generator (not the broker) was the bottleneck.
        load_generator_cpu_share=round(sorted(cpu)[len(cpu) // 2] / seconds, 2),
    )
