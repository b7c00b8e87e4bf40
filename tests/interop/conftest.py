"""Fixtures of the interoperability tests: servers started on 127.0.0.1 and a free port
(examples/broker.py under each mqttwire implementation, and Mosquitto), the example
client, paho-mqtt clients, and the Mosquitto command-line clients.

Every server is started by the test that needs it and stopped after it; every wait is
bounded.  Missing Mosquitto software skips the tests that need it, with the reason (under
CI that skip is a failure: the repository's conftest.py).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import queue
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from local_servers import HOST, require, start_mosquitto, stop
from subscribers import Subscriber, mosquitto_subscribers

REPO = Path(__file__).resolve().parents[2]
BROKER_SCRIPT = REPO / "examples" / "broker.py"
CLIENT_SCRIPT = REPO / "examples" / "client.py"
#: Bound on every single wait of these tests, in seconds.
TIMEOUT = 10.0


def _read_lines(proc: subprocess.Popen[bytes], count: int) -> list[str]:
    """The first ``count`` lines of the process's (unbuffered) stdout, within TIMEOUT."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + TIMEOUT
    while data.count(b"\n") < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            raise RuntimeError(f"the server printed {data!r} and then nothing more")
        data += chunk
    return data.decode().splitlines()[:count]


# ---------------------------------------------------------------------------------------
# The example broker


@dataclass
class Server:
    host: str
    port: int
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


BROKER_IMPLEMENTATIONS = [
    pytest.param("cython", id="cython", marks=pytest.mark.c_extension),
    pytest.param("python", id="python", marks=pytest.mark.pure_twin),
]


def start_example_broker(implementation: str, log: Path,
                         options: tuple[str, ...] = ()) -> tuple[subprocess.Popen[bytes], Server]:
    """Start examples/broker.py with the given mqttwire implementation on a free port,
    with its command-line ``options``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.pop("MQTTWIRE_PURE_PYTHON", None)
    if implementation == "python":
        env["MQTTWIRE_PURE_PYTHON"] = "1"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(BROKER_SCRIPT), "--host", HOST, "--port", "0", "--verbose",
             *options],
            stdout=subprocess.PIPE, stderr=err, bufsize=0, env=env,
        )
    try:
        try:
            first, second = _read_lines(proc, 2)
        except RuntimeError as exc:
            raise RuntimeError(f"broker did not start: {exc}\n{log.read_text()}") from None
        # "listening on HOST:PORT", then "mqttwire implementation: NAME"
        host, port = first.split()[-1].rsplit(":", 1)
        running = second.split(":")[-1].strip()
        if running != implementation:
            # A silent fallback to the pure twin would test it twice: fail, do not skip.
            raise RuntimeError(
                f"the broker runs mqttwire's {running!r} implementation, not {implementation!r}"
                " (build the extension: python setup.py build_ext --inplace)"
            )
    except BaseException:
        stop(proc)
        raise
    return proc, Server(host, int(port), log)


@contextlib.contextmanager
def running_example_broker(implementation: str, log: Path, *options: str) -> Iterator[Server]:
    proc, server = start_example_broker(implementation, log, options)
    try:
        yield server
    finally:
        stop(proc)
        # Shown with the output of a failing test.
        print(f"--- broker log ({implementation}) ---\n{server.log_text()}")


@pytest.fixture(params=BROKER_IMPLEMENTATIONS)
def example_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """examples/broker.py in a subprocess of its own, once per mqttwire implementation."""
    with running_example_broker(request.param, tmp_path / "broker.log") as server:
        yield server


@pytest.fixture(scope="module", params=BROKER_IMPLEMENTATIONS)
def shared_example_broker(request: pytest.FixtureRequest,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One examples/broker.py per test module and implementation, for tests whose
    state (topics, client identifiers) cannot meet: it saves a start per test.  Its
    command-line options are the module's ``BROKER_OPTIONS``, if it has them."""
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    options = getattr(request.module, "BROKER_OPTIONS", ())
    with running_example_broker(request.param, log, *options) as server:
        yield server


