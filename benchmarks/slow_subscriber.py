"""A broker's memory while it routes QoS 0 messages to a subscriber that stopped reading
(issue 37): examples/broker.py on each codec, and Mosquitto, in one run.

One subscriber connects (MQTT 3.1.1), subscribes to a topic at QoS 0, and then reads
nothing more.  A publisher sends MESSAGES QoS 0 PUBLISHes of PAYLOAD bytes to that
topic as fast as the broker takes them, then a PINGREQ, and waits for the PINGRESP: the
broker has then handled every PUBLISH.  The figures are the broker process's resident
set (VmRSS in /proc) with both clients connected before the first PUBLISH, after the
PINGRESP, and its peak (VmHWM).  The kernel's socket buffers (the subscriber's receive
buffer, the broker's send buffer) hold some of the messages too; they are not in the
broker's resident set.

Run:  python benchmarks/slow_subscriber.py [--messages 300000] [--also /path/to/checkout]

``--also`` measures another checkout's examples/broker.py (on the extension) as well,
for a figure from before a change.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mqttwire as mw

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
TOPIC = "slow/t"
PAYLOAD = b"x" * 1000
TIMEOUT = 300.0


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def start_example(repo: Path, pure: bool) -> tuple[subprocess.Popen[bytes], int]:
    env = dict(os.environ, PYTHONPATH=str(repo))
    env.pop("MQTTWIRE_PURE_PYTHON", None)
    if pure:
        env["MQTTWIRE_PURE_PYTHON"] = "1"
    proc = subprocess.Popen([sys.executable, str(repo / "examples" / "broker.py"),
                             "--host", HOST, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    if not ready:
        proc.kill()
        raise RuntimeError("the example broker did not start")
    port = int(proc.stdout.readline().split()[-1].rsplit(b":", 1)[1])
    return proc, port


def start_mosquitto(tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    program = shutil.which("mosquitto")
    if program is None:
        raise RuntimeError("mosquitto is not installed")
    port = free_port()
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} {HOST}\nallow_anonymous true\n")
    proc = subprocess.Popen([program, "-c", str(conf)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("mosquitto did not start")


def read_packet(sock: socket.socket, kind: type) -> None:
    """Read until a packet of ``kind`` has come (anything else before it is skipped)."""
    decoder = mw.StreamDecoder(4)
    sock.settimeout(TIMEOUT)
    while True:
        data = sock.recv(65536)
        if not data:
            raise RuntimeError(f"connection closed before {kind.__name__}")
        if any(isinstance(p, kind) for p in decoder.feed(data)):
            return


def connect(port: int, client_id: str) -> socket.socket:
    sock = socket.create_connection((HOST, port))
    sock.sendall(mw.Connect(client_id, protocol_version=4, keep_alive=0).encode(4))
    read_packet(sock, mw.ConnAck)
    return sock


def measure(proc: subprocess.Popen[bytes], port: int, messages: int) -> dict[str, float]:
    sub = connect(port, "slow-sub")
    sub.sendall(mw.Subscribe(1, [mw.Subscription(TOPIC, qos=0)]).encode(4))
    read_packet(sub, mw.SubAck)
    pub = connect(port, "fast-pub")
    time.sleep(0.5)
    before, _ = rss_kib(proc.pid)
    packet = mw.Publish(TOPIC, PAYLOAD).encode(4)
    batch = packet * 1000
    started = time.monotonic()
    for _ in range(messages // 1000):
        pub.sendall(batch)
    pub.sendall(packet * (messages % 1000) + mw.PingReq().encode(4))
    read_packet(pub, mw.PingResp)
    seconds = time.monotonic() - started
    after, peak = rss_kib(proc.pid)
    sub.close()
    pub.close()
    return {"before": before / 1024, "after": after / 1024, "peak": peak / 1024,
            "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--also", type=Path, metavar="CHECKOUT",
                        help="measure that checkout's examples/broker.py (extension) too")
    args = parser.parse_args()
    runs: list[tuple[str, object]] = [
        ("examples/broker.py, cython", (REPO, False)),
        ("examples/broker.py, python", (REPO, True)),
        ("Mosquitto", None),
    ]
    if args.also is not None:
        runs.insert(0, (f"{args.also}/examples/broker.py, cython", (args.also, False)))
    print(f"{args.messages:,} QoS 0 PUBLISHes of {len(PAYLOAD)} bytes to a subscriber "
          f"that does not read; broker RSS in MB ({time.strftime('%Y-%m-%d %H:%M:%S')} "
          f"UTC, load average {os.getloadavg()[0]:.1f})")
    print("| broker | before | after | peak | seconds |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, how in runs:
            if how is None:
                proc, port = start_mosquitto(Path(tmp))
            else:
                repo, pure = how  # type: ignore[misc]
                proc, port = start_example(repo, pure)
            try:
                figures = measure(proc, port, args.messages)
            finally:
                proc.terminate()
                proc.wait(30)
            print(f"| {name} | {figures['before']:.1f} | {figures['after']:.1f} | "
                  f"{figures['peak']:.1f} | {figures['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
