"""tests/local_servers.py's start of Mosquitto when the free port it picked is taken
before Mosquitto binds it (another test's server): it must not take that server for
Mosquitto, and must start Mosquitto on another port."""

from __future__ import annotations

import socket
from pathlib import Path

import local_servers
import pytest

pytestmark = pytest.mark.interop


def test_mosquitto_on_a_taken_port_is_started_again_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as other:  # a server of another test, listening
        other.bind((local_servers.HOST, 0))
        other.listen()
        taken = other.getsockname()[1]
        ports = iter([taken])
        real = local_servers.free_port
        monkeypatch.setattr(local_servers, "free_port", lambda: next(ports, None) or real())
        proc, port = local_servers.start_mosquitto(tmp_path, "allow_anonymous true\n")
        try:
            assert port != taken
            log = (tmp_path / "mosquitto.log").read_text()
            assert f"Opening ipv4 listen socket on port {taken}." in log
            assert "Address already in use" in log
            # The broker answers MQTT on its port: CONNECT, CONNACK 0 (3.1.1).
            with socket.create_connection((local_servers.HOST, port), timeout=10) as sock:
                sock.sendall(b"\x10\x0c\x00\x04MQTT\x04\x02\x00\x3c\x00\x00")
                assert sock.recv(4) == b"\x20\x02\x00\x00"
        finally:
            local_servers.stop(proc)