@pytest.fixture(params=BROKER_IMPLEMENTATIONS)
def start_example_broker_with(request: pytest.FixtureRequest,
                              tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start examples/broker.py with the command-line options given, under each mqttwire
    implementation; every one started is stopped after the test."""
    started: list[Server] = []
    with contextlib.ExitStack() as stack:

        def start(*options: str) -> Server:
            log = tmp_path / f"broker-{len(started)}.log"
            server = stack.enter_context(running_example_broker(request.param, log, *options))
            started.append(server)
            return server

        yield start


# ---------------------------------------------------------------------------------------
# Mosquitto


@pytest.fixture
def mosquitto_broker(tmp_path: Path) -> Iterator[Server]:
    """A Mosquitto broker of its own, with in-memory retained messages (the default)."""
    proc, port = start_mosquitto(tmp_path, "allow_anonymous true\n")
    try:
        yield Server(HOST, port, tmp_path / "mosquitto.log")
    finally:
        stop(proc)


# ---------------------------------------------------------------------------------------
# Clients


@pytest.fixture(scope="session")
def example_client() -> ModuleType:
    """examples/client.py as a module."""
    spec = importlib.util.spec_from_file_location("mqttwire_example_client", CLIENT_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Paho:
    """A paho-mqtt client run by its own network thread, with bounded blocking calls."""

    def __init__(self, mqtt: ModuleType, server: Server, level: int, client_id: str,
                 *, clean: bool = True, keepalive: int = 60, will: tuple[Any, ...] | None = None,
                 properties: Any = None, manual_ack: bool = False) -> None:
        protocol = {3: mqtt.MQTTv31, 4: mqtt.MQTTv311, 5: mqtt.MQTTv5}[level]
        self.level = level
        self.client_id = client_id
        self._marker_subscribed = False
        self.messages: queue.Queue[Any] = queue.Queue()
        self.client = mqtt.Client(
            mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol,
            clean_session=None if level == 5 else clean, reconnect_on_failure=False,
            manual_ack=manual_ack,
        )
        self._connected = threading.Event()
        self._acks: dict[int, Any] = {}
        self._acked = threading.Condition()
        self.connect_result: Any = None  # paho's ReasonCode, once CONNACK came
        self.connack_properties: Any = None  # paho's Properties of a 5.0 CONNACK
        #: The reason code of each disconnection paho reported (as an int).
        self.disconnects: queue.Queue[int] = queue.Queue()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = (
            lambda client, userdata, flags, reason, props: self.disconnects.put(reason.value)
        )
        self.client.on_message = lambda client, userdata, msg: self.messages.put(msg)
        self.client.on_subscribe = self._on_ack
        self.client.on_unsubscribe = self._on_ack
        if will is not None:
            self.client.will_set(*will)
        kwargs: dict[str, Any] = {"keepalive": keepalive}
        if level == 5:
            kwargs.update(clean_start=clean, properties=properties)
        self.client.connect(server.host, server.port, **kwargs)
        self.client.loop_start()
        if not self._connected.wait(TIMEOUT):
            self.client.loop_stop()
            raise TimeoutError("paho did not get CONNACK")
        if self.connect_result.is_failure:
            raise ConnectionError(f"CONNACK {self.connect_result}")

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.connect_result = reason
        self.connack_properties = props
        self.session_present = flags.session_present
        self._connected.set()

    def _on_ack(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        with self._acked:
            self._acks[mid] = codes
            self._acked.notify_all()

    def _wait_ack(self, mid: int) -> Any:
        with self._acked:
            if not self._acked.wait_for(lambda: mid in self._acks, TIMEOUT):
                raise TimeoutError(f"no acknowledgement for message id {mid}")
            return self._acks.pop(mid)

    def subscribe(self, *args: Any, **kwargs: Any) -> list[int]:
        """paho's subscribe(), waiting for the SUBACK: its codes as ints."""
        result, mid = self.client.subscribe(*args, **kwargs)
        assert result == 0, result
        return [code.value for code in self._wait_ack(mid)]

    def unsubscribe(self, *args: Any, **kwargs: Any) -> None:
        result, mid = self.client.unsubscribe(*args, **kwargs)
        assert result == 0, result
        self._wait_ack(mid)

    def publish(self, topic: str, payload: bytes = b"", qos: int = 0, retain: bool = False,
                properties: Any = None) -> None:
        """Publish and wait until the QoS exchange is complete."""
        info = self.client.publish(topic, payload, qos, retain, properties)
        info.wait_for_publish(TIMEOUT)
        assert info.is_published(), f"publish to {topic} not completed"

    def receive(self, timeout: float = TIMEOUT) -> Any:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no message in {timeout} s") from None

    def collect(self, publisher: Paho) -> list[Any]:
        """Every message received before a marker that ``publisher`` sends now, to a
        topic only this client subscribes to.  A server forwards one publisher's
        messages to a subscriber in order (MQTT 5.0 §4.6), so the marker proves that
        nothing else was on its way, without waiting for a timeout.

        paho hands over a QoS 2 message when its PUBREL comes, after those of lower QoS
        sent behind it: the marker goes at QoS 2, so that it comes after them all, but
        the order of the messages before it mixes QoS 2 with the others.
        """
        topic = f"marker/{self.client_id}"
        if not self._marker_subscribed:
            self.subscribe(topic, 2)
            self._marker_subscribed = True
        publisher.publish(topic, b"", 2)
        out: list[Any] = []
        while True:
            msg = self.receive()
            if msg.topic == topic:
                return out
            out.append(msg)

    def disconnect(self, *args: Any) -> None:
        self.client.disconnect(*args)
        self.client.loop_stop()

    def drop(self) -> None:
        """Close the connection without DISCONNECT, as a crashed client would."""
        sock = self.client.socket()
        assert sock is not None
        sock.shutdown(socket.SHUT_RDWR)
        self.client.loop_stop()  # the network thread ends on the dead socket


@pytest.fixture
def paho(example_broker: Server) -> Iterator[Callable[..., Paho]]:
    """A factory of paho clients connected to the example broker; all are stopped after
    the test."""
    with paho_clients(example_broker) as make:
        yield make


@pytest.fixture
def paho_to() -> Iterator[Callable[[Server], Callable[..., Paho]]]:
    """``paho_to(server)``: a factory of paho clients connected to ``server``, like
    ``paho``; all are stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda server: stack.enter_context(paho_clients(server))


@contextlib.contextmanager
def paho_clients(server: Server) -> Iterator[Callable[..., Paho]]:
    """A factory of paho clients connected to ``server``, stopped at the end."""
    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
    made: list[Paho] = []

    def make(level: int, client_id: str, **kwargs: Any) -> Paho:
        client = Paho(mqtt, server, level, client_id, **kwargs)
        made.append(client)
        return client

    try:
        yield make
    finally:
        for client in made:
            # DISCONNECT first: it wakes the network thread, which loop_stop() then joins
            # at once (stopped first, the thread would sleep out its 1 s select timeout).
            with contextlib.suppress(Exception):
                client.client.disconnect()
            client.client.loop_stop()


@pytest.fixture
def mosquitto_sub() -> Iterator[Callable[..., Subscriber]]:
    """Start mosquitto_sub with -d (for the SUBACK line) and the given arguments; every
    one started is stopped after the test."""
    with mosquitto_subscribers() as start:
        yield start


@pytest.fixture
def mosquitto_pub() -> Callable[..., None]:
    """Run mosquitto_pub with the given arguments; it must succeed."""
    program = require("mosquitto_pub", "mosquitto-clients")

    def run(*args: str) -> None:
        done = subprocess.run([program, *args], capture_output=True, text=True,
                              timeout=TIMEOUT, check=False)
        assert done.returncode == 0, done.stderr

    return run
