"""Mosquitto's command-line clients (mosquitto_pub, mosquitto_sub) against
examples/broker.py, at MQTT 3.1.1 and 5.0.

mosquitto_sub prints each message with ``-F "%t|%q|%r|%p"`` (topic, QoS, RETAIN flag,
payload); its ``-d`` debug output tells when the SUBACK came, so publishing starts only
once the subscription exists.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = pytest.mark.interop

VERSIONS = ["mqttv311", "mqttv5"]
FORMAT = "%t|%q|%r|%p"


def address(server: Any, version: str) -> list[str]:
    return ["-h", server.host, "-p", str(server.port), "-V", version]


@pytest.mark.parametrize("version", VERSIONS)
def test_publish_at_each_qos(shared_example_broker: Any, mosquitto_sub: Callable[..., Any],
                             mosquitto_pub: Callable[..., None], version: str) -> None:
    at = address(shared_example_broker, version)
    prefix = f"qos-{version}"
    sub = mosquitto_sub(*at, "-q", "2", "-t", f"{prefix}/+", "-C", "3", "-W", "10",
                        "-F", FORMAT)
    sub.wait_subscribed()
    for qos in "012":
        mosquitto_pub(*at, "-q", qos, "-t", f"{prefix}/q{qos}", "-m", f"at {qos}")
    # Sorted: the QoS 0 publisher exits without waiting for anything, so the broker may
    # read the next publisher's connection first.
    assert sorted(sub.messages()) == [
        [f"{prefix}/q0", "0", "0", "at 0"],
        [f"{prefix}/q1", "1", "0", "at 1"],
        [f"{prefix}/q2", "2", "0", "at 2"],
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_retained_set_replaced_and_cleared(shared_example_broker: Any,
                                           mosquitto_sub: Callable[..., Any],
                                           mosquitto_pub: Callable[..., None],
                                           version: str) -> None:
    at = address(shared_example_broker, version)
    topic = f"retained-{version}/t"

    def first_retained() -> list[list[str]]:
        sub = mosquitto_sub(*at, "-q", "2", "-t", f"retained-{version}/#", "-C", "1",
                            "-W", "10", "-F", FORMAT)
        return sub.messages()

    mosquitto_pub(*at, "-q", "2", "-r", "-t", topic, "-m", "first")
    mosquitto_pub(*at, "-q", "1", "-r", "-t", topic, "-m", "second")
    mosquitto_pub(*at, "-q", "1", "-t", topic, "-m", "not retained")
    # The last retained message, RETAIN 1, at min(2 granted, 1 stored) = QoS 1.
    assert first_retained() == [[topic, "1", "1", "second"]]
    # (Every mosquitto_pub here waits for its acknowledgement, so the broker has stored
    # the message before the next client connects.)
    # -n sends an empty payload: it clears the topic.  Another retained topic then is
    # the first (and only) one a new subscriber gets.
    mosquitto_pub(*at, "-q", "1", "-r", "-n", "-t", topic)
    mosquitto_pub(*at, "-q", "1", "-r", "-t", f"retained-{version}/other", "-m", "o")
    assert first_retained() == [[f"retained-{version}/other", "1", "1", "o"]]


@pytest.mark.parametrize("version", VERSIONS)
def test_will_when_client_is_killed(shared_example_broker: Any,
                                    mosquitto_sub: Callable[..., Any],
                                    version: str) -> None:
    at = address(shared_example_broker, version)
    topic = f"will-{version}/gone"
    watcher = mosquitto_sub(*at, "-q", "1", "-t", topic, "-C", "1", "-W", "10", "-F", FORMAT)
    watcher.wait_subscribed()
    doomed = mosquitto_sub(*at, "-t", f"will-{version}/nothing", "--will-topic", topic,
                           "--will-payload", "bye", "--will-qos", "1")
    doomed.wait_subscribed()
    doomed.proc.send_signal(signal.SIGKILL)  # no DISCONNECT: the kernel closes the socket
    assert watcher.messages() == [[topic, "1", "0", "bye"]]


def test_v5_properties_arrive_intact(shared_example_broker: Any,
                                     mosquitto_sub: Callable[..., Any],
                                     mosquitto_pub: Callable[..., None]) -> None:
    at = address(shared_example_broker, "mqttv5")
    # user properties, content type, response topic, correlation data, expiry, payload
    # format indicator, payload
    sub = mosquitto_sub(*at, "-q", "1", "-t", "props/#", "-C", "1", "-W", "10",
                        "-F", "%t|%P|%C|%R|%D|%E|%F|%p")
    sub.wait_subscribed()
    mosquitto_pub(
        *at, "-q", "1", "-t", "props/x", "-m", "payload",
        "-D", "publish", "user-property", "k", "v1",
        "-D", "publish", "user-property", "k", "v2",
        "-D", "publish", "content-type", "text/plain",
        "-D", "publish", "response-topic", "props/reply",
        "-D", "publish", "correlation-data", "id-42",
        "-D", "publish", "message-expiry-interval", "300",
        "-D", "publish", "payload-format-indicator", "1",
    )
    [message] = sub.messages()
    topic, users, content, response, correlation, expiry, pfi, payload = message
    assert (topic, users, content, response, correlation, pfi, payload) == (
        "props/x", "k:v1 k:v2", "text/plain", "props/reply", "id-42", "1", "payload"
    )
    # Forwarded without delay, the expiry interval lost less than a second [MQTT-3.3.2-6].
    assert expiry in ("299", "300")


def test_v5_publisher_v311_subscriber(shared_example_broker: Any,
                                      mosquitto_sub: Callable[..., Any],
                                      mosquitto_pub: Callable[..., None]) -> None:
    sub = mosquitto_sub(*address(shared_example_broker, "mqttv311"), "-q", "2",
                        "-t", "mixed/#", "-C", "1", "-W", "10", "-F", FORMAT)
    sub.wait_subscribed()
    mosquitto_pub(*address(shared_example_broker, "mqttv5"), "-q", "2", "-t", "mixed/x",
                  "-m", "across", "-D", "publish", "user-property", "k", "v")
    assert sub.messages() == [["mixed/x", "2", "0", "across"]]
