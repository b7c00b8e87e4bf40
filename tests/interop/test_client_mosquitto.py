"""examples/client.py against a real Mosquitto broker, at protocol levels 3, 4 and 5.

The client runs in this process on the mqttwire implementation ``import mqttwire``
chose.  To know that nothing more is on its way, a subscriber publishes a marker to
itself and reads up to it: Mosquitto handles one connection's packets in order, so
whatever its SUBSCRIBE caused was sent before the marker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from types import ModuleType
from typing import Any

import pytest

import mqttwire as mw

pytestmark = pytest.mark.interop

LEVELS = [pytest.param(3, id="v31"), pytest.param(4, id="v311"), pytest.param(5, id="v5")]


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def up_to_marker(client: Any, marker: str) -> list[tuple[str, bytes, int, bool]]:
    """Publish to ``marker`` (which ``client`` subscribes to) and return what arrived
    before it."""
    await client.publish(marker, b"", qos=1)
    out: list[tuple[str, bytes, int, bool]] = []
    while True:
        msg = await client.receive(timeout=10)
        if msg.topic == marker:
            return out
        out.append((msg.topic, msg.payload, msg.qos, msg.retain))


@pytest.mark.parametrize("level", LEVELS)
def test_publish_and_receive_at_each_qos(mosquitto_broker: Any, example_client: ModuleType,
                                         level: int) -> None:
    Client = example_client.Client

    async def scenario() -> None:
        at = (mosquitto_broker.host, mosquitto_broker.port)
        sub = await Client.connect(*at, "sub", version=level)
        pub = await Client.connect(*at, "pub", version=level)
        try:
            assert await sub.subscribe(("q/#", 2), ("marker", 0)) == [2, 0]
            # None for QoS 0; the PUBACK / PUBCOMP reason code 0 otherwise.
            assert [await pub.publish(f"q/{n}", b"m%d" % n, qos=n) for n in (0, 1, 2)] == [
                None, 0, 0
            ]
            got = [await sub.receive(timeout=10) for _ in range(3)]
            assert [(m.topic, m.payload, m.qos) for m in got] == [
                ("q/0", b"m0", 0), ("q/1", b"m1", 1), ("q/2", b"m2", 2)
            ]
            assert await up_to_marker(sub, "marker") == []  # each exactly once
        finally:
            await pub.disconnect()
            await sub.disconnect()

    run(scenario())


@pytest.mark.parametrize("level", LEVELS)
def test_retained_messages(mosquitto_broker: Any, example_client: ModuleType,
                           level: int) -> None:
    Client = example_client.Client

    async def late_subscriber(client_id: str) -> list[tuple[str, bytes, int, bool]]:
        sub = await Client.connect(mosquitto_broker.host, mosquitto_broker.port, client_id,
                                   version=level)
        try:
            await sub.subscribe(("r/#", 2), (f"marker/{client_id}", 1))
            return await up_to_marker(sub, f"marker/{client_id}")
        finally:
            await sub.disconnect()

    async def scenario() -> None:
        pub = await Client.connect(mosquitto_broker.host, mosquitto_broker.port, "pub",
                                   version=level)
        try:
            await pub.publish("r/a", b"first", qos=2, retain=True)
            await pub.publish("r/a", b"second", qos=1, retain=True)
            await pub.publish("r/b", b"plain", qos=1)  # not retained
            assert await late_subscriber("late1") == [("r/a", b"second", 1, True)]
            await pub.publish("r/a", b"", qos=1, retain=True)  # clears r/a
            assert await late_subscriber("late2") == []
        finally:
            await pub.disconnect()

    run(scenario())


@pytest.mark.parametrize("level", LEVELS)
def test_will_on_close_without_disconnect(mosquitto_broker: Any, example_client: ModuleType,
                                          level: int) -> None:
    Client = example_client.Client

    async def scenario() -> None:
        at = (mosquitto_broker.host, mosquitto_broker.port)
        watcher = await Client.connect(*at, "watcher", version=level)
        await watcher.subscribe(("will/#", 1))
        doomed = await Client.connect(
            *at, "doomed", version=level, will=mw.Will("will/doomed", b"gone", qos=1)
        )
        await doomed.close()
        msg = await watcher.receive(timeout=10)
        assert (msg.topic, msg.payload, msg.qos) == ("will/doomed", b"gone", 1)
        await watcher.disconnect()

    run(scenario())


def test_v5_properties_round_trip(mosquitto_broker: Any, example_client: ModuleType) -> None:
    Client = example_client.Client
    sent = mw.Properties(
        payload_format_indicator=1,
        message_expiry_interval=600,
        content_type="application/json",
        response_topic="reply/to",
        correlation_data=b"\x01\x02",
        user_properties=[("a", "1"), ("b", "2"), ("a", "3")],
    )

    async def scenario() -> None:
        at = (mosquitto_broker.host, mosquitto_broker.port)
        sub = await Client.connect(*at, "sub", version=5)
        pub = await Client.connect(*at, "pub", version=5)
        try:
            props = mw.Properties(subscription_identifiers=[42])
            assert await sub.subscribe(("p/#", 1), properties=props) == [1]
            await pub.publish("p/x", b"{}", qos=1, properties=sent)
            msg = await sub.receive(timeout=10)
            got = msg.properties
            assert got.subscription_identifiers == [42]
            assert got.message_expiry_interval in (599, 600)
            for name in ("payload_format_indicator", "content_type", "response_topic",
                         "correlation_data", "user_properties"):
                assert getattr(got, name) == getattr(sent, name), name
        finally:
            await pub.disconnect()
            await sub.disconnect()

    run(scenario())
