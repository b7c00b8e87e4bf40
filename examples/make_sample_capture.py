"""Regenerate examples/sample.pcapng: real Mosquitto traffic at MQTT 3.1, 3.1.1 and 5.0.

It starts a Mosquitto broker on 127.0.0.1 and a free port, captures the loopback interface
with tcpdump while mosquitto_sub/mosquitto_pub clients subscribe with wildcards, publish at
QoS 0, 1 and 2, retain a message, publish with MQTT 5.0 properties (and a Topic Alias),
and one client dies without DISCONNECT so that the broker sends its Will.  tcpdump writes
classic pcap; editcap (from Wireshark) turns it into pcapng.

Needs: mosquitto, mosquitto-clients, tcpdump (with the right to capture on lo), editcap.
Run:  python examples/make_sample_capture.py [OUTPUT]   (default: next to this script)

The tests import this module to make their own captures the same way (``capture``,
``broker``, ``tcpdump``, ``run_scenario``, ``EXPECTED``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "EXPECTED",
    "Publication",
    "broker",
    "capture",
    "free_port",
    "main",
    "run_scenario",
    "tcpdump",
]


@dataclass(frozen=True)
class Publication:
    """A message a client publishes in the scenario."""

    level: str  # mosquitto client -V value: mqttv31, mqttv311 or mqttv5
    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    client_id: str = ""
    properties: tuple[str, ...] = ()  # mosquitto_pub -D arguments, flattened
    repeat: int = 1


# What the publishing clients send, in order.
EXPECTED: tuple[Publication, ...] = (
    Publication("mqttv31", "sample/kitchen/temp", b"21.5", 0, client_id="pub31"),
    Publication("mqttv311", "sample/hall/temp", b"19.0", 1, client_id="pub311"),
    Publication("mqttv5", "sample/cellar/temp", b"12.25", 2, client_id="pub5"),
    Publication("mqttv311", "sample/status", b"online", 1, retain=True,
                client_id="pub311-retain"),
    Publication(
        "mqttv5", "sample/kitchen/humidity", b'{"rh": 41}', 1, client_id="pub5-props",
        properties=("-D", "publish", "content-type", "application/json",
                    "-D", "publish", "message-expiry-interval", "300",
                    "-D", "publish", "user-property", "site", "lab"),
    ),
    Publication("mqttv5", "sample/garage/door", b"open", 0, client_id="pub5-alias",
                properties=("-D", "publish", "topic-alias", "1"), repeat=3),
)
WILL_TOPIC = "sample/will/dying"
WILL_PAYLOAD = b"gone"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_running(proc: subprocess.Popen[bytes], log: str, port: int,
                  timeout: float = 10.0) -> None:
    """Until Mosquitto logs that it runs, which it does once its listener is bound (its
    "Opening ipv4 listen socket" line comes before the bind).  Not a connection to the
    port: another program that took the port meanwhile would answer it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        with open(log, "rb") as f:
            text = f.read()
        if exited:
            raise RuntimeError(f"mosquitto could not listen on port {port}: "
                               f"{text.decode(errors='replace')[-500:]}")
        if re.search(rb"mosquitto version \S+ running", text):
            return
        time.sleep(0.05)
    raise RuntimeError(f"mosquitto did not listen on port {port}")


