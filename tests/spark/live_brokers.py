"""The brokers of the live source's tests (test_live*.py), each started here on 127.0.0.1
and a free port and stopped after: Mosquitto (with TLS listeners, with persistence and
restarts), amqtt's WebSocket listeners and the example broker behind WebSockets
(tests/capture/ws_broker.py); and the Spark session their queries run in.

Each is ready once its own log says it listens (tests/local_servers.py says why not a
connection to its port)."""

from __future__ import annotations

import contextlib
import getpass
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest
from local_servers import HOST, free_port, start_mosquitto, stop, wait_for_log
from tls_certs import Certs

import mqttwire

WS_BROKER = Path(__file__).resolve().parents[1] / "capture" / "ws_broker.py"


class Job(Protocol):
    """What a broker's wait needs of the query it waits for (test_live.Job)."""

    def ended(self) -> bool: ...
    def log_tail(self) -> str: ...


class Mosquitto:
    """Mosquitto on a port of its own, its log in ``folder``/mosquitto.log; ``stop()``
    and ``start()`` again keep the port (with ``persistence``, Mosquitto saves its
    database as SIGTERM stops it, and the sessions and messages live on)."""

    def __init__(self, folder: Path, extra: str = "", *, persistence: bool = False,
                 log_all: bool = True) -> None:
        self.folder = folder
        self.log = folder / "mosquitto.log"
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        if "allow_anonymous" not in extra:
            extra += "allow_anonymous true\n"
        if persistence:
            extra += f"persistence true\npersistence_location {folder}/\n"
        # "user": started as root, Mosquitto would switch to its own user, which cannot
        # read (or write) pytest's private directories.  In-flight QoS 1/2 messages
        # unlimited (the source's Receive Maximum bounds them), and room for what is
        # published while the query or the client is away.
        # log_all: every packet logged, which the tests count; off for the backlogs of
        # tens of thousands of messages.
        logs = ["all"] if log_all else ["error", "warning", "notice", "information"]
        self.settings = (f"user {getpass.getuser()}\nmax_inflight_messages 0\n"
                         f"max_queued_messages 100000\n"
                         + "".join(f"log_type {kind}\n" for kind in logs) + extra)

    @property
    def url(self) -> str:
        return f"mqtt://{HOST}:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def start(self) -> None:
        self.proc, self.port = start_mosquitto(self.folder, self.settings, self.port)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)
        self.proc = None

    def restart(self, pause: float) -> None:
        """Stop, stay away ``pause`` seconds (clients' reconnections fail meanwhile),
        start again."""
        self.stop()
        time.sleep(pause)
        self.start()

    def wait_for(self, text: str, job: Job, timeout: float = 30, count: int = 1) -> None:
        """Until ``text`` is in the log ``count`` times; failing if ``job`` ends first."""
        deadline = time.monotonic() + timeout
        while self.log_text().count(text) < count:
            if time.monotonic() > deadline or job.ended():
                raise TimeoutError(f"{text!r} not {count} times in the Mosquitto log:\n"
                                   f"{self.log_text()}"
                                   f"\nthe query's log:\n{job.log_tail()}")
            time.sleep(0.1)


@contextlib.contextmanager
def mosquitto(folder: Path, extra: str = "", *, persistence: bool = False
              ) -> Iterator[Mosquitto]:
    """A started Mosquitto (its configuration lines ``extra`` added), stopped after."""
    broker = Mosquitto(folder, extra, persistence=persistence)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@contextlib.contextmanager
def _serving(name: str, command: Callable[[list[int]], list[str]], ports: int, log: Path,
             ready: Callable[[list[int]], list[str]], failed: str | None = None
             ) -> Iterator[list[int]]:
    """The server ``name``, run by ``command(ports)`` on ``ports`` free ports, ready once
    its log has every line of ``ready(ports)``; three tries (a port can be taken before
    the server binds it).  Yields the ports."""
    # The servers import the mqttwire that this test imports.
    path = os.pathsep.join(filter(None, [str(Path(mqttwire.__file__).parents[1]),
                                         os.environ.get("PYTHONPATH")]))
    for _ in range(3):
        chosen = [free_port() for _ in range(ports)]
        with log.open("wb") as out:
            proc = subprocess.Popen(command(chosen), stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "PYTHONPATH": path})
        if wait_for_log(proc, log, ready(chosen), failed=failed):
            break
        stop(proc)
    else:
        pytest.fail(f"{name} did not start:\n{log.read_text(errors='replace')[-3000:]}")
    try:
        yield chosen
    finally:
        stop(proc)


@contextlib.contextmanager
def amqtt_websockets(folder: Path, certs: Certs) -> Iterator[tuple[int, int]]:
    """amqtt (MQTT 3.1.1) with a ws:// and a wss:// listener (the server certificate of
    ``certs``), anonymous clients allowed: (ws port, wss port)."""
    conf = folder / "amqtt.yaml"

    def command(ports: list[int]) -> list[str]:
        ws, wss = ports
        conf.write_text(
            "listeners:\n"
            f"  default:\n    type: ws\n    bind: {HOST}:{ws}\n"
            f"  secure:\n    type: ws\n    bind: {HOST}:{wss}\n    ssl: true\n"
            f"    certfile: {certs.server_cert}\n    keyfile: {certs.server_key}\n"
            "plugins:\n  amqtt.plugins.authentication.AnonymousAuthPlugin:\n"
            "    allow_anonymous: true\n")
        return [sys.executable, "-c", "from amqtt.scripts.broker_script import main; main()",
                "-c", str(conf)]

    # amqtt logs each listener once it is bound; one it could not bind fails its start,
    # and the process lives on, serving nothing.
    with _serving("amqtt", command, 2, folder / "amqtt.log",
                  lambda ports: [f"Listener 'default' bind to {HOST}:{ports[0]}",
                                 f"Listener 'secure' bind to {HOST}:{ports[1]}"],
                  failed="Broker startup failed") as (ws, wss):
        yield ws, wss


@contextlib.contextmanager
def example_websocket(folder: Path) -> Iterator[int]:
    """examples/broker.py (MQTT 5.0) behind tests/capture/ws_broker.py's WebSocket
    listener: its port."""
    def command(ports: list[int]) -> list[str]:
        return [sys.executable, str(WS_BROKER), str(ports[0])]

    with _serving("ws_broker.py", command, 1, folder / "example.log",
                  lambda ports: [f"listening on {HOST}:{ports[0]}"]) as (port,):
        yield port


@contextlib.contextmanager
def live_spark() -> Iterator[Any]:
    """A local[1] Spark session with the mqtt source registered, stopped after."""
    from mqttwire.spark.live import register
    from mqttwire.spark.startup import make_session

    session = make_session("local[1]")
    register(session)
    try:
        yield session
    finally:
        session.stop()
