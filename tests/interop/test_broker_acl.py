"""examples/broker.py with a Mosquitto deployment's files: a password file made by the
real ``mosquitto_passwd`` ($7$ PBKDF2-SHA512 and $6$ SHA-512 hashes) and an ACL file in
Mosquitto's format.  The same mosquitto_pub / mosquitto_sub commands run against
Mosquitto 2.0 with the same files (``allow_anonymous true``) and against the example
broker (``--allow-anonymous``), under each mqttwire implementation; the outcomes must be
the ones written below, which are Mosquitto's (checked against it in the same run).

One difference, on purpose: Mosquitto 2.0.11 refuses a bad user name or password with
0x87 Not authorized (3.1.1: 0x05); the example broker uses MQTT's own code for it, 0x86
Bad User Name or Password (3.1.1: 0x04).  Both refuse.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import queue
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from local_servers import HOST, require, start_mosquitto, stop
from subscribers import mosquitto_subscribers

pytestmark = pytest.mark.interop

TIMEOUT = 10.0

ACL = """\
# Clients without a user name (before the first "user" line).
topic read public/#

user alice
topic readwrite alice/#
topic read shared/#
topic write inbox/#
topic deny alice/secret

user bob
topic readwrite shared/#

user carol
topic readwrite #

# For everyone, wherever it stands.
pattern readwrite clients/%c/#
pattern read users/%u/#
pattern read done
"""

USERS = {"alice": "secret", "bob": "hunter2", "carol": "pw3"}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(password file, ACL file); the password file made by mosquitto_passwd."""
    passwd = require("mosquitto_passwd", "mosquitto")
    folder = tmp_path_factory.mktemp("mosquitto-files")
    passwords, acl = folder / "passwords", folder / "acl"
    subprocess.run([passwd, "-c", "-b", str(passwords), "alice", USERS["alice"]], check=True,
                   timeout=TIMEOUT)
    subprocess.run([passwd, "-b", str(passwords), "bob", USERS["bob"]], check=True,
                   timeout=TIMEOUT)
    # carol's with Mosquitto 1.6's salted SHA-512.
    subprocess.run([passwd, "-H", "sha512", "-b", str(passwords), "carol", USERS["carol"]],
                   check=True, timeout=TIMEOUT)
    lines = dict(line.split(":", 1) for line in passwords.read_text().splitlines())
    assert lines["alice"].startswith("$7$101$") and lines["bob"].startswith("$7$101$")
    assert lines["carol"].startswith("$6$")
    acl.write_text(ACL)
    return passwords, acl


@dataclass
class Broker:
    name: str
    host: str
    port: int


