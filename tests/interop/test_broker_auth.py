"""examples/broker.py's TLS listener with client certificates, and MQTT 5.0 enhanced
authentication (SCRAM-SHA-256) with re-authentication.

TLS: a CA, a server certificate and a client certificate (CN=sensor-1) made with the
openssl command; the broker runs with ``--require-certificate
--use-identity-as-username`` and an ACL that lets sensor-1 write under
``sensors/sensor-1/``; mosquitto_pub with and without the certificate must get the
outcomes Mosquitto 2.0 gives with the same files and options (checked in the same run).

SCRAM: paho-mqtt 2.2 has no AUTH support, so the exchange is spoken over a raw socket,
every packet written and read byte by byte here (SCRAM's own arithmetic from
``ScramClient``, which RFC 7677's test vector checks in tests/session); and
examples/client.py connects with ``authenticator=ScramClient(...)``.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import socket
import struct
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from local_servers import HOST, require, start_mosquitto, stop

from mqttwire.session.scram import ScramClient

pytestmark = pytest.mark.interop

TIMEOUT = 10.0


# ---------------------------------------------------------------------------------------
# TLS with client certificates

ACL = "user sensor-1\ntopic write sensors/sensor-1/#\n"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ca.pem, server.pem/.key (for 127.0.0.1), client.pem/.key (CN=sensor-1), acl."""
    openssl = require("openssl", "openssl")
    d = tmp_path_factory.mktemp("pki")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=d, check=True, capture_output=True,
                       timeout=TIMEOUT)

    # EC keys: made in milliseconds, where RSA keys take seconds.
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out",
        "ca.pem", "-days", "2", "-subj", "/CN=test CA")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject, ext in (("server", "/CN=127.0.0.1", ["-extfile", "san.ext"]),
                               ("client", "/CN=sensor-1/O=Example", [])):
        run("req", *ec, "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject)
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *ext)
    (d / "acl").write_text(ACL)
    return d


