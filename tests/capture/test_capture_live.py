"""Real captures: tcpdump on the loopback interface while Mosquitto and its clients talk
MQTT 3.1, 3.1.1 and 5.0; checked against what the clients sent, and against tshark's
MQTT dissector on the same files (examples/sample.pcapng included)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from capture_helpers import EXAMPLES, check_accounting, maker, tshark_packets

from mqttwire._constants import PacketType
from mqttwire.capture import Record, read_capture

pytestmark = pytest.mark.interop

SAMPLE = EXAMPLES / "sample.pcapng"
LEVELS = {"mqttv31": 3, "mqttv311": 4, "mqttv5": 5}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A fresh capture of the sample scenario: (pcap path, broker port)."""
    for tool in ("mosquitto", "mosquitto_pub", "mosquitto_sub", "tcpdump", "stdbuf"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    workdir = tmp_path_factory.mktemp("live")
    path = workdir / "live.pcap"
    try:
        port = maker.capture(str(path), str(workdir))
    except RuntimeError as exc:  # tcpdump cannot capture here (no permission, no lo)
        print(f"skipping: {exc}")
        pytest.skip(str(exc))
    return path, port


def _publishes(records: list[Record], direction: str, client_id: str) -> list[Record]:
    return [r for r in records if r.packet_type == "PUBLISH" and r.direction == direction
            and r.client_id == client_id]


def test_live_capture_matches_what_was_sent(codec: ModuleType, live: tuple[Path, int]) -> None:
    path, port = live
    records = list(read_capture(path, ports=[port], codec=codec, payload_limit=1024))
    assert [r for r in records if r.kind != "packet"] == []
    check_accounting(records)
    # What each publisher sent, as the broker received it.
    for pub in maker.EXPECTED:
        got = _publishes(records, "c2s", pub.client_id)
        assert len(got) == pub.repeat, pub
        for rec in got:
            assert (rec.topic, rec.payload, rec.qos, rec.retain) == (
                pub.topic, pub.payload, pub.qos, pub.retain)
            assert rec.protocol_version == LEVELS[pub.level]
            assert rec.src_ip == "127.0.0.1" and rec.dst_port == port
        if pub.client_id == "pub5-alias":
            # mosquitto_pub sends the topic with the alias once, then the alias alone.
            assert [r.topic_from_alias for r in got] == [False, True, True]
        if pub.client_id == "pub5-props":
            props = got[0].properties
            assert props.content_type == "application/json"
            assert props.message_expiry_interval == 300
            assert props.user_properties == [("site", "lab")]
    # What the subscribers received: every message in publishing order, then the Will,
    # at QoS min(published, subscribed) (MQTT 3.1.1 §3.8.4).
    sent = [(p.topic, p.payload, p.qos) for p in maker.EXPECTED for _ in range(p.repeat)]
    sent.append((maker.WILL_TOPIC, maker.WILL_PAYLOAD, 1))
    temps = {t for t, _, _ in sent if t.endswith("/temp")}
    for client_id, max_qos, topics in (("sub31", 0, None), ("sub5", 2, None),
                                       ("sub311", 1, temps)):
        want = [(t, p, min(q, max_qos)) for t, p, q in sent if topics is None or t in topics]
        got = [(r.topic, r.payload, r.qos) for r in _publishes(records, "s2c", client_id)]
        assert got == want, client_id
        (sub,) = [r for r in records if r.packet_type == "SUBSCRIBE" and r.client_id == client_id]
        assert sub.topic_filters == (["sample/+/temp"] if topics else ["sample/#"])
    # The late subscriber gets the retained message with RETAIN set (MQTT-3.3.1-8).
    (late,) = _publishes(records, "s2c", "late5")
    assert (late.topic, late.payload, late.retain, late.protocol_version) == (
        "sample/status", b"online", True, 5)
    # The dying client never sent DISCONNECT.
    assert not [r for r in records if r.client_id == "dying" and r.packet_type == "DISCONNECT"]


# ---------------------------------------------------------------------------------------
# Against tshark


def _ours(records: list[Record]) -> list[tuple[int, list[str]]]:
    out = []
    for r in records:
        assert r.kind == "packet", r
        topics = [r.topic] if r.topic is not None else list(r.topic_filters or [])
        out.append((int(PacketType[r.packet_type]), topics))  # type: ignore[misc]
    return out


def _compare(path: Path, port: int, codec: ModuleType) -> None:
    theirs = tshark_packets(path, port)
    ours = _ours(list(read_capture(path, ports=[port], codec=codec)))
    assert Counter(t for t, _ in ours) == Counter(t for t, _ in theirs)
    # Topics (tshark resolves Topic Aliases too) and subscription filters, as multisets:
    # tshark orders packets by frame, we order them by the frame that completed them.
    assert Counter((t, tuple(x)) for t, x in ours) == Counter((t, tuple(x)) for t, x in theirs)


def test_live_capture_against_tshark(codec: ModuleType, live: tuple[Path, int]) -> None:
    _compare(*live, codec)


def test_sample_capture_against_tshark(codec: ModuleType) -> None:
    # The sample was made with the broker on 1883 (make_sample_capture.py).
    _compare(SAMPLE, 1883, codec)


def test_sample_capture_is_all_mqtt(codec: ModuleType) -> None:
    records: list[Any] = list(read_capture(SAMPLE, codec=codec))
    assert records and all(r.kind == "packet" for r in records)
    assert {r.protocol_version for r in records} == {3, 4, 5}
    assert SAMPLE.stat().st_size < 200_000


def test_synthetic_capture_against_tshark(codec: ModuleType, tmp_path: Path) -> None:
    """Three interleaved sessions (3.1 over VLAN, 3.1.1, 5.0 over IPv6) in 7-byte
    segments: tshark's reassembly and dissection find the same packets and topics."""
    from capture_helpers import conversation, encode_all, segments_for, write

    from mqttwire.capture.writers import Frame, TcpFlow

    flows = [(TcpFlow(("10.1.0.1", 40001), ("10.1.0.9", 1883)), 3, (7,)),
             (TcpFlow(("10.1.0.2", 40002), ("10.1.0.9", 1883)), 4, ()),
             (TcpFlow(("fd00::2", 40003), ("fd00::9", 1883)), 5, ())]
    plans = []
    for n, (flow, version, vlan) in enumerate(flows):
        sent = encode_all(conversation(codec, version, f"c{n}"), version)
        segs = flow.open() + segments_for(flow, sent, sizes=[7]) + flow.close()
        plans.append([(flow, seg, vlan) for seg in segs])
    frames = []
    while any(plans):
        for plan in plans:
            if plan:
                flow, seg, vlan = plan.pop(0)
                frames.append(Frame(1_700_000_000_000_000_000 + len(frames) * 1000,
                                    flow.ip(seg), vlan=vlan))
    path = tmp_path / "synthetic.pcapng"
    path.write_bytes(write(frames))
    _compare(path, 1883, codec)


# ---------------------------------------------------------------------------------------
# Joined mid-stream: tcpdump started after the clients had connected

#: (client name, paho protocol level, keepalive): the publishers and subscribers send
#: and receive during the capture; "idle5" only keeps its connection alive with PINGs.
JOINED_CLIENTS = (("pub4", 4, 60), ("pub5", 5, 60), ("sub4", 4, 60), ("sub5", 5, 60),
                  ("idle5", 5, 1))
#: (publisher, topic, payload, QoS): sent during the capture, one after the other.
JOINED_MESSAGES = (
    [("pub4", "mid/a", f"three-one-one {i}".encode(), i % 3) for i in range(6)]
    + [("pub5", "mid/b", f"five {i}".encode(), i % 3) for i in range(6)]
    # More than one loopback segment each (64 KiB), for a capture that begins inside one.
    + [("pub4", "mid/big4", b"x" * 200_000, 1), ("pub5", "mid/big5", b"y" * 200_000, 2)]
)


class Joined:
    """The capture, the broker's port and each client's local TCP port."""

    def __init__(self, path: Path, port: int, client_ports: dict[str, int]) -> None:
        self.path = path
        self.port = port
        self.client_ports = client_ports


@pytest.fixture(scope="module")
def joined(tmp_path_factory: pytest.TempPathFactory) -> Joined:
    for tool in ("mosquitto", "tcpdump"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    import queue

    mqtt = pytest.importorskip("paho.mqtt.client", reason="paho-mqtt not installed")
    workdir = tmp_path_factory.mktemp("joined")
    path = workdir / "joined.pcap"
    port = maker.free_port()
    with maker.broker(port, str(workdir)):
        clients = {}
        received: dict[str, queue.Queue[Any]] = {}
        for name, level, keepalive in JOINED_CLIENTS:
            client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=name,
                                 protocol=mqtt.MQTTv5 if level == 5 else mqtt.MQTTv311)
            inbox: queue.Queue[Any] = queue.Queue()
            client.on_message = lambda c, u, msg, inbox=inbox: inbox.put(msg)
            client.on_subscribe = lambda c, u, mid, codes, props, inbox=inbox: inbox.put(mid)
            client.connect("127.0.0.1", port, keepalive=keepalive)
            client.loop_start()
            clients[name], received[name] = client, inbox
        try:
            for name, qos in (("sub4", 2), ("sub5", 1)):
                _, mid = clients[name].subscribe("mid/#", qos)
                assert received[name].get(timeout=10) == mid  # the SUBACK came
            ports = {name: c.socket().getsockname()[1] for name, c in clients.items()}
            try:
                with maker.tcpdump(str(path), port):
                    for name, topic, payload, qos in JOINED_MESSAGES:
                        clients[name].publish(topic, payload, qos).wait_for_publish(10)
                    for name in ("sub4", "sub5"):
                        for _ in JOINED_MESSAGES:
                            received[name].get(timeout=10)
                    time.sleep(2.5)  # idle5 pings (keepalive 1 s)
            except RuntimeError as exc:  # tcpdump cannot capture here
                pytest.skip(str(exc))
        finally:
            for client in clients.values():
                client.disconnect()
                client.loop_stop()
    return Joined(path, port, ports)


def _by_client(joined: Joined, records: list[Record]) -> dict[str, list[Record]]:
    names = {p: n for n, p in joined.client_ports.items()}
    out: dict[str, list[Record]] = {}
    for rec in records:
        client_port = rec.src_port if rec.direction == "c2s" else rec.dst_port
        out.setdefault(names[client_port], []).append(rec)  # type: ignore[index]
    return out


def test_joined_connections_decode_with_inferred_levels(codec: ModuleType,
                                                        joined: Joined) -> None:
    records = list(read_capture(joined.path, ports=[joined.port], codec=codec,
                                payload_limit=1 << 20))
    assert [r for r in records if r.kind != "packet"] == []
    assert not [r for r in records if r.packet_type == "CONNECT"]
    check_accounting(records)
    clients = _by_client(joined, records)
    levels = {name: {(r.protocol_version, r.version_source) for r in recs}
              for name, recs in clients.items()}
    assert levels == {"pub4": {(4, "inferred")}, "sub4": {(4, "inferred")},
                      "pub5": {(5, "inferred")}, "sub5": {(5, "inferred")},
                      "idle5": {(4, "default")}}  # PINGs only: 3.1.1, marked
    assert {r.packet_type for r in clients["idle5"]} == {"PINGREQ", "PINGRESP"}
    # What each publisher sent and each subscriber got, payloads whole (a 5.0 PUBLISH
    # read as 3.1.1 would show its property length as a payload byte).
    for name, direction in (("pub4", "c2s"), ("pub5", "c2s"), ("sub4", "s2c"),
                            ("sub5", "s2c")):
        got = [(r.topic, r.payload) for r in clients[name]
               if r.packet_type == "PUBLISH" and r.direction == direction]
        sent = [(t, p) for who, t, p, _ in JOINED_MESSAGES
                if name.startswith("sub") or who == name]
        assert sorted(got) == sorted(sent), name


def test_joined_capture_against_tshark(codec: ModuleType, joined: Joined) -> None:
    _compare(joined.path, joined.port, codec)


def test_joined_capture_dissect(joined: Joined, capsys: pytest.CaptureFixture[str]) -> None:
    from mqttwire.cli import main

    assert main(["dissect", str(joined.path), "--port", str(joined.port)]) == 0
    lines = capsys.readouterr().out.splitlines()
    notes = [line for line in lines if line.startswith("# ")]
    assert len(notes) == len(JOINED_CLIENTS)
    assert sum("inferred from its traffic" in n for n in notes) == 4
    assert sum("fits 3.1.1 and 5.0 alike" in n for n in notes) == 1
    packets = [line for line in lines if not line.startswith("# ")]
    assert len(packets) == len(tshark_packets(joined.path, joined.port))
    assert not [line for line in packets if " ERROR " in line or " GAP " in line]


def test_capture_that_begins_inside_a_packet(codec: ModuleType, joined: Joined,
                                             tmp_path: Path) -> None:
    """The joined capture cut (by editcap) so that it begins with the second segment of
    pub4's 200 kB PUBLISH: the rest of that packet is skipped, saying why, and every
    packet after it decodes as in the whole capture."""
    if shutil.which("editcap") is None:
        pytest.skip("editcap is not installed")
    whole = list(read_capture(joined.path, ports=[joined.port], codec=codec))
    big = next(r for r in whole if r.topic == "mid/big4" and r.direction == "c2s")
    # The frames of pub4's stream, with their stream offsets: read_capture counts them
    # from the first byte captured, so from the first segment's sequence number.
    fields = subprocess.run(
        ["tshark", "-r", str(joined.path), "-Y", f"tcp.srcport=={joined.client_ports['pub4']}"
         " and tcp.len>0", "-T", "fields", "-e", "frame.number", "-e", "tcp.seq_raw"],
        capture_output=True, text=True, check=True, timeout=60).stdout.split()
    raw = [(int(f), int(s)) for f, s in zip(fields[::2], fields[1::2])]
    frames = [(f, (s - raw[0][1]) % (1 << 32)) for f, s in raw]
    start, offset = next((f, s) for f, s in frames
                         if big.stream_offset < s < big.stream_offset + big.length)  # type: ignore[operator]
    cut = tmp_path / "cut.pcap"
    subprocess.run(["editcap", "-r", str(joined.path), str(cut), f"{start}-{1 << 30}"], check=True,
                   timeout=60)
    records = list(read_capture(cut, ports=[joined.port], codec=codec))
    pub4 = _by_client(joined, records)["pub4"]
    first = pub4[0]
    assert (first.kind, first.direction, first.stream_offset, first.length, first.error) == (
        "error", "c2s", 0, big.stream_offset + big.length - offset,  # type: ignore[operator]
        "skipped: the capture began inside a packet")
    assert [r for r in records if r.kind != "packet" and r is not first] == []
    check_accounting(records)
    # Every packet completed in or after the cut's first frame, but the cut one.
    expected = Counter((r.packet_type, r.topic) for r in whole
                       if r.frame >= start and r is not big)  # type: ignore[operator]
    assert Counter((r.packet_type, r.topic) for r in records if r.kind == "packet") == expected


# once: the joined capture's decoding is tested on both codecs without Spark (above);
# this run proves the command's side (the tables and summary.md of a capture joined
# mid-stream), the same whichever codec the tasks import.
@pytest.mark.spark
@pytest.mark.once
def test_joined_capture_pipeline(joined: Joined, tmp_path: Path) -> None:
    """`mqttwire pipeline` on the joined capture (local[1], a process of its own): the
    packets table holds what tshark dissects, type by type, each connection says how
    its level was known, and summary.md counts the connections joined mid-stream."""
    import pyarrow.dataset as ds

    from mqttwire.spark import JavaMissing, find_java

    try:
        find_java()
    except JavaMissing as exc:
        pytest.skip(f"Spark needs Java: {exc}")
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-m", "mqttwire", "pipeline", str(joined.path), "--out",
                    str(out), "--master", "local[1]", "--port", str(joined.port),
                    "--progress", "0"], check=True, timeout=600, capture_output=True)
    packets = ds.dataset(out / "packets", format="parquet", partitioning="hive").to_table()
    rows = packets.to_pylist()
    assert {r["kind"] for r in rows} == {"packet"}
    ours = Counter(int(PacketType[r["packet_type"]]) for r in rows)
    assert ours == Counter(t for t, _ in tshark_packets(joined.path, joined.port))
    connections = ds.dataset(out / "connections", format="parquet").to_table().to_pylist()
    assert sorted((c["protocol_version"], c["version_source"], c["joined_mid_stream"])
                  for c in connections) == sorted(
        [(4, "inferred", True)] * 2 + [(5, "inferred", True)] * 2 + [(4, "default", True)])
    summary = (out / "summary.md").read_text()
    assert ("5 MQTT connections; all of them joined mid-stream (no CONNECT of theirs in "
            "the captures: open when a capture began, or the CONNECT was lost): 3.1.1 "
            "assumed for 1, its traffic fitting 3.1.1 and 5.0 alike (PINGs only, say); the "
            "level of 4 inferred from their traffic.") in summary
