"""Write a large synthetic capture of small MQTT PUBLISH traffic, for the capture benchmarks.

Several clients (protocol levels 4 and 5, alternately) each open a TCP connection to
port 1883, CONNECT, get a CONNACK, then publish small messages at QoS 0 and 1; the server
answers every QoS 1 PUBLISH with a PUBACK.  The connections are interleaved frame by frame,
as a capture on a busy broker would show them.  TCP segmentation is what a real sender
does with small writes: a segment usually carries several whole packets (Nagle batching),
and about one segment in eight ends in the middle of a packet whose rest comes in the next
segment, so the reader must reassemble.  The server's PUBACKs are batched the same way;
a pure ACK goes back now and then.  The connections close with DISCONNECT and FIN.

The output is deterministic for given arguments (seeded), a classic pcap on Ethernet,
with a JSON file next to it saying how many frames and MQTT packets of each type it holds.

    python benchmarks/make_capture.py /tmp/mqtt-bench.pcap --size-mb 200

benchmarks/bench_capture.py calls :func:`write_capture` itself and caches the file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script from anywhere in the checkout
    sys.path.insert(0, str(REPO))

import mqttwire as mw  # noqa: E402
from mqttwire.capture.writers import Frame, Segment, TcpFlow, write_pcap  # noqa: E402

#: Capture start (2023-11-14 22:13:20 UTC), and the time between frames (50 us).
T0 = 1_700_000_000_000_000_000
FRAME_GAP_NS = 50_000
SERVER = ("10.0.0.1", 1883)
TOPICS = [f"site/{site}/sensor/{n}/{what}" for site in ("a", "b", "c")
          for n in range(4) for what in ("temp", "hum")]


class _Client:
    """One client connection: its TCP flow, its next packet id, the PUBACKs it is owed."""

    def __init__(self, index: int, rng: random.Random, counts: Counter[str]) -> None:
        self.rng = rng
        self.counts = counts  # MQTT packets written, by type name
        self.version = 4 if index % 2 == 0 else 5
        self.flow = TcpFlow((f"10.0.1.{1 + index}", 40000 + index), SERVER,
                            isn_client=rng.randrange(1 << 32),
                            isn_server=rng.randrange(1 << 32))
        self.client_id = f"bench-{index}"
        self.next_id = 1
        self.acks_due: list[int] = []  # packet ids the server has yet to PUBACK

    def opening(self) -> list[Segment]:
        """Handshake, CONNECT, CONNACK, and the client's ACK of it."""
        connect = mw.Connect(self.client_id, protocol_version=self.version, keep_alive=60)
        connack = mw.ConnAck(session_present=False, reason_code=0)
        self.counts.update(("CONNECT", "CONNACK"))
        return (self.flow.open()
                + self.flow.send(0, connect.encode(self.version))
                + self.flow.send(1, connack.encode(self.version))
                + [self.flow.ack(0)])

    def _publish(self) -> bytes:
        rng = self.rng
        qos = rng.choice((0, 1))
        packet_id = None
        if qos:
            packet_id = self.next_id
            self.next_id = self.next_id % 65535 + 1
            self.acks_due.append(packet_id)
        payload = b"%.2f" % rng.uniform(-20.0, 40.0) + b"x" * rng.randrange(4, 40)
        self.counts["PUBLISH"] += 1
        return mw.Publish(rng.choice(TOPICS), payload, qos=qos,
                          packet_id=packet_id).encode(self.version)

    def burst(self) -> list[Segment]:
        """The client's next write: 1 to 6 PUBLISHes, in one segment or, one time in
        eight, split in two somewhere inside the last packet; then the server's reply."""
        rng = self.rng
        packets = [self._publish() for _ in range(rng.randint(1, 6))]
        data = b"".join(packets)
        if rng.random() < 0.125:
            # Cut inside the last packet (after at least one of its bytes).
            cut = len(data) - rng.randint(1, len(packets[-1]) - 1)
            segments = self.flow.send(0, data, sizes=[cut, len(data) - cut])
        else:
            segments = self.flow.send(0, data, sizes=[len(data)])
        if self.acks_due and rng.random() < 0.7:
            segments += self._acks()
        elif rng.random() < 0.3:
            segments.append(self.flow.ack(1))
        return segments

    def _acks(self) -> list[Segment]:
        """The server's PUBACKs of every QoS 1 PUBLISH not yet acknowledged, in one
        segment."""
        acks = b"".join(mw.PubAck(pid).encode(self.version) for pid in self.acks_due)
        self.counts["PUBACK"] += len(self.acks_due)
        self.acks_due.clear()
        return self.flow.send(1, acks, sizes=[len(acks)])

    def closing(self) -> list[Segment]:
        """The outstanding PUBACKs, DISCONNECT, and the FIN exchange."""
        segments = self._acks() if self.acks_due else []
        segments += self.flow.send(0, mw.Disconnect().encode(self.version))
        self.counts["DISCONNECT"] += 1
        return segments + self.flow.close(0)


def frames(size: int, clients: int = 16, seed: int = 1,
           counts: Counter[str] | None = None) -> Iterator[Frame]:
    """Frames of interleaved client connections until about ``size`` bytes of capture
    have been produced (then every connection is closed).  ``counts`` gets the number of
    frames ("frames") and of MQTT packets by type name ("PUBLISH", "PUBACK", ...)."""
    counts = Counter() if counts is None else counts
    rng = random.Random(seed)
    conns = [_Client(i, random.Random(rng.random()), counts) for i in range(clients)]
    ts = T0
    produced = 0

    def emit(conn: _Client, segments: list[Segment]) -> Iterator[Frame]:
        nonlocal ts, produced
        for seg in segments:
            ip = conn.flow.ip(seg)
            produced += len(ip) + 30  # + Ethernet (14) and pcap record (16) headers
            counts["frames"] += 1
            yield Frame(ts, ip)
            ts += FRAME_GAP_NS

    for conn in conns:
        yield from emit(conn, conn.opening())
    while produced < size:
        conn = conns[rng.randrange(clients)]
        yield from emit(conn, conn.burst())
    for conn in conns:
        yield from emit(conn, conn.closing())


def write_capture(path: str | os.PathLike[str], size: int, clients: int = 16,
                  seed: int = 1) -> dict[str, int]:
    """Write the capture to ``path`` (atomically: a partial file never has the name) and
    return what it holds: "frames", MQTT packets by type name, and "bytes" (file size).
    The same dict goes to ``path`` + ".json"."""
    counts: Counter[str] = Counter()
    tmp = f"{os.fspath(path)}.part"
    with open(tmp, "wb") as f:
        write_pcap(f, frames(size, clients, seed, counts))
    os.replace(tmp, path)
    stats = dict(counts, bytes=os.path.getsize(path))
    with open(f"{os.fspath(path)}.json", "w") as f:
        json.dump(stats, f, indent=1, sort_keys=True)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", nargs="?", default="/tmp/mqttwire-bench-capture.pcap",
                        help="output file (default %(default)s)")
    parser.add_argument("--size-mb", type=float, default=200.0,
                        help="approximate file size in MB of 10**6 bytes (default 200)")
    parser.add_argument("--clients", type=int, default=16,
                        help="client connections (default 16)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    stats = write_capture(args.path, int(args.size_mb * 1e6), args.clients, args.seed)
    print(f"{args.path}: {stats['bytes'] / 1e6:.1f} MB, {stats['frames']:,} frames, "
          f"{stats['PUBLISH']:,} PUBLISH, {stats['PUBACK']:,} PUBACK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