@pytest.fixture(scope="module")
def mosquitto(files: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[Broker]:
    """Mosquitto 2.0 with the same files."""
    # Started as root, Mosquitto would become the user "mosquitto", who cannot read
    # pytest's temporary folders: it stays who we are.
    proc, port = start_mosquitto(tmp_path_factory.mktemp("mosquitto"),
                                 f"allow_anonymous true\npassword_file {files[0]}\n"
                                 f"acl_file {files[1]}\n"
                                 f"user {pwd.getpwuid(os.getuid()).pw_name}\n")
    try:
        yield Broker("mosquitto", HOST, port)
    finally:
        stop(proc)


@pytest.fixture
def example(files: tuple[Path, Path], start_example_broker_with: Callable[..., Any]) -> Broker:
    """examples/broker.py with the same files, under each mqttwire implementation."""
    server = start_example_broker_with("--password-file", str(files[0]), "--allow-anonymous",
                                       "--acl-file", str(files[1]))
    return Broker("example", server.host, server.port)


# ---------------------------------------------------------------------------------------
# Connecting and publishing: one mosquitto_pub per case


def login(user: str | None, password: str | None = None) -> list[str]:
    args = []
    if user is not None:
        args += ["-u", user]
    if password is not None:
        args += ["-P", password]
    return args


def publish(broker: Broker, version: str, client_id: str, args: list[str], topic: str,
            qos: int = 1, *extra: str) -> tuple[str, int]:
    """Run mosquitto_pub: ("refused", CONNACK code) or ("acknowledged", PUBACK/PUBREC
    reason code, 0 before 5.0), or ("sent", 0) at QoS 0."""
    program = require("mosquitto_pub", "mosquitto-clients")
    done = subprocess.run(
        [program, "-h", broker.host, "-p", str(broker.port), "-V", version, "-i", client_id,
         "-d", "-q", str(qos), "-t", topic, "-m", "x", *args, *extra],
        capture_output=True, text=True, timeout=TIMEOUT, check=False)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        assert "received CONNACK" in output or "refused" in output.lower(), output
        return "refused", done.returncode
    if qos == 0:
        return "sent", 0
    match = re.search(r"received PUB(?:ACK|REC) \(Mid: \d+(?:, RC:(\d+))?\)", output)
    assert match is not None, output
    return "acknowledged", int(match.group(1) or 0)


# (user, password, client id, topic) -> whether Mosquitto lets the PUBLISH through.
# Written from Mosquitto's documented rules and checked against it below.
PUBLISH_CASES = [
    ("alice", "secret", "pubber", "alice/a", True),       # topic readwrite alice/#
    ("alice", "secret", "pubber", "alice/secret", False),  # topic deny beats readwrite
    ("alice", "secret", "pubber", "inbox/a", True),       # write
    ("alice", "secret", "pubber", "shared/a", False),     # read only
    ("alice", "secret", "pubber", "public/a", False),     # the anonymous section only
    ("alice", "secret", "pubber", "clients/pubber/x", True),   # pattern %c
    ("alice", "secret", "pubber", "clients/other/x", False),
    ("alice", "secret", "pubber", "users/alice/x", False),     # pattern read only
    ("carol", "pw3", "carolp", "anything/at/all", True),       # $6$ hash, readwrite #
    ("bob", "hunter2", "bobp", "shared/b", True),
    (None, None, "anonp", "public/a", False),              # anonymous: read only
    (None, None, "anonp", "clients/anonp/x", True),        # patterns apply to them too
    (None, None, "anonp", "users//x", False),              # %u: not for anonymous
    (None, None, "#", "clients/z/x", False),               # %c holding '#' never applies
]

# (user, password) -> refused; every refusal is a bad user name or password, or an
# unknown user: 0x86 / 0x04 from the example broker, 0x87 / 0x05 from Mosquitto 2.0.11.
REFUSED = [("alice", "wrong"), ("nobody", "secret"), ("alice", None), ("carol", "secret")]


def outcomes(broker: Broker) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for user, password, client_id, topic, _ in PUBLISH_CASES:
        out[("publish", user, topic)] = publish(broker, "5", client_id,
                                                login(user, password), topic)
    # 3.1.1 has no code to refuse a PUBLISH with: acknowledged either way (dropped: see
    # the delivery test).
    out[("publish-311", "alice/secret")] = publish(broker, "311", "pubber",
                                                   login("alice", "secret"), "alice/secret", 2)
    for user, password in REFUSED:
        for version in ("5", "311"):
            out[("connect", version, user, password)] = publish(
                broker, version, "c", login(user, password), "alice/a")
    return out


@pytest.fixture(scope="module")
def mosquitto_outcomes(mosquitto: Broker) -> dict[Any, Any]:
    return outcomes(mosquitto)


def test_publish_and_connect_as_mosquitto(example: Broker,
                                          mosquitto_outcomes: dict[Any, Any]) -> None:
    ours = outcomes(example)
    for user, _, _, topic, allowed in PUBLISH_CASES:
        key = ("publish", user, topic)
        kind, code = mosquitto_outcomes[key]
        # Mosquitto answers 0x10 No matching subscribers where nobody listens.
        assert kind == "acknowledged" and (code < 0x80) == allowed, (key, code)
        kind, code = ours[key]
        assert kind == "acknowledged" and code == (0 if allowed else 0x87), (key, code)
    assert mosquitto_outcomes[("publish-311", "alice/secret")] == ("acknowledged", 0)
    assert ours[("publish-311", "alice/secret")] == ("acknowledged", 0)
    for user, password in REFUSED:
        # mosquitto_pub exits with the CONNACK code.
        assert mosquitto_outcomes[("connect", "5", user, password)] == ("refused", 0x87)
        assert mosquitto_outcomes[("connect", "311", user, password)] == ("refused", 0x05)
        assert ours[("connect", "5", user, password)] == ("refused", 0x86)
        assert ours[("connect", "311", user, password)] == ("refused", 0x04)


# ---------------------------------------------------------------------------------------
# Reading: what each subscriber to '#' gets


def collect(sub: Any) -> set[str]:
    """The topics a ``mosquitto_sub -v`` printed before the 'done' marker."""
    topics: set[str] = set()
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            line = sub.lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"no 'done' marker; got {sorted(topics)}") from None
        if line.startswith(("Client ", "Subscribed ")) or " " not in line:
            continue
        topic = line.split(" ", 1)[0]
        if topic == "done":
            return topics
        topics.add(topic)


SUBSCRIBERS = {  # name -> (mosquitto_sub login, client id, level)
    "alice": (login("alice", "secret"), "alicesub", "5"),
    "bob": (login("bob", "hunter2"), "bobsub", "5"),
    "anonymous": ([], "anonsub", "311"),
    "carol": (login("carol", "pw3"), "carolsub", "311"),
}

WRITTEN = ["public/a", "alice/a", "alice/secret", "shared/a", "inbox/a",
           "clients/alicesub/x", "clients/anonsub/x", "users/alice/x", "users/bob/x",
           "secret/x"]

