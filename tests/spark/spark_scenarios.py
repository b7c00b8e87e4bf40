"""Synthetic captures for the pipeline tests, and what each one holds.

Each scenario is a list of steps on named TCP connections; :func:`write_capture` turns it
into a pcap or pcapng file (with mqttwire.capture.synth) and returns the capture time of
every step, so that the tests can state expected times and latencies from the scenario
itself.  The packets are encoded with the pure-Python codec.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import mqttwire._pure as mw
from mqttwire.capture.synth import Frame, TcpFlow, write_pcap, write_pcapng

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
