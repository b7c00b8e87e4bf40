"""What a broker had in flight towards one client, counted from a capture by MQTT's rules,
read with mqttwire's own capture reader (test_live_backlog.py).

A QoS 1/2 PUBLISH from the server holds its packet identifier until the client's PUBACK
(QoS 1) or PUBCOMP (QoS 2), or a PUBREC with a reason code of 0x80 or more
(5.0 §2.2.1, §4.3.3; 3.1.1 §2.3.1): a new PUBLISH with an identifier still held breaks
5.0 [MQTT-2.2.1-4] (3.1.1 [MQTT-2.3.1-4]), and more of them unacknowledged at once than
the client's Receive Maximum breaks [MQTT-3.3.4-9].  An acknowledgement is matched to
the oldest PUBLISH holding its identifier.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mqttwire.capture import Record, read_capture


@dataclass
class Held:
    """A PUBLISH the client has not finished acknowledging."""

    frame: int
    qos: int
    dup: bool
    state: str = "not acknowledged"  # then "PUBREC sent", "PUBREL received"


@dataclass
class Clash:
    """A new PUBLISH whose identifier an earlier one still held."""

    frame: int
    packet_id: int
    qos: int
    dup: bool
    held: Held
    in_flight: int  # QoS 1/2 PUBLISHes unacknowledged at that moment, the earlier included


@dataclass
class Flight:
    """One connection of the client, as the capture shows it."""

    connection_id: str
    receive_maximum: int
    publishes: int = 0  # QoS 1/2 PUBLISHes the server sent
    peak: int = 0  # the most unacknowledged at once
    #: PUBLISHes that came with the Receive Maximum or more already unacknowledged
    #: (5.0; 3.1.1 has no Receive Maximum).
    over_receive_maximum: int = 0
    clashes: list[Clash] = field(default_factory=list)
    unacknowledged_at_end: int = 0


def flights(path: Path, port: int) -> dict[str, list[Flight]]:
    """Each client's connections in the capture, in order, by client id (read with the
    codec ``import mqttwire`` chose: the capture is the evidence, not the code under
    test)."""
    records = sorted((r for r in read_capture(path, ports=[port])
                      if r.kind == "packet" and r.client_id is not None),
                     key=lambda r: (r.frame, r.stream_offset or 0))
    by_connection: dict[tuple[str, str], list[Record]] = {}
    for record in records:
        assert record.client_id is not None
        by_connection.setdefault((record.client_id, record.connection_id), []).append(record)
    found: dict[str, list[Flight]] = {}
    for (client_id, connection_id), rs in by_connection.items():
        found.setdefault(client_id, []).append(_flight(connection_id, rs))
    return found


def _flight(connection_id: str, records: list[Record]) -> Flight:
    flight = Flight(connection_id, 65535)
    held: dict[int, deque[Held]] = {}
    count = 0
    for r in records:
        kind, pid = r.packet_type, r.packet_id
        if kind == "CONNECT":
            props = r.properties
            if r.protocol_version == 5 and props is not None and props.receive_maximum:
                flight.receive_maximum = props.receive_maximum
        elif r.direction == "s2c" and kind == "PUBLISH" and r.qos:
            assert pid is not None and r.qos is not None and r.dup is not None
            flight.publishes += 1
            if r.protocol_version == 5 and count >= flight.receive_maximum:
                flight.over_receive_maximum += 1
            queue = held.setdefault(pid, deque())
            if queue:
                flight.clashes.append(Clash(r.frame, pid, r.qos, r.dup, queue[0], count + 1))
            queue.append(Held(r.frame, r.qos, r.dup))
            count += 1
            flight.peak = max(flight.peak, count)
        elif pid is not None and held.get(pid):
            first = held[pid][0]
            ended = (r.direction == "c2s" and (
                kind in ("PUBACK", "PUBCOMP")
                or (kind == "PUBREC" and r.reason_code is not None and r.reason_code >= 0x80)))
            if ended:
                held[pid].popleft()
                count -= 1
            elif r.direction == "c2s" and kind == "PUBREC":
                first.state = "PUBREC sent"
            elif r.direction == "s2c" and kind == "PUBREL":
                first.state = "PUBREL received"
    flight.unacknowledged_at_end = count
    return flight
