"""Synthetic captures for the pipeline tests, and what each one holds.

Each scenario is a list of steps on named TCP connections; :func:`write_capture` turns it
into a pcap or pcapng file (with mqttwire.capture.writers) and returns the capture time of
every step, so that the tests can state expected times and latencies from the scenario
itself.  The packets are encoded with the pure-Python codec.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import mqttwire._pure as mw
from mqttwire.capture.writers import Frame, TcpFlow, write_pcap, write_pcapng

T0 = 1_700_000_000_000_000_000  # 2023-11-14T22:13:20Z, in ns
FRAME_GAP = 1_000_000  # 1 ms between consecutive frames

CLIENT, SERVER = 0, 1


@dataclass
class Step:
    """Send ``packet`` (or raw ``data``) from ``side`` of connection ``conn``; or end the
    connection: ``end`` "fin" (``side`` closes first) or "rst" (``side`` resets)."""

    conn: str
    side: int
    packet: Any = None
    data: bytes | None = None
    end: str | None = None
    label: str | None = None  # to look the step's time up in the result


@dataclass
class Written:
    path: Path
    times: dict[str, int] = field(default_factory=dict)  # step label -> ts (ns)


#: Capture names with every character that Spark escapes in a partition directory.
PARTITION_NAMES = ["a.pcap", "x:y=z%.pcap", "a b#c?'*[]^{}\\\x01\x7f", "é ü.pcapng"]


def write_capture(path: Path, flows: dict[str, tuple[TcpFlow, int]], steps: list[Step], *,
                  pcapng: bool = True, cut: int = 0, mid_stream: frozenset[str] = frozenset()
                  ) -> Written:
    """Write the capture; ``flows`` maps a connection name to its flow and protocol level.
    A connection's handshake goes out before its first step, except for the connections
    in ``mid_stream`` (the capture starts in the middle of them).  ``cut`` drops that many
    bytes from the end of the file (a truncated capture)."""
    frames: list[Frame] = []
    opened: set[str] = set(mid_stream)
    written = Written(path)

    def emit(flow: TcpFlow, segments: list[Any]) -> int:
        first = len(frames)
        for seg in segments:
            frames.append(Frame(T0 + len(frames) * FRAME_GAP, flow.ip(seg)))
        return T0 + first * FRAME_GAP

    for step in steps:
        flow, version = flows[step.conn]
        if step.conn not in opened:
            opened.add(step.conn)
            emit(flow, flow.open())
        if step.end == "fin":
            ts = emit(flow, flow.close(first=step.side))
        elif step.end == "rst":
            ts = emit(flow, [flow.reset(step.side)])
        else:
            data = step.data if step.data is not None else step.packet.encode(version)
            # The packet's segment, then the other side's ACK of it.
            ts = emit(flow, flow.send(step.side, data) + [flow.ack(1 - step.side)])
        if step.label:
            written.times[step.label] = ts
    buf = io.BytesIO()
    (write_pcapng if pcapng else write_pcap)(buf, frames)
    data = buf.getvalue()
    path.write_bytes(data[: len(data) - cut] if cut else data)
    return written


def flow(client_port: int, server: str = "10.0.0.2") -> TcpFlow:
    return TcpFlow(("10.0.0.1", client_port), (server, 1883))


# ---------------------------------------------------------------------------------------
# Capture A: two connections (MQTT 5.0 "alpha", 3.1.1 "beta") with every QoS outcome and
# the retained-message rules.


def capture_a(path: Path) -> Written:
    flows = {"alpha": (flow(50001), 5), "beta": (flow(50002), 4)}
    will = mw.Will("w/alpha", b"bye", qos=1, retain=True)
    steps = [
        Step("alpha", CLIENT, mw.Connect("alpha", protocol_version=5, keep_alive=30,
                                         username="u", will=will), label="alpha connect"),
        Step("alpha", SERVER, mw.ConnAck(), label="alpha connack"),
        Step("alpha", CLIENT, mw.Publish("t/a", b"x1", retain=True), label="t/a set"),
        Step("alpha", CLIENT, mw.Publish("t/b", b"b1", qos=1, packet_id=1), label="t/b"),
        Step("alpha", SERVER, mw.PubAck(1), label="t/b puback"),
        Step("alpha", CLIENT, mw.Publish("t/c", b"c22", qos=2, packet_id=2), label="t/c"),
        Step("alpha", SERVER, mw.PubRec(2), label="t/c pubrec"),
        Step("alpha", CLIENT, mw.PubRel(2), label="t/c pubrel"),
        Step("alpha", SERVER, mw.PubComp(2), label="t/c pubcomp"),
        Step("alpha", CLIENT, mw.Publish("t/d", b"d", qos=1, packet_id=3), label="t/d"),
        # The same message again, DUP set [MQTT-3.3.1-1]; it is never acknowledged.
        Step("alpha", CLIENT, mw.Publish("t/d", b"d", qos=1, packet_id=3, dup=True)),
        Step("beta", CLIENT, mw.Connect("beta", protocol_version=4, clean_start=False,
                                        keep_alive=10), label="beta connect"),
        Step("beta", SERVER, mw.ConnAck(session_present=True)),
        # An empty retained PUBLISH removes t/a's retained message [MQTT-3.3.1-10].
        Step("alpha", CLIENT, mw.Publish("t/a", b"", retain=True), label="t/a clear"),
        Step("alpha", CLIENT, mw.Publish("t/r", b"keep", qos=1, packet_id=4, retain=True)),
        Step("alpha", SERVER, mw.PubAck(4)),
        # A later retained PUBLISH replaces t/r's [MQTT-3.3.1-5].
        Step("beta", CLIENT, mw.Publish("t/r", b"new", qos=1, packet_id=7, retain=True),
             label="t/r new"),
        Step("beta", SERVER, mw.PubAck(7)),
        Step("beta", SERVER, mw.Publish("t/b", b"b1", qos=1, packet_id=1), label="beta t/b"),
        Step("beta", CLIENT, mw.PubAck(1), label="beta t/b puback"),
        # PUBREC with 0x97 (Quota exceeded) ends the QoS 2 exchange (MQTT 5.0 §4.3.3).
        Step("alpha", CLIENT, mw.Publish("t/e", b"e", qos=2, packet_id=5), label="t/e"),
        Step("alpha", SERVER, mw.PubRec(5, reason_code=0x97), label="t/e pubrec"),
        Step("alpha", CLIENT, mw.Disconnect(), label="alpha disconnect"),
        Step("alpha", CLIENT, end="fin", label="alpha fin"),
        # From the server: a retained PUBLISH to a subscriber changes no retained state.
        Step("beta", SERVER, mw.Publish("t/r", b"srv", retain=True)),
        Step("beta", CLIENT, end="rst", label="beta rst"),
    ]
    return write_capture(path, flows, steps)


# ---------------------------------------------------------------------------------------
# Capture B (classic pcap): one 3.1.1 connection "gamma" that ends in a malformed packet
# and is still open when the capture ends.


BAD_PUBLISH = b"\x36\x03\x00\x01x"  # PUBLISH (3 << 4) with both QoS bits set (0x06)


def capture_b(path: Path) -> Written:
    flows = {"gamma": (flow(50003), 4)}
    steps = [
        Step("gamma", CLIENT, mw.Connect("gamma", protocol_version=4), label="gamma connect"),
        Step("gamma", SERVER, mw.ConnAck()),
        Step("gamma", CLIENT, mw.Publish("g/x", b"1", retain=True), label="g/x"),
        Step("gamma", CLIENT, data=BAD_PUBLISH, label="bad"),
    ]
    return write_capture(path, flows, steps, pcapng=False)


# ---------------------------------------------------------------------------------------
# Capture C: a truncated file (its last frame, a bare ACK, cut in the middle).


#: Longer than the tests' payload limit (4), so that cut and whole payloads differ.
DELTA_PAYLOAD = b"delta's payload, longer than the limit"


def capture_c(path: Path) -> Written:
    flows = {"delta": (flow(50004), 5)}
    steps = [
        Step("delta", CLIENT, mw.Connect("delta", protocol_version=5)),
        Step("delta", SERVER, mw.ConnAck()),
        Step("delta", CLIENT, mw.Publish("d/x", DELTA_PAYLOAD), label="d/x"),
        Step("delta", CLIENT, end="fin"),
    ]
    return write_capture(path, flows, steps, cut=10)


# ---------------------------------------------------------------------------------------
# Reading the pipeline's output back (with pyarrow: no Spark needed)


def read_rows(out: Path, table: str) -> list[dict[str, Any]]:
    """The rows of OUT/<table> as dicts, in a stable order; ``packets`` gets its
    ``capture`` column back from the partition directories."""
    import pyarrow.dataset as ds

    data = ds.dataset(out / table, format="parquet", partitioning="hive").to_table()
    rows = data.to_pylist()
    for row in rows:
        if "capture" in row and row["capture"] is not None:
            row["capture"] = str(row["capture"])
    return sorted(rows, key=lambda r: repr(sorted(r.items())))


def comparable_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` with every time as integer microseconds since the epoch (a time without a
    zone taken as UTC, as the pipeline writes them), in a stable order: rows read from
    Parquet and rows collected from a DataFrame compare equal so."""
    def plain(value: Any) -> Any:
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=timezone.utc)
            return (value - EPOCH) // timedelta(microseconds=1)
        return value

    out = [{key: plain(value) for key, value in row.items()} for row in rows]
    return sorted(out, key=lambda r: repr(sorted(r.items())))


EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


# ---------------------------------------------------------------------------------------
# Capture "mixed": for splitting one capture over many tasks (tests/spark/test_split.py).
# Many connections interleaved frame by frame, so that a tiny split size puts range
# boundaries everywhere: one that spans the whole file; one whose CONNECT is at the start
# and the rest of its traffic at the end; one with segments reordered, retransmitted and
# lost; one joined mid-stream (no SYN, level inferred); MQTT on another port (found by its
# CONNECT); a connection that is not MQTT (numbered all the same); one 4-tuple used by two
# connections in turn; retained messages set, replaced and removed from two connections;
# IP fragments and a UDP datagram.  pcapng: two interfaces of different link types.


def table_rows(tables: Any) -> dict[str, list[dict[str, Any]]]:
    """Each table of ``read_tables``' result as comparable rows (collected once each)."""
    tables.persist()
    try:
        return {name: comparable_rows(frame.toArrow().to_pylist())
                for name, frame in tables.items()}
    finally:
        tables.unpersist()


def _session(version: int, client_id: str, publishes: list[Any]) -> list[tuple[int, bytes]]:
    """(side, bytes) of a session: CONNECT, CONNACK, ``publishes`` (each answered as its
    QoS asks), DISCONNECT."""
    sent = [(CLIENT, mw.Connect(client_id, protocol_version=version).encode(version)),
            (SERVER, mw.ConnAck().encode(version))]
    for p in publishes:
        sent.append((CLIENT, p.encode(version)))
        if p.qos == 1:
            sent.append((SERVER, mw.PubAck(p.packet_id).encode(version)))
        elif p.qos == 2:
            sent += [(SERVER, mw.PubRec(p.packet_id).encode(version)),
                     (CLIENT, mw.PubRel(p.packet_id).encode(version)),
                     (SERVER, mw.PubComp(p.packet_id).encode(version))]
    sent.append((CLIENT, mw.Disconnect().encode(version)))
    return sent


