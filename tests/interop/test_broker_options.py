"""examples/broker.py's session-layer features with real clients: Topic Aliases both
ways, Receive Maximum both ways, the Server Keep Alive cap (--max-keep-alive), the
subscribe deny rule (--deny), session expiry; and examples/client.py's command line.

The broker runs with the options below (``shared_example_broker`` reads
``BROKER_OPTIONS``), once per mqttwire implementation; the keep-alive test starts one of
its own.  paho-mqtt 2.2 sends and accepts Topic Aliases but does not resolve the ones
it receives (it hands over the empty topic and the TopicAlias property), so the tests
resolve them, which also shows what went over the wire.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.interop

mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
PacketTypes = mqtt.PacketTypes
Properties = mqtt.Properties

REPO = Path(__file__).resolve().parents[2]
BROKER_SCRIPT = REPO / "examples" / "broker.py"
TIMEOUT = 10.0
BROKER_OPTIONS = ("--topic-alias-maximum", "2", "--receive-maximum", "2",
                  "--deny", "secret/#", "--deny", "home/+/camera")


def props(packet_type: str, **values: Any) -> Any:
    """paho Properties for ``packet_type`` ("CONNECT", "PUBLISH", ...)."""
    out = Properties(getattr(PacketTypes, packet_type))
    for name, value in values.items():
        setattr(out, name, value)
    return out


# ---------------------------------------------------------------------------------------
# Topic Aliases


def test_v5_topic_aliases_from_the_client(shared_example_broker: Any,
                                          paho_to: Callable[..., Any]) -> None:
    paho = paho_to(shared_example_broker)
    sub = paho(4, "ta-sub")
    sub.subscribe("ta/#", 1)
    pub = paho(5, "ta-pub")
    assert pub.connack_properties.TopicAliasMaximum == 2
    # A PUBLISH with a topic and an alias sets the alias, one with an empty topic uses
    # it, a new topic replaces it (MQTT 5.0 §3.3.2.3.4).
    sent = [("ta/x", 1), ("", 1), ("ta/y", 2), ("", 2), ("ta/z", 1), ("", 1)]
    for n, (topic, alias) in enumerate(sent):
        pub.publish(topic, b"%d" % n, 1, properties=props("PUBLISH", TopicAlias=alias))
    assert [(m.topic, m.payload) for m in sub.collect(pub)] == [
        ("ta/x", b"0"), ("ta/x", b"1"), ("ta/y", b"2"), ("ta/y", b"3"), ("ta/z", b"4"),
        ("ta/z", b"5"),
    ]
    # Above the broker's Topic Alias Maximum: DISCONNECT 0x94 [MQTT-3.2.2-18].
    pub.client.publish("ta/x", b"", 1, properties=props("PUBLISH", TopicAlias=3))
    assert pub.disconnects.get(timeout=TIMEOUT) == 0x94


def test_v5_topic_aliases_to_the_client(shared_example_broker: Any,
                                        paho_to: Callable[..., Any]) -> None:
    paho = paho_to(shared_example_broker)
    sub = paho(5, "tb-sub", properties=props("CONNECT", TopicAliasMaximum=2))
    sub.subscribe("tb/#", 1)
    pub = paho(4, "tb-pub")
    topics = ["tb/a", "tb/a", "tb/b", "tb/c", "tb/a"]
    for topic in topics:
        pub.publish(topic, topic.encode(), 1)
    got = [m for m in sub.collect(pub)]
    # The broker assigns aliases up to the client's maximum, 2 [MQTT-3.1.2-26]: a
    # repeated topic goes as an empty one, a third topic takes the least recently used
    # alias, with its topic.
    assert [(m.topic, m.properties.TopicAlias) for m in got] == [
        ("tb/a", 1), ("", 1), ("tb/b", 2), ("tb/c", 1), ("tb/a", 2),
    ]
    aliases: dict[int, str] = {}
    resolved = []
    for m in got:
        if m.topic:
            aliases[m.properties.TopicAlias] = m.topic
        resolved.append((aliases[m.properties.TopicAlias], m.payload.decode()))
    assert resolved == [(topic, topic) for topic in topics]


def test_example_client_topic_aliases_both_ways(shared_example_broker: Any,
                                                example_client: ModuleType) -> None:
    async def scenario() -> None:
        client = await example_client.Client.connect(
            shared_example_broker.host, shared_example_broker.port, "tc", version=5,
            topic_alias_maximum=4)
        try:
            await client.subscribe(("tc/#", 1))
            for n in range(3):
                await client.publish("tc/a", b"%d" % n, qos=1)
            got = [await client.receive(timeout=TIMEOUT) for _ in range(3)]
            assert [(m.topic, m.payload) for m in got] == [("tc/a", b"0"), ("tc/a", b"1"),
                                                           ("tc/a", b"2")]
            # The second and third came as an alias alone.
            assert [m.properties.topic_alias for m in got] == [1, 1, 1]
        finally:
            await client.disconnect()

    asyncio.run(asyncio.wait_for(scenario(), 30))


# ---------------------------------------------------------------------------------------
# Receive Maximum


def test_v5_client_receive_maximum_respected(shared_example_broker: Any,
                                             paho_to: Callable[..., Any]) -> None:
    paho = paho_to(shared_example_broker)
    sub = paho(5, "rm-sub", properties=props("CONNECT", ReceiveMaximum=2), manual_ack=True)
    sub.subscribe("rm/#", 1)
    pub = paho(4, "rm-pub")
    for n in range(5):
        pub.publish("rm/x", b"%d" % n, 1)
    # No more than 2 unacknowledged QoS 1 PUBLISHes towards the client [MQTT-3.3.4-9];
    # each PUBACK lets the next one go.
    held = [sub.receive(), sub.receive()]
    with pytest.raises(TimeoutError):
        sub.receive(timeout=0.3)
    payloads = []
    while held:
        message = held.pop(0)
        payloads.append(message.payload)
        sub.client.ack(message.mid, 1)
        if len(payloads) + len(held) < 5:
            held.append(sub.receive())
    assert payloads == [b"%d" % n for n in range(5)]


def test_v5_client_over_receive_maximum_gets_0x93(shared_example_broker: Any) -> None:
    # CONNECT level 5, client "rmx", Clean Start, Keep Alive 60: RL = 6 + 1 + 1 + 2 + 1
    # (property length 00) + 5 = 16.  Then three QoS 2 PUBLISHes (0x34) to "a", packet
    # ids 1, 2, 3, property length 00: RL = 3 + 2 + 1 = 6, and no PUBREL.
    connect = bytes.fromhex("10 10 0004 4d515454 05 02 003c 00 0003 726d78")
    publishes = b"".join(bytes.fromhex(f"34 06 0001 61 000{n} 00") for n in (1, 2, 3))
    server = shared_example_broker
    with socket.create_connection((server.host, server.port), timeout=TIMEOUT) as sock:
        sock.sendall(connect + publishes)
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
    # CONNACK (0x20, RL < 128: its properties include Receive Maximum 2: 0x21 0002),
    # then PUBREC (0x50, RL 2) for ids 1 and 2, then DISCONNECT 0x93 Receive Maximum
    # exceeded, and the close.
    assert data[0] == 0x20 and b"\x21\x00\x02" in data[2:2 + data[1]]
    assert data[2 + data[1]:] == bytes.fromhex("50 02 0001 50 02 0002 e0 01 93")


# ---------------------------------------------------------------------------------------
# The subscribe deny rule: --deny secret/# --deny home/+/camera


@pytest.mark.parametrize("level", [pytest.param(4, id="v311"), pytest.param(5, id="v5")])
def test_deny_rule(shared_example_broker: Any, paho_to: Callable[..., Any],
                   level: int) -> None:
    paho = paho_to(shared_example_broker)
    sub = paho(level, f"deny-sub-{level}")
    refused = 0x87 if level == 5 else 0x80  # Not authorized / Failure
    # Refused: a filter that can match a denied topic ("#" and "home/hall/#" too);
    # granted: the others ("$SYS/#" matches no topic "secret/#" matches).
    assert sub.subscribe([("secret/x", 1), ("ok/x", 1), ("#", 0), ("home/hall/#", 1),
                          ("home/+/light", 1), ("$SYS/#", 0)]) == [
        refused, 1, refused, refused, 1, 0]
    if level == 5:
        assert sub.subscribe("$share/g/secret/#", 1) == [0x87]
    pub = paho(level, f"deny-pub-{level}")
    pub.publish("secret/x", b"no", 1)
    pub.publish("ok/x", b"yes", 1)
    assert [m.payload for m in sub.collect(pub)] == [b"yes"]


@pytest.mark.parametrize("a, b, expected", [
    ("secret/#", "secret", True),  # "#" matches its parent level too
    ("secret/#", "#", True),
    ("secret/#", "+/x", True),
    ("secret/#", "$SYS/#", False),
    ("#", "$SYS/x", False),  # a first-level wildcard matches no $ topic [MQTT-4.7.2-1]
    ("$SYS/#", "$SYS/+", True),
    ("secret/#", "$share/g/secret/x", True),  # the inner filter of a shared one
    ("secret/#", "$share/g/public/#", False),
    ("home/+/camera", "home/hall/#", True),
    ("home/+/camera", "home/+/light", False),
    ("a/+/c", "+/b/+", True),
    ("a/+", "a", False),
    ("a/b", "a/b/c", False),
])
def test_deny_rule_overlap(a: str, b: str, expected: bool) -> None:
    """--deny FILTER refuses a subscription when some topic matches both filters."""
    spec = importlib.util.spec_from_file_location("example_broker", BROKER_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.overlap(a, b) is expected
    assert module.overlap(b, a) is expected


def test_deny_rule_closes_mqtt31(shared_example_broker: Any,
                                 paho_to: Callable[..., Any]) -> None:
    sub = paho_to(shared_example_broker)(3, "deny-31")
    # An allowed filter first: granted, and the connection stays (no disconnect came
    # by the time a message through it arrives).
    assert sub.subscribe("open/x", 1) == [1]
    sub.publish("open/x", b"still here", 1)
    assert sub.receive().payload == b"still here"
    assert sub.disconnects.empty()
    # MQTT 3.1's SUBACK has no failure code: a denied filter closes the connection.
    sub.client.subscribe("secret/x", 1)
    sub.disconnects.get(timeout=TIMEOUT)


# ---------------------------------------------------------------------------------------
# Keep Alive cap and session expiry


def test_v5_server_keep_alive(start_example_broker_with: Callable[..., Any],
                              paho_to: Callable[..., Any]) -> None:
    paho = paho_to(start_example_broker_with("--max-keep-alive", "1"))
    # 3.x has no Server Keep Alive: the watcher's 60 s stands.
    watcher = paho(4, "watcher")
    watcher.subscribe("will/#", 1)
    # Asking for none (0) or for more than the cap: CONNACK Server Keep Alive 1
    # [MQTT-3.2.2-21].
    assert paho(5, "zero", keepalive=0).connack_properties.ServerKeepAlive == 1
    started = time.monotonic()
    capped = paho(5, "capped", keepalive=60, will=("will/capped", b"cut", 1, False))
    assert capped.connack_properties.ServerKeepAlive == 1
    capped.client.loop_stop()  # silent from now on
    # Closed after 1.5 x 1 s without a packet, not 1.5 x 60 s; the will goes out.
    assert [(m.topic, m.payload) for m in [watcher.receive()]] == [("will/capped", b"cut")]
    assert time.monotonic() - started >= 1.4


def test_v5_session_expiry(shared_example_broker: Any, paho_to: Callable[..., Any]) -> None:
    paho = paho_to(shared_example_broker)
    expiry = props("CONNECT", SessionExpiryInterval=1)
    paho(5, "se", properties=expiry).disconnect()
    # Back within the Session Expiry Interval: the session is there.
    again = paho(5, "se", clean=False, properties=expiry)
    assert again.session_present
    again.disconnect()
    time.sleep(1.3)
    # Later: it expired [MQTT-3.1.2-23].
    assert not paho(5, "se", clean=False, properties=expiry).session_present


# ---------------------------------------------------------------------------------------
# examples/client.py on the command line


def test_client_command_line(shared_example_broker: Any) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    base = [sys.executable, str(REPO / "examples" / "client.py"),
            "--host", shared_example_broker.host, "--port", str(shared_example_broker.port)]

    def run(*args: str) -> str:
        done = subprocess.run([*base, *args], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert run("--level", "5", "pub", "cli/x", "hello", "--qos", "1", "--retain") == ""
    # The retained message comes to the new subscription.
    assert run("sub", "cli/#", "--qos", "1", "--count", "1") == "cli/x hello\n"
    run("pub", "cli/x", "", "--qos", "1", "--retain")  # clears it
