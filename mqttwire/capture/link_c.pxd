# A frame's headers in C, for the compiled capture loops (loop_c.pyx, sections_c.pyx): the
# common case of link.py (Ethernet with VLAN tags, Linux SLL and SLL2, raw IP, BSD null;
# IPv4 without fragments, IPv6 without extension headers; TCP) and of pcap.py's pcapng
# interfaces (link type, time conversion).  Inline functions and types only, so cimporting
# this file imports no module at run time; each loop compiles its own copy.
#
# What these functions do not read (anything else, and every malformed header) they
# return False for, and the caller hands the frame to link.py, which is the reference.

from libc.stdint cimport INT64_MAX, int64_t, uint8_t, uint32_t, uint64_t


cdef inline uint32_t be16(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] << 8) | p[1]


cdef inline uint32_t be32(const uint8_t* p) noexcept:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline uint32_t u32(const uint8_t* p, bint big) noexcept:
    if big:
        return be32(p)
    return (<uint32_t>p[3] << 24) | (<uint32_t>p[2] << 16) | (<uint32_t>p[1] << 8) | p[0]


# ---------------------------------------------------------------------------------------
# Link layer, IP and TCP: the common case only (link.py decides everything else)


ctypedef struct Seg:
    int alen  # 4 or 16
    const uint8_t* src
    const uint8_t* dst
    uint32_t sport, dport, seq, ack, flags
    const uint8_t* payload
    Py_ssize_t caplen  # captured payload bytes
    Py_ssize_t wire_len  # payload bytes on the wire


cdef inline bint _tcp(const uint8_t* d, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t wire_end,
                      Seg* s) noexcept:
    cdef Py_ssize_t hlen
    if end - pos < 20:
        return False
    hlen = (d[pos + 12] >> 4) * 4
    if hlen < 20 or pos + hlen > end:
        return False
    s.sport = be16(d + pos)
    s.dport = be16(d + pos + 2)
    s.seq = be32(d + pos + 4)
    s.ack = be32(d + pos + 8)
    s.flags = d[pos + 13]
    s.payload = d + pos + hlen
    s.caplen = end - pos - hlen
    s.wire_len = wire_end - pos - hlen
    return True


cdef inline bint _ipv4(const uint8_t* d, Py_ssize_t n, Py_ssize_t pos, Seg* s) noexcept:
    cdef Py_ssize_t ihl, total, wire_end, end
    if n - pos < 20 or d[pos] >> 4 != 4:
        return False
    ihl = (d[pos] & 0x0F) * 4
    total = be16(d + pos + 2)
    if ihl < 20 or (total and total < ihl):
        return False
    # As link.py: a total length of 0 (segmentation offload) means what was captured.
    wire_end = pos + total if total else n
    end = wire_end if wire_end < n else n
    # Not TCP, or a fragment (MF flag or fragment offset): link.py's business.
    if pos + ihl > end or d[pos + 9] != 6 or be16(d + pos + 6) & 0x3FFF:
        return False
    s.alen = 4
    s.src = d + pos + 12
    s.dst = d + pos + 16
    return _tcp(d, pos + ihl, end, wire_end, s)


cdef inline bint _ipv6(const uint8_t* d, Py_ssize_t n, Py_ssize_t pos, Seg* s) noexcept:
    cdef Py_ssize_t plen, wire_end, end
    if n - pos < 40 or d[pos] >> 4 != 6 or d[pos + 6] != 6:  # extension headers: link.py
        return False
    plen = be16(d + pos + 4)
    wire_end = pos + 40 + plen if plen else n
    end = wire_end if wire_end < n else n
    s.alen = 16
    s.src = d + pos + 8
    s.dst = d + pos + 24
    return _tcp(d, pos + 40, end, wire_end, s)


cdef inline bint _by_ethertype(const uint8_t* d, Py_ssize_t n, uint32_t ethertype,
                               Py_ssize_t pos, Seg* s) noexcept:
    if ethertype == 0x0800:
        return _ipv4(d, n, pos, s)
    if ethertype == 0x86DD:
        return _ipv6(d, n, pos, s)
    return False