@contextlib.contextmanager
def broker(port: int, workdir: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Mosquitto broker on 127.0.0.1:port, anonymous clients allowed (its log in
    workdir/mosquitto.log)."""
    conf = os.path.join(workdir, "mosquitto.conf")
    log = os.path.join(workdir, "mosquitto.log")
    with open(conf, "w") as f:
        f.write(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    with open(log, "wb") as out:
        proc = subprocess.Popen(["mosquitto", "-c", conf], stdout=out, stderr=out)
    try:
        _wait_running(proc, log, port)
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def tcpdump(path: str, port: int, *, buffer_kib: int = 32768, immediate: bool = True
            ) -> Iterator[subprocess.Popen[bytes]]:
    """tcpdump writing the loopback traffic of ``port`` to ``path`` (classic pcap).

    Waits until tcpdump says it is listening; stops it with SIGINT and waits, so the
    file is complete.  --immediate-mode: otherwise libpcap hands packets over in blocks
    after a timeout (a second), and those still waiting at SIGINT are lost.  Without it
    (``immediate`` False: for hundreds of thousands of packets in a few seconds, which
    a busy machine's tcpdump cannot take one by one) the stop waits for that timeout.
    -B: the kernel buffer (32 MiB by default), so a busy machine that keeps tcpdump off
    the CPU for a while drops nothing.
    Raises RuntimeError (with tcpdump's words) if it cannot capture, and PacketsDropped
    if the kernel dropped packets all the same (the capture then has holes).
    """
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-w", path, "-U", *(["--immediate-mode"] if immediate else []),
         "-s", "0", "-B", str(buffer_kib), f"tcp port {port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline().decode(errors="replace")
    if "listening on" not in line:
        proc.kill()
        rest = proc.communicate()[1].decode(errors="replace")
        raise RuntimeError(f"tcpdump cannot capture on lo: {(line + rest).strip()}")
    try:
        yield proc
        # Let the last segments (FINs, ACKs) reach the capture; without immediate mode,
        # libpcap's block timeout hand them over.
        time.sleep(0.3 if immediate else 1.5)
    finally:
        proc.send_signal(signal.SIGINT)
        summary = proc.communicate(timeout=10)[1].decode(errors="replace")
    dropped = re.search(r"(\d+) packets? dropped by kernel", summary)
    if dropped and int(dropped.group(1)):
        raise PacketsDropped(f"tcpdump: {dropped.group(0)}")


class PacketsDropped(Exception):
    """The kernel dropped packets during a capture: the file has holes."""


def _client(tool: str, level: str, port: int, *args: str) -> list[str]:
    return [tool, "-h", "127.0.0.1", "-p", str(port), "-V", level, *args]


def _start_sub(port: int, level: str, client_id: str, count: int,
               *args: str) -> subprocess.Popen[bytes]:
    # -d prints "received SUBACK" once subscribed; -C exits after that many messages
    # (with a clean DISCONNECT); -W is a safety timeout.
    # stdbuf: mosquitto_sub's stdout is block-buffered into a pipe; line buffering lets
    # the SUBACK line through at once.
    proc = subprocess.Popen(
        ["stdbuf", "-oL"]
        + _client("mosquitto_sub", level, port, "-i", client_id, "-d", "-C", str(count),
                  "-W", "20", *args),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        if b"suback" in raw.lower():
            break
    return proc


def _wait_for_publishes(proc: subprocess.Popen[bytes], count: int) -> None:
    # -d prints a "received PUBLISH" line for each message; the -W timeout ends the
    # subscriber (and so this loop) if fewer arrive.
    assert proc.stdout is not None
    seen = 0
    while seen < count:
        raw = proc.stdout.readline()
        if not raw:
            raise RuntimeError(f"a subscriber exited after {seen} of {count} messages")
        seen += b"received publish" in raw.lower()


def run_scenario(port: int) -> None:
    """The clients' conversation with the broker on ``port`` (see the module docstring)."""
    subs = [
        # Every sample message, the Will included: 3.1 at QoS 0, 5.0 at QoS 2.
        _start_sub(port, "mqttv31", "sub31", 9, "-t", "sample/#", "-q", "0"),
        _start_sub(port, "mqttv5", "sub5", 9, "-t", "sample/#", "-q", "2"),
        # Only the temperatures, 3.1.1 at QoS 1.
        _start_sub(port, "mqttv311", "sub311", 3, "-t", "sample/+/temp", "-q", "1"),
    ]
    # A client with a Will that dies without DISCONNECT: the broker publishes the Will.
    dying = _start_sub(port, "mqttv311", "dying", 1, "-t", "nothing/here",
                       "--will-topic", WILL_TOPIC, "--will-payload", WILL_PAYLOAD.decode(),
                       "--will-qos", "1")
    for pub in EXPECTED:
        args = ["-i", pub.client_id, "-t", pub.topic, "-m", pub.payload.decode(),
                "-q", str(pub.qos), *pub.properties]
        if pub.retain:
            args.append("-r")
        if pub.repeat > 1:
            args += ["--repeat", str(pub.repeat)]
        subprocess.run(_client("mosquitto_pub", pub.level, port, *args), check=True,
                       timeout=20, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # A QoS 0 publisher exits once its bytes are in its socket, before the broker has read
    # them: kill the Will's client only when every publication has reached the subscribers
    # of sample/#, or the broker can send the Will ahead of the last of them.
    published = sum(pub.repeat for pub in EXPECTED)
    for sub in subs[:2]:
        _wait_for_publishes(sub, published)
    dying.kill()
    dying.wait()
    for sub in subs:
        sub.communicate(timeout=25)
    # A late subscriber gets the retained message; then clear it (empty retained payload).
    late = _start_sub(port, "mqttv5", "late5", 1, "-t", "sample/status")
    late.communicate(timeout=25)
    subprocess.run(_client("mosquitto_pub", "mqttv311", port, "-i", "clear", "-t",
                           "sample/status", "-n", "-r"), check=True, timeout=20,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def capture(path: str, workdir: str, port: int | None = None) -> int:
    """Capture one run of the scenario into ``path`` (classic pcap), with the broker on
    ``port`` (default: a free one); return the port."""
    if port is None:
        port = free_port()
    for attempt in range(3):
        try:
            with broker(port, workdir), tcpdump(path, port):
                run_scenario(port)
            return port
        except PacketsDropped as exc:
            # A capture with holes cannot be checked against what was sent: run the
            # scenario again (a fresh broker, so retained state starts empty).
            print(f"capture attempt {attempt + 1}: {exc}; trying again", file=sys.stderr)
    raise RuntimeError("tcpdump kept dropping packets on this machine (3 attempts)")


def main(argv: list[str]) -> int:
    out = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                     "sample.pcapng")
    for tool in ("mosquitto", "mosquitto_pub", "mosquitto_sub", "tcpdump", "editcap", "stdbuf"):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "sample.pcap")
        # The standard port when it is free, so that tools decode MQTT without being told.
        port = capture(raw, tmp, 1883 if _port_is_free(1883) else None)
        subprocess.run(["editcap", "-F", "pcapng", raw, out], check=True)
    print(f"wrote {out} ({os.path.getsize(out)} bytes, broker port {port})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