def _segments(f: TcpFlow, sent: list[tuple[int, bytes]], sizes: tuple[int, ...] = (1460,),
              *, opened: bool = True, closed: bool = True) -> list[bytes]:
    """The IP packets of ``sent`` on ``f``: each send cut into ``sizes``, then ACKed."""
    segs = f.open() if opened else []
    for side, data in sent:
        segs += f.send(side, data, sizes)
        segs.append(f.ack(1 - side))
    if closed:
        segs += f.close()
    return [f.ip(s) for s in segs]


def capture_mixed(path: Path, fmt: str = "pcapng") -> Path:
    """Write the "mixed" capture to ``path`` as ``fmt`` (pcap or pcapng)."""
    from mqttwire.capture.writers import ipv4_fragments, ipv4_packet, tcp_header

    pub = mw.Publish
    long_flow = flow(41001)
    long_pubs = [pub("r/x", b"first", retain=True), pub("gone", b"soon", retain=True)]
    long_pubs += [pub(f"long/{i}", bytes([i]) * (i + 1), qos=1 + i % 2, packet_id=i + 1)
                  for i in range(24)]
    long_pubs.append(pub("r/x", b"last word", retain=True, qos=1, packet_id=100))
    flows: list[list[bytes]] = [_segments(long_flow, _session(5, "long", long_pubs))]

    # CONNECT at the start; everything else after every other flow's frames.
    late = flow(41002)
    late_all = _segments(late, _session(4, "late", [pub("late/t", b"q2", qos=2,
                                                        packet_id=7)]))
    late_head, late_tail = late_all[:6], late_all[6:]
    flows.append(late_head)

    # Reordered, retransmitted and lost segments.
    messy = _segments(flow(41003), _session(4, "messy", [
        pub(f"messy/{i}", b"m" * 30, qos=1, packet_id=i + 1) for i in range(8)]),
        sizes=(7, 13))
    data = [i for i, packet in enumerate(messy) if len(packet) > 40]  # IPv4 + TCP: 40
    messy[data[3]], messy[data[4]] = messy[data[4]], messy[data[3]]
    messy.insert(data[8] + 1, messy[data[7]])
    del messy[data[20] + 1]
    flows.append(messy)

    # Joined mid-stream: no SYN, no CONNECT.
    mid = flow(41004)
    mid.next_seq = [77_000, 88_000]
    flows.append(_segments(mid, [(CLIENT, pub(f"mid/{i}", b"mid", qos=1, packet_id=i + 1)
                                  .encode(4)) for i in range(5)], opened=False))

    # MQTT on another port, found by its CONNECT; a connection that is not MQTT.
    sniffed = TcpFlow(("10.0.0.5", 42000), ("10.0.0.6", 8883))
    flows.append(_segments(sniffed, _session(4, "sniffed", [pub("s/t", b"s")])))
    web = TcpFlow(("10.0.0.5", 42001), ("10.0.0.6", 80))
    flows.append(_segments(web, [(CLIENT, b"GET / HTTP/1.1\r\n\r\n"),
                                 (SERVER, b"HTTP/1.1 204 No Content\r\n\r\n")]))

    # One 4-tuple, two connections in turn (the second with other ISNs); the second
    # replaces a retained message and removes another.
    first = TcpFlow(("10.0.0.9", 45000), ("10.0.0.2", 1883), isn_client=5, isn_server=9)
    second = TcpFlow(("10.0.0.9", 45000), ("10.0.0.2", 1883), isn_client=90_000,
                     isn_server=900_000)
    flows.append(_segments(first, _session(4, "reuse", [pub("r/y", b"y", retain=True)]))
                 + _segments(second, _session(4, "reuse", [
                     pub("r/x", b"replaced", retain=True), pub("gone", b"", retain=True)])))

    # Open at the end of the capture, with data held beyond a hole: the end of the
    # capture ends its streams ("eof") and the hole becomes a gap.
    open_end = _segments(flow(41005), _session(5, "open", [
        pub("open/t", b"o" * 40, qos=1, packet_id=1)])[:-1], sizes=(10,), closed=False)
    del open_end[-4]
    flows.append(open_end)

    # IP fragments of a TCP segment, and a UDP datagram.
    src, dst = bytes([10, 0, 0, 7]), bytes([10, 0, 0, 8])
    segment = tcp_header(src, dst, 46000, 1883, 1, 0, 0x18, b"f" * 64)
    flows.append(ipv4_fragments(src, dst, segment, 32, ident=0x42)
                 + [ipv4_packet(src, dst, b"\0" * 12, proto=17)])

    ips: list[tuple[int, bytes]] = []  # (flow number, packet), round robin over flows
    position = [0] * len(flows)
    while any(position[i] < len(flows[i]) for i in range(len(flows))):
        for i, packets in enumerate(flows):
            if position[i] < len(packets):
                ips.append((i, packets[position[i]]))
                position[i] += 1
    ips += [(1, packet) for packet in late_tail]
    interfaces = 2 if fmt == "pcapng" else 1
    frames = [Frame(T0 + n * FRAME_GAP, packet, interface=i % interfaces)
              for n, (i, packet) in enumerate(ips)]
    buf = io.BytesIO()
    if fmt == "pcapng":
        from mqttwire.capture.link import LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL

        write_pcapng(buf, frames, linktypes=(LINKTYPE_ETHERNET, LINKTYPE_LINUX_SLL),
                     tsresol=(9, 6))
    else:
        write_pcap(buf, frames)
    path.write_bytes(buf.getvalue())
    return path