@pytest.fixture(scope="module")
def mosquitto_tls(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Mosquitto 2.0 with the same certificates, options and ACL; its port."""
    proc, port = start_mosquitto(
        tmp_path_factory.mktemp("mosquitto-tls"),
        f"cafile {pki / 'ca.pem'}\ncertfile {pki / 'server.pem'}\n"
        f"keyfile {pki / 'server.key'}\nrequire_certificate true\n"
        f"use_identity_as_username true\nacl_file {pki / 'acl'}\n"
        # As root it would become "mosquitto", who cannot read pytest's folders.
        f"user {pwd.getpwuid(os.getuid()).pw_name}\n")
    try:
        yield port
    finally:
        stop(proc)


def tls_publish(port: int, pki: Path, topic: str, *, certificate: bool) -> tuple[str, int]:
    """mosquitto_pub over TLS at 5.0, QoS 1: ("failed", exit status) when it could not
    connect, else ("acknowledged", PUBACK reason code)."""
    program = require("mosquitto_pub", "mosquitto-clients")
    cert = ["--cert", str(pki / "client.pem"), "--key", str(pki / "client.key")] \
        if certificate else []
    done = subprocess.run(
        [program, "-h", HOST, "-p", str(port), "--cafile", str(pki / "ca.pem"), *cert,
         "-V", "5", "-q", "1", "-d", "-i", "tls-pub", "-t", topic, "-m", "x"],
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        return "failed", done.returncode
    match = re.search(r"received PUBACK \(Mid: \d+, RC:(\d+)\)", done.stdout + done.stderr)
    assert match is not None, done.stdout + done.stderr
    return "acknowledged", int(match.group(1))


# Its subject is the TLS glue and the ACL, the same under either codec: first pass only.
@pytest.mark.once
def test_tls_client_certificate_as_mosquitto(pki: Path, mosquitto_tls: int,
                                             start_example_broker_with: Callable[..., Any]
                                             ) -> None:
    server = start_example_broker_with(
        "--certfile", str(pki / "server.pem"), "--keyfile", str(pki / "server.key"),
        "--cafile", str(pki / "ca.pem"), "--require-certificate",
        "--use-identity-as-username", "--acl-file", str(pki / "acl"))
    for port in (mosquitto_tls, server.port):
        # The certificate's CN is the user name the ACL sees.
        kind, code = tls_publish(port, pki, "sensors/sensor-1/t", certificate=True)
        assert kind == "acknowledged" and code < 0x80, (port, code)  # 0x10: no subscribers
        assert tls_publish(port, pki, "sensors/other/t", certificate=True) == (
            "acknowledged", 0x87)
        # No certificate: the TLS handshake fails.
        assert tls_publish(port, pki, "sensors/sensor-1/t", certificate=False)[0] == "failed"
    assert "tls-pub connected" in server.log_text()


# ---------------------------------------------------------------------------------------
# SCRAM-SHA-256 over a raw socket

METHOD = b"SCRAM-SHA-256"


def varint(n: int) -> bytes:
    out = b""
    while True:
        byte, n = n % 128, n // 128
        out += bytes([byte | (0x80 if n else 0)])
        if not n:
            return out


def utf8(text: bytes) -> bytes:
    return struct.pack(">H", len(text)) + text


def auth_properties(data: bytes) -> bytes:
    # 0x15 Authentication Method (UTF-8 string), 0x16 Authentication Data (binary).
    body = b"\x15" + utf8(METHOD) + b"\x16" + utf8(data)
    return varint(len(body)) + body


def connect_packet(client_id: bytes, data: bytes) -> bytes:
    # Protocol name 00 04 "MQTT", level 5, flags 0x02 (Clean Start), Keep Alive 60.
    variable = utf8(b"MQTT") + b"\x05\x02\x00\x3c" + auth_properties(data)
    body = variable + utf8(client_id)
    return b"\x10" + varint(len(body)) + body


def auth_packet(code: int, data: bytes) -> bytes:
    body = bytes([code]) + auth_properties(data)
    return b"\xf0" + varint(len(body)) + body  # AUTH: type 15, flags 0


def read_packet(sock: socket.socket) -> tuple[int, bytes]:
    """(first byte, body)."""
    def exactly(count: int) -> bytes:
        data = b""
        while len(data) < count:
            chunk = sock.recv(count - len(data))
            if not chunk:
                raise ConnectionError(f"closed after {data!r}")
            data += chunk
        return data

    first = exactly(1)[0]
    length, shift = 0, 0
    while True:
        byte = exactly(1)[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first, exactly(length)


def properties(raw: bytes) -> dict[int, bytes]:
    """Authentication Method (0x15) and Data (0x16) out of a property block (others are
    skipped by their known sizes: only those the broker may put in CONNACK)."""
    out: dict[int, bytes] = {}
    i = 0
    while i < len(raw):
        ident = raw[i]
        i += 1
        if ident in (0x15, 0x16, 0x12, 0x1F):  # strings / binary data
            size = struct.unpack(">H", raw[i:i + 2])[0]
            out[ident] = raw[i + 2:i + 2 + size]
            i += 2 + size
        elif ident in (0x21, 0x22, 0x13):  # two-byte integers
            i += 2
        elif ident in (0x27, 0x11):  # four-byte integers
            i += 4
        elif ident in (0x24, 0x25, 0x28, 0x29, 0x2A):  # bytes
            i += 1
        else:
            raise AssertionError(f"unexpected property 0x{ident:02X}")
    return out


def split_properties(body: bytes) -> tuple[bytes, bytes]:
    """(property block, rest) of a body that starts with a property length varint."""
    length, shift, i = 0, 0, 0
    while True:
        byte = body[i]
        i += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return body[i:i + length], body[i + length:]


@pytest.fixture
def scram_broker(start_example_broker_with: Callable[..., Any]) -> Any:
    return start_example_broker_with("--scram-user", "alice:wonderland")


def test_scram_over_raw_bytes(scram_broker: Any) -> None:
    scram = ScramClient("alice", "wonderland")
    with socket.create_connection((scram_broker.host, scram_broker.port), TIMEOUT) as sock:
        sock.settimeout(TIMEOUT)
        sock.sendall(connect_packet(b"raw-scram", scram.start()))
        first, body = read_packet(sock)
        assert first == 0xF0 and body[0] == 0x18  # AUTH 0x18 Continue authentication
        props = properties(split_properties(body[1:])[0])
        assert props[0x15] == METHOD  # [MQTT-4.12.0-5]
        assert props[0x16].startswith(b"r=")  # server-first-message
        sock.sendall(auth_packet(0x18, scram.challenge(props[0x16])))
        first, body = read_packet(sock)
        # CONNACK: flags 00, reason 00, properties with the method and server-final.
        assert first == 0x20 and body[:2] == b"\x00\x00", body
        props = properties(split_properties(body[2:])[0])
        assert props[0x15] == METHOD and scram.finish(props[0x16])
        # Re-authentication (§4.12.1): AUTH 0x19, the server's 0x18, ours, its 0x00.
        sock.sendall(auth_packet(0x19, scram.start()))
        first, body = read_packet(sock)
        assert first == 0xF0 and body[0] == 0x18
        sock.sendall(auth_packet(0x18, scram.challenge(properties(
            split_properties(body[1:])[0])[0x16])))
        first, body = read_packet(sock)
        assert first == 0xF0 and body[0] == 0x00
        assert scram.finish(properties(split_properties(body[1:])[0])[0x16])
        sock.sendall(b"\xc0\x00")  # PINGREQ: still connected
        assert read_packet(sock) == (0xD0, b"")
    with socket.create_connection((scram_broker.host, scram_broker.port), TIMEOUT) as sock:
        sock.settimeout(TIMEOUT)
        wrong = ScramClient("alice", "not the password")
        sock.sendall(connect_packet(b"raw-scram-2", wrong.start()))
        _, body = read_packet(sock)
        sock.sendall(auth_packet(0x18, wrong.challenge(properties(
            split_properties(body[1:])[0])[0x16])))
        first, body = read_packet(sock)
        assert first == 0x20 and body[1] == 0x86  # CONNACK 0x86 Bad User Name or Password
    log = scram_broker.log_text()
    assert "raw-scram re-authenticated as alice" in log


def test_scram_with_the_example_client(scram_broker: Any, example_client: ModuleType) -> None:
    Client = example_client.Client

    async def scenario() -> None:
        at = (scram_broker.host, scram_broker.port)
        client = await Client.connect(*at, "ex-scram", version=5,
                                      authenticator=ScramClient("alice", "wonderland"))
        try:
            assert client.connack.properties.authentication_method == "SCRAM-SHA-256"
            assert await client.publish("t", b"x", qos=1) == 0
            final = await client.reauthenticate()  # the server's signature, checked
            assert final is not None and final.startswith(b"v=")
            assert await client.publish("t", b"y", qos=1) == 0
        finally:
            await client.disconnect()
        with pytest.raises(example_client.ConnectionRefused, match="0x86"):
            await Client.connect(*at, "ex-scram-2", version=5,
                                 authenticator=ScramClient("alice", "wrong"))
        # Without the method: no fallback but "everyone" (no --password-file).
        plain = await Client.connect(*at, "ex-plain", version=5)
        await plain.disconnect()

    asyncio.run(scenario())
