"""The messages table of a real capture taken while QoS 1 and 2 traffic was in flight:
tcpdump started after the clients had connected and begun publishing, and stopped
while they still were.

The reader yields each direction of a connection in capture order, but holds a window
of a mid-stream direction's bytes until it has found its first packet boundary (and
level), so one direction's records come out after the other's.  The derived tables
must not depend on that: every exchange whose packets are all in the capture is
complete, and an acknowledgement whose PUBLISH came before the capture began is counted
in ``connections.unmatched_acks``, not reported as a message.

The expectations are computed from the packet records alone, in capture order, not by
the derived tables (capture_helpers.expected_exchanges).  The reader's test runs with
both codecs, through both capture loops (conftest.py) and with the derived tables both
ways (the ``derive_way`` fixture)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from capture_helpers import expected_exchanges, frame_senders, maker

from mqttwire.capture import read_capture
from mqttwire.spark.derive import derive

pytestmark = pytest.mark.interop


class InFlight:
    def __init__(self, path: Path, port: int) -> None:
        self.path = path
        self.port = port
        #: frame number -> the direction that sent it (capture_helpers.frame_senders)
        self.senders = frame_senders(path.read_bytes(), port)


@pytest.fixture(scope="module")
def inflight(tmp_path_factory: pytest.TempPathFactory) -> InFlight:
    """A publisher at 3.1.1 sending QoS 1 and QoS 2 messages all along, a 3.1.1
    subscriber at QoS 2 and a 5.0 subscriber at QoS 1; captured for a second and a half
    from half a second after the first message."""
    for tool in ("mosquitto", "tcpdump"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
    workdir = tmp_path_factory.mktemp("inflight")
    path = workdir / "inflight.pcap"
    port = maker.free_port()
    stop = threading.Event()
    with maker.broker(port, str(workdir)):
        clients = []
        for name, level in (("pub", 4), ("sub4", 4), ("sub5", 5)):
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name,
                                 protocol=mqtt.MQTTv5 if level == 5 else mqtt.MQTTv311)
            client.max_inflight_messages_set(50)
            client.connect("127.0.0.1", port, keepalive=60)
            client.loop_start()
            clients.append(client)
        pub, sub4, sub5 = clients
        sub4.subscribe("inflight/#", 2)[1]
        sub5.subscribe("inflight/#", 1)[1]
        time.sleep(0.5)

        def publish() -> None:
            n = 0
            while not stop.is_set() and n < 200_000:
                info = pub.publish(f"inflight/{n % 7}", b"m" * 100 + str(n).encode(),
                                   qos=1 + n % 2)
                n += 1
                if n % 10 == 0:  # about 2,000 a second at most: tcpdump keeps up
                    info.wait_for_publish(5)
                    time.sleep(0.005)

        sender = threading.Thread(target=publish)
        sender.start()
        try:
            time.sleep(0.5)
            for attempt in range(3):
                try:
                    with maker.tcpdump(str(path), port):
                        time.sleep(1.5)
                    break
                except maker.PacketsDropped:  # a busy machine: the capture has holes
                    if attempt == 2:
                        raise
                except RuntimeError as exc:  # tcpdump cannot capture here
                    pytest.skip(str(exc))
        finally:
            stop.set()
            sender.join(30)
            for client in clients:
                client.disconnect()
                client.loop_stop()
    return InFlight(path, port)


@pytest.mark.parametrize("version", [None, 4], ids=["inferred", "assumed-4"])
def test_exchanges_in_flight_complete(codec: ModuleType, inflight: InFlight,
                                      version: int | None, derive_way: bool) -> None:
    records = list(read_capture(inflight.path, ports=[inflight.port], codec=codec,
                                version=version, stream_ends=True))
    connections, messages, _ = derive(records, "inflight.pcap")
    status, unmatched = expected_exchanges(records, inflight.senders)
    # The reader did yield a direction's records after the other's: what the derived
    # tables must not depend on (else this capture proves nothing).
    frames = [r.frame for r in records if r.kind == "packet"]
    assert frames != sorted(frames)
    got = {(m["connection_id"], m["direction"], m["stream_offset"]): m["status"]
           for m in messages if m["qos"]}
    assert got == status
    complete = sum(s == "complete" for s in status.values())
    assert complete > 100, status  # the capture holds many finished exchanges
    # Only those whose answers fell after the capture's end are left incomplete: at
    # most the publisher's window of 50 and the broker's, per connection.
    assert sum(s == "incomplete" for s in status.values()) <= 3 * 2 * 50
    assert sum(c["unmatched_acks"] for c in connections) == unmatched
    assert all(c["joined_mid_stream"] for c in connections)



@pytest.mark.spark
@pytest.mark.once
def test_pipeline_on_exchanges_in_flight(inflight: InFlight, tmp_path: Path) -> None:
    """`mqttwire pipeline --assume-version 4` on the capture (the reader then settles
    each direction's window apart, the other way of coming out of step): the messages
    table holds the statuses computed from the packets, the connections table the
    unmatched acknowledgements, and summary.md lists only the unanswered exchanges.
    Marked once: the derived tables' two ways are compared above."""
    import subprocess

    import pyarrow.dataset as ds

    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "mqttwire", "pipeline", str(inflight.path),
                    "--out", str(out), "--master", "local[1]", "--port", str(inflight.port),
                    "--assume-version", "4", "--progress", "0"],
                   check=True, timeout=600, capture_output=True)
    records = list(read_capture(inflight.path, ports=[inflight.port], version=4))
    status, unmatched = expected_exchanges(records, inflight.senders)
    messages = ds.dataset(out / "messages", format="parquet").to_table().to_pylist()
    got = {(m["connection_id"], m["direction"], m["stream_offset"]): m["status"]
           for m in messages if m["qos"]}
    assert got == status
    connections = ds.dataset(out / "connections", format="parquet").to_table().to_pylist()
    assert sum(c["unmatched_acks"] for c in connections) == unmatched
    summary = (out / "summary.md").read_text()
    left = sum(s == "incomplete" for s in status.values())
    if left:  # the capture's timing decides whether any is left (often some, not always)
        assert f"{left} exchange{'' if left == 1 else 's'} did not complete" in summary
    else:
        assert "Every QoS 1 and 2 exchange in the captures completed." in summary
    if unmatched:
        assert f"{unmatched} acknowledgement" in summary
