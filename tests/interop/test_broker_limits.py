"""examples/broker.py's bounds (docs/session.md, "Bounds") with real sockets and clients:
a subscriber that stops reading while QoS 0 messages flood in costs the broker a bounded
amount of memory (the glue's write buffer limits and the session layer's unwritten
bound), and gets, once it reads again, an in-order run of them and the QoS 1 message
sent after; paho-mqtt at 5.0 sees the Maximum QoS, Retain Available and the capped
Session Expiry Interval in CONNACK, and is disconnected with 0x9B and 0x9A when it goes
past them; a 3.1.1 client over Maximum QoS is disconnected; mosquitto_sub is granted
Maximum QoS, mosquitto_pub at 5.0 keeps to it and at 3.1.1 is disconnected.

The memory figure for the full load of issue 37 (300,000 messages of 1 kB) is in
benchmarks/README.md (benchmarks/slow_subscriber.py); this test sends fewer and bounds the
broker's growth generously (RSS is noisy): without the bound it grows by about the size
of what was sent.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import mqttwire as mw

pytestmark = pytest.mark.interop

mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")

TIMEOUT = 10.0
MESSAGES = 40_000
PAYLOAD = b"x" * 1000
#: How much the broker's resident set may grow while MESSAGES * 1 kB (40 MB) are routed
#: to the subscriber that does not read: its bound is 1 MiB of unwritten output; the
#: rest is allocator noise.  Four runs grew by 0.9 to 1.1 MB (both codecs); without the
#: glue's part of the bound (the transport's buffer unbounded), by 34.8 MB.
RSS_CEILING_MB = 12.0


def broker_pid() -> int:
    """The examples/broker.py this test started (the only child of ours running it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"examples/broker.py" in cmdline:
            found.append(int(entry.name))
    assert len(found) == 1, found
    return found[0]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def in_log(server: Any, text: str) -> bool:
    """Whether the broker's log has ``text``, waiting for it up to TIMEOUT (the broker
    logs an event before it writes what the event caused, but its stderr goes through
    the file system)."""
    deadline = time.monotonic() + TIMEOUT
    while text not in server.log_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


class Raw:
    """A raw MQTT 3.1.1 client socket, decoding with mqttwire."""

    def __init__(self, server: Any, client_id: str) -> None:
        self.sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
        self.decoder = mw.StreamDecoder(4)
        self.pending: list[Any] = []
        self.sock.sendall(mw.Connect(client_id, protocol_version=4, keep_alive=0).encode(4))
        assert isinstance(self.next(), mw.ConnAck)

    def next(self) -> Any:
        while not self.pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed by the broker")
            self.pending += self.decoder.feed(data)
        return self.pending.pop(0)


def test_subscriber_that_does_not_read_costs_bounded_memory(
        start_example_broker_with: Callable[..., Any]) -> None:
    server = start_example_broker_with()
    pid = broker_pid()
    sub = Raw(server, "stuck")
    sub.sock.sendall(mw.Subscribe(1, [mw.Subscription("flood/#", qos=1)]).encode(4))
    assert isinstance(sub.next(), mw.SubAck)
    # A small receive buffer, so that the kernel holds little of the flood for it.
    sub.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    pub = Raw(server, "flooder")
    before = rss_mb(pid)
    for start in range(0, MESSAGES, 1000):
        pub.sock.sendall(b"".join(mw.Publish("flood/a", b"%08d" % i + PAYLOAD[8:]).encode(4)
                                  for i in range(start, start + 1000)))
    # Then one QoS 1 message, and a PINGREQ: its PINGRESP says the broker has handled it all.
    pub.sock.sendall(mw.Publish("flood/end", b"end", qos=1, packet_id=1).encode(4)
                     + mw.PingReq().encode(4))
    assert isinstance(pub.next(), mw.PubAck) and isinstance(pub.next(), mw.PingResp)
    grown = rss_mb(pid) - before
    assert grown < RSS_CEILING_MB, f"the broker grew by {grown:.1f} MB"
    # The subscriber reads again: an in-order run with gaps where messages were dropped,
    # then the QoS 1 message, which is never dropped for the write bound.
    numbers = []
    while True:
        packet = sub.next()
        if packet.topic == "flood/end":
            break
        numbers.append(int(packet.payload[:8]))
    assert numbers == sorted(set(numbers)) and 0 < len(numbers) < MESSAGES
    sub.sock.sendall(mw.PubAck(packet.packet_id).encode(4))
    assert in_log(server, "stuck: dropping messages (unwritten)")
    sub.sock.close()
    pub.sock.close()


def paho_props(packet_type: str, **values: Any) -> Any:
    out = mqtt.Properties(getattr(mqtt.PacketTypes, packet_type))
    for name, value in values.items():
        setattr(out, name, value)
    return out


def test_v5_limits_in_connack_and_enforced(start_example_broker_with: Callable[..., Any],
                                           paho_to: Callable[..., Any]) -> None:
    server = start_example_broker_with("--max-qos", "1", "--no-retain",
                                       "--max-session-expiry", "60")
    paho = paho_to(server)
    client = paho(5, "limited", properties=paho_props("CONNECT", SessionExpiryInterval=3600))
    got = client.connack_properties
    assert got.MaximumQoS == 1 and got.RetainAvailable == 0
    assert got.SessionExpiryInterval == 60  # the server's, §3.2.2.3.2
    assert client.subscribe("lim/#", 2) == [1]  # granted at most Maximum QoS
    client.client.publish("lim/a", b"two", qos=2)
    assert client.disconnects.get(timeout=TIMEOUT) == 0x9B  # QoS not supported
    retainer = paho(5, "retainer")
    retainer.client.publish("lim/b", b"kept", qos=0, retain=True)
    assert retainer.disconnects.get(timeout=TIMEOUT) == 0x9A  # Retain not supported


def test_v311_over_maximum_qos_is_closed(start_example_broker_with: Callable[..., Any]) -> None:
    server = start_example_broker_with("--max-qos", "0")
    client = Raw(server, "old")
    client.sock.sendall(mw.Publish("lim/a", b"one", qos=1, packet_id=1).encode(4))
    with pytest.raises(ConnectionError):  # no PUBACK: closed (3.1.1 has no reason code)
        client.next()
    client.sock.close()
    assert in_log(server, "Maximum QoS")


def mosquitto(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"mosquitto-clients not installed: no {program} on PATH")
    return path


def test_mosquitto_clients_over_maximum_qos(start_example_broker_with: Callable[..., Any]
                                            ) -> None:
    server = start_example_broker_with("--max-qos", "1")
    address = ["-h", server.host, "-p", str(server.port)]

    def run(program: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([mosquitto(program), *address, *args], capture_output=True,
                              text=True, timeout=TIMEOUT, check=False)

    # A QoS 2 subscription is accepted and granted 1 [MQTT-3.2.2-10].
    sub = run("mosquitto_sub", "-V", "5", "-q", "2", "-t", "lim/#", "-d", "-W", "1")
    assert "Subscribed (mid: 1): 1" in sub.stdout, sub.stdout
    # At 5.0 the client reads Maximum QoS 1 in CONNACK and does not send QoS 2
    # [MQTT-3.2.2-11]; at 3.1.1 it cannot know, sends it, and the broker closes.
    v5 = run("mosquitto_pub", "-V", "5", "-q", "2", "-t", "lim/a", "-m", "x")
    assert "QoS not supported" in v5.stderr, v5.stderr
    v311 = run("mosquitto_pub", "-V", "311", "-q", "2", "-t", "lim/a", "-m", "x")
    assert v311.returncode != 0 and "connection was lost" in v311.stderr, v311.stderr
    assert in_log(server, "QoS 2 above the server's Maximum QoS 1")
