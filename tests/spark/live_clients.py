"""The clients around the live source's subscriber in test_live_tls.py and
test_live_ws.py: paho-mqtt publishing numbered messages, and taking what the subscriber
received."""

from __future__ import annotations

import time
from typing import Any

from local_servers import HOST

#: Bound on each wait for messages, in seconds.
TIMEOUT = 60.0


def publish(port: int, prefix: str, payloads: list[bytes], *, version: int = 4,
            websocket: bool = False) -> None:
    """paho-mqtt (client id ``PREFIX-pub``, MQTT ``version``, over TCP or a WebSocket at
    path /mqtt) publishes ``payloads`` on PREFIX/0, PREFIX/1, ... at QoS 1, each
    acknowledged before the next."""
    import paho.mqtt.client as mqtt

    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, f"{prefix}-pub",
                         transport="websockets" if websocket else "tcp",
                         protocol=mqtt.MQTTv5 if version == 5 else mqtt.MQTTv311)
    if websocket:
        client.ws_set_options(path="/mqtt")
    client.connect(HOST, port)
    client.loop_start()
    try:
        for n, payload in enumerate(payloads):
            client.publish(f"{prefix}/{n}", payload, qos=1).wait_for_publish(TIMEOUT)
    finally:
        client.loop_stop()
        client.disconnect()


def take(sub: Any, count: int) -> list[Any]:
    """What the subscriber (mqttwire.spark.live.subscriber.Subscriber) received, until
    ``count`` messages or TIMEOUT; its error, if it has one, raised."""
    got: list[Any] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        sub.raise_error()
        got += sub.take()
        time.sleep(0.01)
    return got