# Retained before anyone subscribes: sent on subscription to those who may read them.
RETAINED = ["alice/retained", "public/retained"]

# What each may read (Mosquitto's answer, written out).  alice's wills: to alice/will
# (hers to write) and to public/will (not: never published, though the CONNECT was
# accepted, as Mosquitto does).
READ = {
    "alice": {"alice/a", "shared/a", "clients/alicesub/x", "users/alice/x", "alice/ok311",
              "alice/will", "alice/retained"},
    "bob": {"shared/a", "users/bob/x"},
    "anonymous": {"public/a", "clients/anonsub/x", "public/retained"},
    "carol": set(WRITTEN) | {"alice/ok311", "clients/anonp/y", "alice/will", *RETAINED},
}


def delivered(broker: Broker, mosquitto_sub: Callable[..., Any]) -> dict[str, set[str]]:
    for topic in RETAINED:
        publish(broker, "5", "carolp", login("carol", "pw3"), topic, 1, "-r")
    subs = {}
    for name, (args, client_id, version) in SUBSCRIBERS.items():
        subs[name] = mosquitto_sub("-h", broker.host, "-p", str(broker.port), "-V", version,
                                   "-i", client_id, "-t", "#", "-v", *args)
        subs[name].wait_subscribed()
    for n, will in enumerate(("alice/will", "public/will")):
        dying = mosquitto_sub("-h", broker.host, "-p", str(broker.port), "-V", "5",
                              "-i", f"willer{n}", "-t", "nothing", "--will-topic", will,
                              "--will-payload", "gone", *login("alice", "secret"))
        dying.wait_subscribed()
        dying.proc.kill()  # no DISCONNECT: the will goes out (if alice may write there)
    for topic in WRITTEN:  # carol may write anywhere
        publish(broker, "5", "carolp", login("carol", "pw3"), topic)
    # alice at 3.1.1, QoS 2: the refused one is acknowledged (PUBREC) and dropped.
    publish(broker, "311", "pubber", login("alice", "secret"), "alice/ok311", 2)
    publish(broker, "311", "pubber", login("alice", "secret"), "alice/secret", 2)
    # anonymous, QoS 0: dropped without a word when refused.
    publish(broker, "5", "anonp", [], "public/b", 0)
    publish(broker, "5", "anonp", [], "clients/anonp/y", 0)
    publish(broker, "5", "carolp", login("carol", "pw3"), "done")
    return {name: collect(sub) for name, sub in subs.items()}


@pytest.fixture(scope="module")
def mosquitto_delivered(mosquitto: Broker) -> Iterator[dict[str, set[str]]]:
    # The module-scoped Mosquitto runs once; mosquitto_sub's fixture is per test, so the
    # subscribers here are started through the helper behind it.
    with mosquitto_subscribers() as start:
        yield delivered(mosquitto, start)


def test_read_access_as_mosquitto(example: Broker, mosquitto_delivered: dict[str, set[str]],
                                  mosquitto_sub: Callable[..., Any]) -> None:
    assert mosquitto_delivered == READ
    assert delivered(example, mosquitto_sub) == READ


# ---------------------------------------------------------------------------------------
# paho-mqtt


def test_paho_sees_the_codes(example: Broker) -> None:
    """paho-mqtt 2.2 at 5.0: CONNACK 0x86 for a bad password; PUBACK 0x87 for a PUBLISH
    the ACL refuses, 0x00 for one it allows; at 3.1.1 the refused PUBLISH completes too."""
    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
    results: queue.Queue[tuple[str, int]] = queue.Queue()

    def make(level: Any, client_id: str, user: str, password: str) -> Any:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                             protocol=level, reconnect_on_failure=False)
        client.username_pw_set(user, password)
        client.on_connect = lambda c, u, f, reason, p: results.put(("connack", reason.value))
        client.on_publish = lambda c, u, mid, reason, p: results.put(("ack", reason.value))
        client.connect(example.host, example.port)
        client.loop_start()
        return client

    clients = []
    try:
        clients.append(make(mqtt.MQTTv5, "paho-bad", "alice", "wrong"))
        assert results.get(timeout=TIMEOUT) == ("connack", 0x86)
        for level in (mqtt.MQTTv5, mqtt.MQTTv311):
            client = make(level, f"paho-{level}", "alice", "secret")
            clients.append(client)
            assert results.get(timeout=TIMEOUT) == ("connack", 0)
            codes = []
            for topic in ("alice/secret", "alice/ok"):
                client.publish(topic, b"x", qos=1)
                codes.append(results.get(timeout=TIMEOUT))
            assert codes == ([("ack", 0x87), ("ack", 0)] if level == mqtt.MQTTv5
                             else [("ack", 0), ("ack", 0)])
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                client.disconnect()
            client.loop_stop()