cdef inline bint parse_frame(const uint8_t* d, Py_ssize_t n, int linktype, Seg* s) noexcept:
    """The TCP segment in a frame, into ``s``: True in the common case that link.py
    parses the same way; False for everything else (which goes to link.py)."""
    cdef uint32_t ethertype, family
    cdef Py_ssize_t pos
    if linktype == 1:  # Ethernet, with any number of VLAN tags
        if n < 14:
            return False
        ethertype = be16(d + 12)
        pos = 14
        while ethertype == 0x8100 or ethertype == 0x88A8 or ethertype == 0x9100:
            if n - pos < 4:
                return False
            ethertype = be16(d + pos + 2)
            pos += 4
        return _by_ethertype(d, n, ethertype, pos, s)
    if linktype == 113:  # Linux SLL
        return n >= 16 and _by_ethertype(d, n, be16(d + 14), 16, s)
    if linktype == 276:  # Linux SLL2
        return n >= 20 and _by_ethertype(d, n, be16(d), 20, s)
    if linktype == 101 or linktype == 12 or linktype == 14:  # raw IP
        if n < 1:
            return False
        if d[0] >> 4 == 4:
            return _ipv4(d, n, 0, s)
        return _ipv6(d, n, 0, s)
    if linktype == 228:
        return _ipv4(d, n, 0, s)
    if linktype == 229:
        return _ipv6(d, n, 0, s)
    if linktype == 0 or linktype == 108:  # BSD null / OpenBSD loopback
        if n < 4:
            return False
        family = be32(d)
        if family == 2 or family == 2 << 24:
            return _ipv4(d, n, 4, s)
        if (family == 10 or family == 24 or family == 28 or family == 30
                or family == 10 << 24 or family == 24 << 24 or family == 28 << 24
                or family == 30 << 24):
            return _ipv6(d, n, 4, s)
    return False



# pcapng interfaces

cdef enum:
    MAX_IFACES = 16  # interfaces of a pcapng section read in C; more: the pure reader

ctypedef struct Iface:
    bint fast  # its timestamps convert in 64 bits (mul, div, shift, offset all fit)
    int linktype
    int64_t mul, div, offset_ns
    int shift



cdef inline Py_ssize_t load_ifaces(Iface* table, interfaces) except -1:
    """Copy a pcapng section's interfaces (pcap._Interface) into ``table`` (MAX_IFACES
    entries): each link type and, when they fit in 64 bits, its time conversion's terms.
    Returns how many interfaces the section has."""
    cdef Iface* it
    cdef Py_ssize_t i, n = len(interfaces)
    for i in range(min(n, MAX_IFACES)):
        iface = interfaces[i]
        it = &table[i]
        it.linktype = iface.linktype
        it.fast = True
        for v in (iface.mul, iface.div, iface.offset_ns, iface.shift):
            if type(v) is not int or not -(1 << 62) < v < (1 << 62):
                it.fast = False
        if it.fast:
            it.mul, it.div, it.offset_ns = iface.mul, iface.div, iface.offset_ns
            it.shift = iface.shift
            it.fast = it.mul > 0 and it.div > 0 and 0 <= it.shift < 64
    return n


cdef inline bint epb_ns(const Iface* it, const uint8_t* h, bint big, int64_t* ns) noexcept:
    """The time of the Enhanced Packet Block at ``h``, captured on ``it``, in ns, as
    _Interface.ns computes it, into ``ns``; False when that does not fit in 64 bits (the
    caller hands the block to the pure reader).  units * mul never exceeds 2**61."""
    cdef uint64_t units = (<uint64_t>u32(h + 12, big) << 32) | u32(h + 16, big)
    cdef int64_t ts
    if not it.fast or units > <uint64_t>(INT64_MAX // 4 // it.mul):
        return False
    if it.shift:
        ts = (<int64_t>units * it.mul) >> it.shift
    else:
        ts = <int64_t>units * it.mul // it.div
    if not -(1LL << 61) < ts + it.offset_ns < (1LL << 61):
        return False
    ns[0] = ts + it.offset_ns
    return True
