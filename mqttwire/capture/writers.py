"""Synthetic captures: MQTT bytes in TCP segments in IP in any link layer, written as
classic pcap or pcapng.

Used by the tests (to know exactly what a capture holds), the benchmarks (to make large
captures) and anyone who wants a capture without a network.  Example::

    flow = TcpFlow(("10.0.0.1", 50000), ("10.0.0.2", 1883))
    segments = flow.open() + flow.send(0, connect_bytes, sizes=[7, 100]) + flow.close()
    frames = [Frame(1_700_000_000_000_000_000 + i * 1000, flow.ip(s)) for i, s in
              enumerate(segments)]
    with open("x.pcapng", "wb") as f:
        write_pcapng(f, frames)

A :class:`Frame` holds an IP packet; the writers wrap it in the interface's link layer
(see :func:`link_frame`).  Checksums are computed, so Wireshark shows no errors.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import BinaryIO

from .link import (
    LINKTYPE_ETHERNET,
    LINKTYPE_IPV4,
    LINKTYPE_IPV6,
    LINKTYPE_LINUX_SLL,
    LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP,
    LINKTYPE_NULL,
    LINKTYPE_RAW,
)
from .tcp import ACK, FIN, RST, SYN
from .websocket import accept_key

__all__ = [
    "Frame",
    "Segment",
    "TcpFlow",
    "WEBSOCKET_KEY",
    "ipv4_fragments",
    "ipv4_packet",
    "ipv6_packet",
    "link_frame",
    "pcapng_block",
    "tcp_header",
    "websocket_frame",
    "websocket_request",
    "websocket_response",
    "write_pcap",
    "write_pcapng",
]

PSH = 0x08


def _checksum(data: bytes) -> bytes:
    """The Internet checksum (RFC 1071) of ``data``, as the two bytes to store.

    Summed in native byte order: RFC 1071 §2(B) shows the result is then simply in native
    order too, which is what struct "=H" stores.
    """
    if len(data) & 1:
        data += b"\0"
    total = sum(memoryview(data).cast("H"))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return struct.pack("=H", ~total & 0xFFFF)


def _addr(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def tcp_header(src: bytes, dst: bytes, sport: int, dport: int, seq: int, ack: int,
               flags: int, payload: bytes, window: int = 65535) -> bytes:
    """A TCP header (20 bytes, no options) followed by ``payload``, with its checksum
    over the IPv4 or IPv6 pseudo-header of ``src``/``dst``."""
    # sport, dport, seq, ack, data offset (5 words << 4), flags, window, checksum, urgent
    header = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF,
                         5 << 4, flags, window, 0, 0)
    segment = header + payload
    if len(src) == 4:
        pseudo = src + dst + struct.pack("!BBH", 0, 6, len(segment))
    else:
        pseudo = src + dst + struct.pack("!IxxxB", len(segment), 6)
    return segment[:16] + _checksum(pseudo + segment) + segment[18:]


def ipv4_packet(src: bytes, dst: bytes, payload: bytes, *, proto: int = 6, ident: int = 0,
                frag_offset: int = 0, more_fragments: bool = False,
                total_length: int | None = None) -> bytes:
    """An IPv4 datagram (20-byte header, DF clear).  ``frag_offset`` is in bytes (a
    multiple of 8); ``total_length`` overrides the length field (to make bad packets)."""
    length = 20 + len(payload) if total_length is None else total_length
    frag = (frag_offset // 8) | (0x2000 if more_fragments else 0)
    # version 4 / IHL 5, TOS, total length, id, flags+offset, TTL 64, protocol, checksum
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, ident, frag, 64, proto, 0,
                         src, dst)
    return header[:10] + _checksum(header) + header[12:] + payload


def ipv6_packet(src: bytes, dst: bytes, payload: bytes, *, next_header: int = 6) -> bytes:
    """An IPv6 packet (no extension headers unless ``payload`` carries them)."""
    # version 6 / traffic class / flow label, payload length, next header, hop limit 64
    return struct.pack("!IHBB", 6 << 28, len(payload), next_header, 64) + src + dst + payload


def ipv4_fragments(src: bytes, dst: bytes, payload: bytes, size: int, ident: int) -> list[bytes]:
    """``payload`` (a whole TCP segment) split into IPv4 fragments of ``size`` bytes
    (a multiple of 8) each."""
    out = []
    for start in range(0, len(payload), size):
        out.append(ipv4_packet(src, dst, payload[start : start + size], ident=ident,
                               frag_offset=start,
                               more_fragments=start + size < len(payload)))
    return out


@dataclass
class Segment:
    """A TCP segment of a :class:`TcpFlow`: ``side`` 0 is the client, 1 the server."""

    side: int
    seq: int
    ack: int
    flags: int
    payload: bytes = b""


@dataclass
class TcpFlow:
    """The segments of one TCP connection between ``client`` and ``server`` (each an
    (IP address text, port) pair; IPv4 or IPv6).  Sequence numbers start at the ISNs,
    modulo 2**32, so an ISN near 2**32 makes the stream wrap around."""

    client: tuple[str, int]
    server: tuple[str, int]
    isn_client: int = 1000
    isn_server: int = 500_000
    next_seq: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.next_seq = [self.isn_client, self.isn_server]
        self._addrs = (_addr(self.client[0]), _addr(self.server[0]))

    def _segment(self, side: int, flags: int, payload: bytes = b"") -> Segment:
        seq = self.next_seq[side]
        ack = self.next_seq[1 - side] if flags & ACK else 0
        self.next_seq[side] = (seq + len(payload) + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF
        return Segment(side, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, flags, payload)

    def open(self) -> list[Segment]:
        """SYN, SYN-ACK, ACK."""
        return [self._segment(0, SYN), self._segment(1, SYN | ACK), self._segment(0, ACK)]

    def send(self, side: int, data: bytes, sizes: Sequence[int] = (1460,)) -> list[Segment]:
        """``data`` from ``side`` in segments of the given sizes (used in turn, cyclically)."""
        out = []
        pos = 0
        i = 0
        while pos < len(data):
            size = sizes[i % len(sizes)]
            i += 1
            out.append(self._segment(side, ACK | PSH, data[pos : pos + size]))
            pos += size
        return out

    def ack(self, side: int) -> Segment:
        """A pure ACK from ``side`` of everything the other side has sent."""
        return self._segment(side, ACK)

    def close(self, first: int = 0) -> list[Segment]:
        """FIN from ``first``, FIN from the other side, last ACK."""
        return [self._segment(first, FIN | ACK), self._segment(1 - first, FIN | ACK),
                self._segment(first, ACK)]

    def reset(self, side: int) -> Segment:
        return self._segment(side, RST | ACK)

    def ip(self, seg: Segment) -> bytes:
        """The IP packet carrying ``seg``."""
        ends = (self.client, self.server)
        src, dst = self._addrs[seg.side], self._addrs[1 - seg.side]
        sport, dport = ends[seg.side][1], ends[1 - seg.side][1]
        tcp = tcp_header(src, dst, sport, dport, seg.seq, seg.ack, seg.flags, seg.payload)
        if len(src) == 4:
            return ipv4_packet(src, dst, tcp)
        return ipv6_packet(src, dst, tcp)


def link_frame(linktype: int, ip: bytes, *, vlan: Sequence[int] = (),
               byteorder: str = "<") -> bytes:
    """``ip`` wrapped in the link layer of ``linktype``.

    ``vlan`` adds 802.1Q tags (VLAN ids) to an Ethernet frame; ``byteorder`` is the
    capturing host's, which a BSD NULL header uses for its address family.
    """
    v6 = ip[0] >> 4 == 6
    ethertype = 0x86DD if v6 else 0x0800
    if linktype == LINKTYPE_ETHERNET:
        tags = b"".join(struct.pack("!HH", 0x8100, vid) for vid in vlan)
        # destination MAC, source MAC, tags, EtherType
        return b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + tags + struct.pack("!H", ethertype) + ip
    if linktype == LINKTYPE_LINUX_SLL:
        # packet type 0 (to us), ARPHRD_ETHER 1, address length 6, address padded to 8
        return struct.pack("!HHH8sH", 0, 1, 6, b"\x02\0\0\0\0\x01", ethertype) + ip
    if linktype == LINKTYPE_LINUX_SLL2:
        # protocol, reserved, interface index 1, ARPHRD_ETHER, packet type, address len
        return struct.pack("!HHIHBB8s", ethertype, 0, 1, 1, 0, 6, b"\x02\0\0\0\0\x01") + ip
    if linktype == LINKTYPE_NULL:
        return struct.pack(byteorder + "I", 30 if v6 else 2) + ip  # AF_INET6 as on macOS
    if linktype == LINKTYPE_LOOP:
        return struct.pack("!I", 24 if v6 else 2) + ip  # AF_INET6 as on OpenBSD
    if linktype in (LINKTYPE_RAW, LINKTYPE_IPV4, LINKTYPE_IPV6):
        return ip
    raise ValueError(f"link type {linktype} is not supported")


@dataclass
class Frame:
    """A frame to write: capture time (ns), the IP packet, and the pcapng interface."""

    ts: int
    ip: bytes
    interface: int = 0
    vlan: tuple[int, ...] = ()
    snaplen: int | None = None  # cut the written frame to this many bytes


def _frame_bytes(frame: Frame, linktype: int, byteorder: str) -> tuple[bytes, int]:
    data = link_frame(linktype, frame.ip, vlan=frame.vlan, byteorder=byteorder)
    wire = len(data)
    if frame.snaplen is not None:
        data = data[: frame.snaplen]
    return data, wire


def write_pcap(f: BinaryIO, frames: Iterable[Frame], *, linktype: int = LINKTYPE_ETHERNET,
               byteorder: str = "<", nanoseconds: bool = False, snaplen: int = 262144) -> None:
    """Write a classic pcap file (all frames use ``linktype``)."""
    magic = 0xA1B23C4D if nanoseconds else 0xA1B2C3D4
    f.write(struct.pack(byteorder + "IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype))
    record = struct.Struct(byteorder + "IIII")
    unit = 1 if nanoseconds else 1000
    for frame in frames:
        data, wire = _frame_bytes(frame, linktype, byteorder)
        seconds, rest = divmod(frame.ts, 1_000_000_000)
        f.write(record.pack(seconds, rest // unit, len(data), wire))
        f.write(data)


def pcapng_block(block_type: int, body: bytes, byteorder: str = "<") -> bytes:
    """A pcapng block: type, total length, body padded to 4 bytes, total length."""
    body += b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack(byteorder + "II", block_type, total) + body + struct.pack(
        byteorder + "I", total)


def write_pcapng(f: BinaryIO, frames: Iterable[Frame], *,
                 linktypes: Sequence[int] = (LINKTYPE_ETHERNET,), byteorder: str = "<",
                 tsresol: Sequence[int] | None = None, simple: bool = False) -> None:
    """Write a pcapng file: one section, one interface per entry of ``linktypes`` (with
    the timestamp resolution ``tsresol[i]`` as the if_tsresol option's value; default
    microseconds, written without the option), and one Enhanced Packet Block per frame,
    or Simple Packet Blocks (no timestamps, interface 0) if ``simple``."""
    o = byteorder
    # SHB body: byte-order magic, version 1.0, section length -1 (unknown)
    f.write(pcapng_block(0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1), o))
    resolutions: list[int] = []
    for linktype in linktypes:
        resol = 6 if tsresol is None else tsresol[len(resolutions)]
        options = b""
        if resol != 6:
            options = struct.pack(o + "HHB3x", 9, 1, resol) + struct.pack(o + "HH", 0, 0)
        # IDB body: link type, reserved, snaplen 0 (no limit), options
        f.write(pcapng_block(1, struct.pack(o + "HHI", linktype, 0, 0) + options, o))
        resolutions.append(resol)
    for frame in frames:
        linktype = linktypes[frame.interface]
        data, wire = _frame_bytes(frame, linktype, byteorder)
        if simple:
            f.write(pcapng_block(3, struct.pack(o + "I", wire) + data, o))
            continue
        # Timestamp in units of 10**-resol seconds.
        units = frame.ts * 10 ** resolutions[frame.interface] // 1_000_000_000
        body = struct.pack(o + "IIIII", frame.interface, units >> 32, units & 0xFFFFFFFF,
                           len(data), wire) + data
        f.write(pcapng_block(6, body, o))


# ---------------------------------------------------------------------------------------
# MQTT over WebSocket (RFC 6455): the handshake and frames, for TcpFlow.send

#: The Sec-WebSocket-Key of RFC 6455 §1.3's example.
WEBSOCKET_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def websocket_request(protocols: str | None = "mqtt", *, key: str = WEBSOCKET_KEY,
                      path: str = "/mqtt", extra: str = "") -> bytes:
    """A client's WebSocket Upgrade request offering the subprotocols ``protocols`` (the
    Sec-WebSocket-Protocol value; None: no such field); ``extra``: more header lines,
    each ending in CRLF."""
    offer = f"Sec-WebSocket-Protocol: {protocols}\r\n" if protocols is not None else ""
    return (f"GET {path} HTTP/1.1\r\nHost: broker\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n{offer}"
            f"Sec-WebSocket-Version: 13\r\n{extra}\r\n").encode("latin-1")


def websocket_response(protocol: str | None = "mqtt", *, key: str = WEBSOCKET_KEY,
                       status: str = "101 Switching Protocols", accept: str | None = None,
                       upgrade: bool = True, extra: str = "") -> bytes:
    """The server's answer to :func:`websocket_request`: ``protocol`` selected (None: no
    Sec-WebSocket-Protocol field), the Sec-WebSocket-Accept for ``key`` unless ``accept``
    is given; ``upgrade``: with the Upgrade and Connection fields."""
    fields = "Upgrade: websocket\r\nConnection: Upgrade\r\n" if upgrade else ""
    fields += f"Sec-WebSocket-Accept: {accept if accept is not None else accept_key(key)}\r\n"
    if protocol is not None:
        fields += f"Sec-WebSocket-Protocol: {protocol}\r\n"
    return f"HTTP/1.1 {status}\r\n{fields}{extra}\r\n".encode("latin-1")


def websocket_frame(payload: bytes, *, opcode: int = 2, fin: bool = True,
                    mask: bytes | None = None, rsv: int = 0,
                    length_size: int | None = None) -> bytes:
    """One WebSocket frame (RFC 6455 §5.2): binary (opcode 2) by default; ``mask``: the
    4-byte masking key of a client frame (§5.3), None for a server frame; ``rsv``: the
    RSV bits (0x40, 0x20, 0x10); ``length_size``: 0, 2 or 8 extra length bytes (default
    the minimal form; 2 or 8 for a shorter payload is the non-minimal form)."""
    n = len(payload)
    if length_size is None:
        length_size = 0 if n < 126 else 2 if n < 0x10000 else 8
    code = {0: n, 2: 126, 8: 127}[length_size]
    header = bytes([(0x80 if fin else 0) | rsv | opcode, (0x80 if mask else 0) | code])
    header += n.to_bytes(length_size, "big") if length_size else b""
    if mask:
        header += mask
        payload = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
    return header + payload
