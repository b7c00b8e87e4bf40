"""Link layers and IPv4/IPv6: from a captured frame to a TCP segment.

:func:`parse_frame` strips the link-layer header (Ethernet with any number of 802.1Q /
802.1ad VLAN tags, Linux cooked SLL and SLL2, BSD loopback/null, raw IP), then the IP
header, and returns the TCP segment in it, or an :class:`IPFragment` for a fragmented IPv4
datagram or an IPv6 datagram with a Fragment header (fragments are reported, not
reassembled).  Anything else (ARP, UDP, a truncated header, a bad version field) gives
None: it is not TCP, so it is not this package's business.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "LINKTYPE_ETHERNET",
    "LINKTYPE_IPV4",
    "LINKTYPE_IPV6",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_LOOP",
    "LINKTYPE_NULL",
    "LINKTYPE_RAW",
    "IPFragment",
    "TcpSegment",
    "parse_frame",
]

LINKTYPE_NULL = 0  # BSD loopback: 4-byte address family in the capturing host's byte order
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101  # raw IPv4 or IPv6, told apart by the version nibble
LINKTYPE_LOOP = 108  # OpenBSD loopback: like NULL, but the family is big-endian
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276
# Some old files carry the platform DLT_RAW value (12 or 14) instead of LINKTYPE_RAW.
_RAW_ALIASES = (12, 14)

_ETH_IPV4 = 0x0800
_ETH_IPV6 = 0x86DD
_VLAN_TAGS = (0x8100, 0x88A8, 0x9100)  # 802.1Q, 802.1ad (QinQ) and the old QinQ value

# Address families in a NULL/LOOP header: AF_INET is 2 everywhere; AF_INET6 is 10 on
# Linux, 24 on NetBSD/OpenBSD, 28 on FreeBSD, 30 on macOS.  The value is in the capturing
# host's byte order, so both orders are accepted (no family value is ambiguous).
_AF_INET = {2, 2 << 24}
_AF_INET6 = {10, 24, 28, 30, 10 << 24, 24 << 24, 28 << 24, 30 << 24}

_TCP = 6
_IPV6_EXTENSIONS = {0, 43, 60}  # hop-by-hop, routing, destination options: (len+1)*8 bytes
_IPV6_FRAGMENT = 44
_IPV6_AH = 51  # authentication header: (len+2)*4 bytes

_ipv6_addresses = struct.Struct("16s16s").unpack_from
_u16 = struct.Struct("!H").unpack_from
_u32 = struct.Struct("!I").unpack_from
# ver/ihl, total length, id, flags/fragment offset, protocol, source, destination
_ipv4_header = struct.Struct("!BxHHHxBxx4s4s").unpack_from
_tcp = struct.Struct("!HHIIBB").unpack_from  # sport, dport, seq, ack, data offset, flags


class TcpSegment(NamedTuple):
    """A TCP segment, as carried in one frame.

    Attributes:
        src, dst: the IP addresses as packed bytes (4 for IPv4, 16 for IPv6).
        sport, dport: the TCP ports.
        seq, ack: sequence and acknowledgement numbers.
        flags: the TCP flag bits (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10, ...).
        payload: the captured part of the payload.
        wire_len: the payload's length on the wire, from the IP length; more than
            ``len(payload)`` when the capture cut the frame short.
    """

    src: bytes
    dst: bytes
    sport: int
    dport: int
    seq: int
    ack: int
    flags: int
    payload: memoryview
    wire_len: int


class IPFragment(NamedTuple):
    """An IP fragment: reported, not reassembled.

    Attributes:
        src, dst: the IP addresses as packed bytes.
        protocol: the IP protocol number of the datagram (6 for TCP).
        ident: the fragment identification.
        offset: the fragment's offset in the datagram, in bytes.
        more: True if more fragments follow.
        sport, dport: the TCP ports when this is a first fragment that holds them, else
            None.
        length: the fragment's payload length.
    """

    src: bytes
    dst: bytes
    protocol: int
    ident: int
    offset: int
    more: bool
    sport: int | None
    dport: int | None
    length: int


_new = tuple.__new__


def _tcp_segment(src: bytes, dst: bytes, data: memoryview, pos: int, end: int,
                 wire_end: int) -> TcpSegment | None:
    """The TCP segment at data[pos:end]; ``wire_end`` is where it ends on the wire."""
    if end - pos < 20:
        return None
    sport, dport, seq, ack, off, flags = _tcp(data, pos)
    hlen = (off >> 4) * 4
    if hlen < 20 or pos + hlen > end:
        return None
    start = pos + hlen
    return _new(
        TcpSegment, (src, dst, sport, dport, seq, ack, flags, data[start:end], wire_end - start)
    )


def _ipv4(data: memoryview, pos: int) -> TcpSegment | IPFragment | None:
    n = len(data)
    if n - pos < 20:
        return None
    vihl, total, ident, frag, proto, src, dst = _ipv4_header(data, pos)
    ihl = (vihl & 0x0F) * 4
    if vihl >> 4 != 4 or ihl < 20:
        return None
    # A total length of 0 is what TCP segmentation offload shows on the sending host:
    # the real length is what was captured.  Otherwise the datagram ends at pos + total
    # (anything after it is link-layer padding), or later than the capture holds.
    wire_end = pos + total if total else n
    if total and total < ihl:
        return None
    end = min(wire_end, n)
    if pos + ihl > end or proto != _TCP:
        return None
    if frag & 0x3FFF:  # MF flag (0x2000) or a fragment offset (0x1FFF, in 8-byte units)
        offset = (frag & 0x1FFF) * 8
        sport = dport = None
        if offset == 0 and end - (pos + ihl) >= 4:
            sport, dport = struct.unpack_from("!HH", data, pos + ihl)
        return _new(
            IPFragment,
            (src, dst, proto, ident, offset, bool(frag & 0x2000), sport, dport,
             wire_end - pos - ihl),
        )
    return _tcp_segment(src, dst, data, pos + ihl, end, wire_end)


def _ipv6(data: memoryview, pos: int) -> TcpSegment | IPFragment | None:
    n = len(data)
    if n - pos < 40 or data[pos] >> 4 != 6:
        return None
    (plen,) = _u16(data, pos + 4)
    nxt = data[pos + 6]
    src, dst = _ipv6_addresses(data, pos + 8)
    # A payload length of 0 means a jumbogram (or offload): use what was captured.
    wire_end = pos + 40 + plen if plen else n
    end = min(wire_end, n)
    p = pos + 40
    while nxt != _TCP:
        if end - p < 8:
            return None
        if nxt in _IPV6_EXTENSIONS:
            nxt, size = data[p], (data[p + 1] + 1) * 8
        elif nxt == _IPV6_AH:
            nxt, size = data[p], (data[p + 1] + 2) * 4
        elif nxt == _IPV6_FRAGMENT:
            (frag,) = _u16(data, p + 2)
            (ident,) = _u32(data, p + 4)
            offset = frag & 0xFFF8
            sport = dport = None
            if offset == 0 and data[p] == _TCP and end - (p + 8) >= 4:
                sport, dport = struct.unpack_from("!HH", data, p + 8)
            return _new(
                IPFragment,
                (src, dst, data[p], ident, offset, bool(frag & 1), sport, dport,
                 wire_end - p - 8),
            )
        else:
            return None  # another protocol, ESP, or no next header
        p += size
    return _tcp_segment(src, dst, data, p, end, wire_end)


def _ip(data: memoryview, pos: int) -> TcpSegment | IPFragment | None:
    if len(data) <= pos:
        return None
    version = data[pos] >> 4
    if version == 4:
        return _ipv4(data, pos)
    if version == 6:
        return _ipv6(data, pos)
    return None


def _by_ethertype(data: memoryview, ethertype: int, pos: int) -> TcpSegment | IPFragment | None:
    if ethertype == _ETH_IPV4:
        return _ipv4(data, pos)
    if ethertype == _ETH_IPV6:
        return _ipv6(data, pos)
    return None


def parse_frame(linktype: int, data: memoryview) -> TcpSegment | IPFragment | None:
    """The TCP segment or IP fragment in a frame of the given link type, or None.

    ``data`` must be a memoryview (or bytes) of the captured frame.  Unknown link types,
    non-IP frames, non-TCP datagrams and headers cut short by the capture give None.
    """
    if linktype == LINKTYPE_ETHERNET:
        if len(data) < 14:
            return None
        (ethertype,) = _u16(data, 12)
        pos = 14
        while ethertype in _VLAN_TAGS:  # each tag: TCI u16, then the next EtherType
            if len(data) - pos < 4:
                return None
            (ethertype,) = _u16(data, pos + 2)
            pos += 4
        return _by_ethertype(data, ethertype, pos)
    if linktype == LINKTYPE_LINUX_SLL:
        # packet type u16, ARPHRD u16, address length u16, address 8 bytes, protocol u16
        if len(data) < 16:
            return None
        return _by_ethertype(data, _u16(data, 14)[0], 16)
    if linktype == LINKTYPE_LINUX_SLL2:
        # protocol u16, reserved u16, interface index u32, ARPHRD u16, packet type u8,
        # address length u8, address 8 bytes
        if len(data) < 20:
            return None
        return _by_ethertype(data, _u16(data, 0)[0], 20)
    if linktype == LINKTYPE_RAW or linktype in _RAW_ALIASES:
        return _ip(data, 0)
    if linktype == LINKTYPE_IPV4:
        return _ipv4(data, 0)
    if linktype == LINKTYPE_IPV6:
        return _ipv6(data, 0)
    if linktype == LINKTYPE_NULL or linktype == LINKTYPE_LOOP:
        if len(data) < 4:
            return None
        (family,) = _u32(data, 0)
        if family in _AF_INET:
            return _ipv4(data, 4)
        if family in _AF_INET6:
            return _ipv6(data, 4)
        return None
    return None

