"""Live captures of one MQTT session taken into several files by the real tools: tcpdump
(the whole capture), ``dumpcap -b filesize`` (Wireshark's ring buffer) and ``tcpdump -C``
at the same time, and the whole capture cut by ``editcap -c`` and ``editcap -i``.

The traffic: Mosquitto and four paho-mqtt clients that stay connected for the whole
capture (two subscribers, at QoS 2 and 1; two publishers, MQTT 3.1.1 and 5.0, sending
QoS 1 and QoS 2 messages for about three seconds), so that every connection and many QoS
exchanges cross the files' boundaries.  (Imported by its own name, as loop_checks is.)
"""

from __future__ import annotations

import contextlib
import importlib.util
import queue
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: What must be installed for these captures (a missing one fails the tests that use
#: them: they are the point of the tests).
TOOLS = ("mosquitto", "tcpdump", "dumpcap", "editcap", "mergecap")

#: (publisher, topic, payload size, QoS) of each message, sent 50 ms apart: about 5 MB
#: on the wire with the two subscribers' copies, so that ``tcpdump -C 1`` (its smallest
#: size, a million bytes) makes several files.
MESSAGES = [("pub4" if i % 2 else "pub5", f"ring/{i % 3}", 20_000 + 307 * i, 1 + i % 2)
            for i in range(60)]


def load_maker() -> ModuleType:
    """examples/make_sample_capture.py (the broker, free ports, tcpdump)."""
    name = "make_sample_capture"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / "make_sample_capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@dataclass
class RingCaptures:
    """The files, each set in its reading order.

    Attributes:
        port: the broker's port.
        whole: tcpdump's one file of the session.
        editcap_c, editcap_i: ``whole`` cut by editcap -c (frames) and -i (seconds).
        dumpcap: dumpcap's ring buffer (-b filesize), taken at the same time as whole.
        tcpdump_c: tcpdump -C's files (F, F1, F2, ...), taken at the same time too.
    """

    port: int
    whole: Path
    editcap_c: list[Path]
    editcap_i: list[Path]
    dumpcap: list[Path]
    tcpdump_c: list[Path]

    def sets(self) -> dict[str, list[Path]]:
        return {"editcap -c": self.editcap_c, "editcap -i": self.editcap_i,
                "dumpcap -b filesize": self.dumpcap, "tcpdump -C": self.tcpdump_c}


@contextlib.contextmanager
def _capturing(command: list[str], ready: str) -> Iterator[None]:
    """Run a capture tool until the block ends: wait for ``ready`` on its stderr, stop
    it with SIGINT (it then finishes its file) and wait for it."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    seen = ""
    while ready not in seen:
        line = proc.stderr.readline().decode(errors="replace")
        if not line:
            proc.wait(10)
            raise RuntimeError(f"{command[0]} did not start capturing: {seen.strip()}")
        seen += line
    try:
        yield
        time.sleep(0.3)  # the last segments (FINs, ACKs) reach the capture
    finally:
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=20)[1].decode(errors="replace")
    if proc.returncode not in (0, -signal.SIGINT):
        raise RuntimeError(f"{command[0]} failed ({proc.returncode}): {seen}{rest}")


def _session(mqtt: Any, port: int) -> None:
    """The clients connect, subscribe, publish MESSAGES and disconnect."""
    clients: dict[str, Any] = {}
    inboxes: dict[str, queue.Queue[Any]] = {}
    for name, level in (("sub5", 5), ("sub4", 4), ("pub4", 4), ("pub5", 5)):
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name,
                             protocol=mqtt.MQTTv5 if level == 5 else mqtt.MQTTv311)
        inbox: queue.Queue[Any] = queue.Queue()
        client.on_message = lambda c, u, msg, inbox=inbox: inbox.put(msg)
        client.on_subscribe = lambda c, u, mid, codes, props, inbox=inbox: inbox.put(mid)
        client.connect("127.0.0.1", port, keepalive=60)
        client.loop_start()
        clients[name], inboxes[name] = client, inbox
    try:
        for name, qos in (("sub5", 2), ("sub4", 1)):
            _, mid = clients[name].subscribe("ring/#", qos)
            assert inboxes[name].get(timeout=10) == mid
        for name, topic, size, qos in MESSAGES:
            clients[name].publish(topic, bytes([65 + size % 26]) * size, qos).wait_for_publish(10)
            time.sleep(0.05)
        for name in ("sub5", "sub4"):
            for _ in MESSAGES:
                inboxes[name].get(timeout=10)
    finally:
        for client in clients.values():
            client.disconnect()
            client.loop_stop()
    time.sleep(0.2)


def make_ring_captures(workdir: Path) -> RingCaptures:
    """Capture the session three ways at once, and cut the whole capture two ways."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"not installed: {', '.join(missing)}")
    import paho.mqtt.client as mqtt

    maker = load_maker()
    port = maker.free_port()
    whole = workdir / "whole.pcap"
    for name in ("ring", "tc", "ec", "ei"):
        (workdir / name).mkdir()
    filt = f"tcp port {port}"
    with maker.broker(port, str(workdir)), \
            _capturing(["dumpcap", "-i", "lo", "-f", filt, "-b", "filesize:1000", "-w",
                        str(workdir / "ring" / "ring.pcapng")], "Capturing on"), \
            _capturing(["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-s", "0",
                        "-B", "32768", "-C", "1", "-Z", "root",  # -Z: F1, F2... as root
                        "-w", str(workdir / "tc" / "tc.pcap"), filt], "listening on"), \
            maker.tcpdump(str(whole), port):
        _session(mqtt, port)
    subprocess.run(["editcap", "-c", "150", str(whole), str(workdir / "ec" / "cut.pcap")],
                   check=True, timeout=60)
    subprocess.run(["editcap", "-i", "1", str(whole), str(workdir / "ei" / "cut.pcap")],
                   check=True, timeout=60)

    def numbered(directory: str) -> list[Path]:
        return sorted((workdir / directory).iterdir())

    tc = sorted((workdir / "tc").iterdir(),
                key=lambda p: int(p.name[len("tc.pcap"):] or 0))
    return RingCaptures(port, whole, numbered("ec"), numbered("ei"), numbered("ring"), tc)


def merged(files: list[Path], out: Path) -> Path:
    """``mergecap -a`` of ``files``: the one file the set stands for."""
    subprocess.run(["mergecap", "-a", "-w", str(out)] + [str(f) for f in files], check=True,
                   timeout=60)
    return out
