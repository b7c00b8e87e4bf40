"""Real captures: tcpdump on the loopback interface while Mosquitto and its clients talk
MQTT 3.1, 3.1.1 and 5.0; checked against what the clients sent, and against tshark's
MQTT dissector on the same files (examples/sample.pcapng included)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from capture_helpers import check_accounting

from mqttwire._constants import PacketType
from mqttwire.capture import Record, read_capture

pytestmark = pytest.mark.interop

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SAMPLE = EXAMPLES / "sample.pcapng"
LEVELS = {"mqttv31": 3, "mqttv311": 4, "mqttv5": 5}


def _load_maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_sample_capture",
                                                  EXAMPLES / "make_sample_capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


maker = _load_maker()


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


def _tshark(path: Path, port: int) -> list[tuple[int, list[str]]]:
    """(message type, topics) of every MQTT packet tshark dissects, in wire order."""
    # -T pdml keeps each packet's fields together (-T fields can misalign columns when
    # one frame carries several MQTT packets, since each field's column then lists the
    # values of all of them).
    out = subprocess.run(["tshark", "-r", str(path), "-d", f"tcp.port=={port},mqtt",
                          "-T", "pdml"], capture_output=True, check=True, timeout=120).stdout
    found = []
    for proto in ET.fromstring(out).iter("proto"):
        if proto.get("name") == "mqtt":
            fields = list(proto.iter("field"))
            (msgtype,) = [int(f.get("show", "")) for f in fields if f.get("name") == "mqtt.msgtype"]
            topics = [f.get("show", "") for f in fields if f.get("name") == "mqtt.topic"]
            found.append((msgtype, topics))
    return found


def _ours(records: list[Record]) -> list[tuple[int, list[str]]]:
    out = []
    for r in records:
        assert r.kind == "packet", r
        topics = [r.topic] if r.topic is not None else list(r.topic_filters or [])
        out.append((int(PacketType[r.packet_type]), topics))  # type: ignore[misc]
    return out


def _compare(path: Path, port: int, codec: ModuleType) -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed")
    theirs = _tshark(path, port)
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

    from mqttwire.capture.synth import Frame, TcpFlow

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