MAKE_CAPTURE = Path(__file__).resolve().parents[2] / "benchmarks" / "make_capture.py"


def generated_capture(path: Path, size: int) -> Path:
    """A capture of about ``size`` bytes of benchmarks/make_capture.py's traffic (levels 4
    and 5, QoS 0 and 1, many connections), written to ``path``."""
    spec = importlib.util.spec_from_file_location("make_capture", MAKE_CAPTURE)
    assert spec is not None and spec.loader is not None
    make_capture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_capture)
    make_capture.write_capture(str(path), size)
    return path


def stage_tasks(tracker: Any, jobs: set[int]) -> list[int]:
    """The number of tasks of each stage of Spark's ``jobs`` (StatusTracker's ids)."""
    stages = {stage for job in jobs if (info := tracker.getJobInfo(job)) is not None
              for stage in info.stageIds}
    return [info.numTasks for stage in sorted(stages)
            if (info := tracker.getStageInfo(stage)) is not None]


def ring_buffer(raw: bytes, folder: Path, frames: int) -> list[Path]:
    """``raw`` (a capture) cut by ``editcap -c`` into files of ``frames`` frames in the
    new folder ``folder``, as a ring buffer is kept; the files in order."""
    editcap = shutil.which("editcap")
    assert editcap is not None, "editcap (Wireshark's) is needed to cut ring buffers"
    folder.mkdir()
    source = folder / "source.pcapng"
    source.write_bytes(raw)
    subprocess.run([editcap, "-c", str(frames), str(source), str(folder / "ring.pcapng")],
                   check=True, capture_output=True)
    source.unlink()
    return sorted(folder.iterdir())
