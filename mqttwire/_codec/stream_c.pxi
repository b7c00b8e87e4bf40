# Included by _speedups.pyx (one extension module); it uses other files' names through
# _speedups.pxd only.
#
# StreamDecoder: the framing loop over the fixed header and body decoders of
# _codec/decode_c.pxi.  The twin of _codec/stream.py.  Its class docstring is
# _codec.docstrings.STREAM_DECODER, which both twins assign; its methods' docstrings are the same
# text as there (tests/codec/test_parity.py compares them all).


@cython.final
cdef class StreamDecoder:
    # The docstring, shared with the pure twin: a class-body assignment, which Cython
    # turns into the type's __doc__ (a docstring literal would have to repeat the text).
    __doc__ = _STREAM_DECODER_DOC

    # Its fields are declared in _speedups.pxd (the compiled capture loop reads them).

    def __init__(self, version=None, *, max_packet_size=None):
        if version is not None:
            _check_version(version)
        if max_packet_size is not None and max_packet_size < 2:
            raise ValueError(f"max_packet_size must be at least 2, not {max_packet_size}")
        self.version = version
        self.max_packet_size = max_packet_size
        self._learn = version is None
        self._buffer = bytearray()
        self._need = 0
        self._consumed = 0
        self._error = None
        self._feeding = False

    def feed(self, chunk):
        """Add ``chunk`` to the stream; return the packets it completes, in order."""
        if self._error is not None:
            self._error.packets = []
            raise self._error
        if self._feeding:
            raise RuntimeError("StreamDecoder.feed() is not re-entrant")
        self._feeding = True
        try:
            return self._feed(chunk)
        finally:
            self._feeding = False

    cdef list _feed(self, object chunk):
        cdef _Input inp = _Input()
        cdef Py_ssize_t have, pos
        cdef list out
        inp.open(chunk)
        try:
            have = PyByteArray_GET_SIZE(self._buffer)
            if have:
                # Append (amortised O(1)) and parse nothing until the pending packet can
                # be complete: a large packet fed one byte at a time stays linear.
                if inp.n:
                    PyByteArray_Resize(self._buffer, have + inp.n)
                    memcpy(PyByteArray_AS_STRING(self._buffer) + have, inp.p, inp.n)
                have += inp.n
                if have < self._need:
                    return []
                out = []
                pos = self._parse(<const unsigned char*>PyByteArray_AS_STRING(self._buffer),
                                  have, out)
                if pos:  # compact: keep only the incomplete tail
                    memmove(PyByteArray_AS_STRING(self._buffer),
                            PyByteArray_AS_STRING(self._buffer) + pos, have - pos)
                    PyByteArray_Resize(self._buffer, have - pos)
            else:
                # Nothing pending: parse the chunk in place and keep only its tail.
                out = []
                pos = self._parse(inp.p, inp.n, out)
                if pos < inp.n:
                    PyByteArray_Resize(self._buffer, inp.n - pos)
                    memcpy(PyByteArray_AS_STRING(self._buffer), inp.p + pos, inp.n - pos)
            return out
        finally:
            inp.release()

    cdef Py_ssize_t _parse(self, const unsigned char* p, Py_ssize_t n, list out) except -1:
        """Decode the complete packets at the start of p[0:n] into ``out``; return the
        number of bytes they used."""
        cdef Py_ssize_t pos = 0, body, end, limit = -1
        cdef int version
        cdef unsigned char b0
        if self.max_packet_size is not None:
            limit = self.max_packet_size
        self._need = 0
        try:
            while pos < n:
                b0 = p[pos]
                # A server-side decoder wants CONNECT first and only once: the shared
                # builder words the error when (in C terms) the order is wrong.
                if self._learn and ((b0 >> 4 == 1) == (self.version is not None)):
                    raise connect_order_error(b0, pos, self.version)
                version = 5 if self.version is None else self.version
                if not _header(p, pos, n, version, &body, &end):
                    break
                if limit >= 0 and end - pos > limit:
                    raise too_large(PACKET_NAMES[b0 >> 4], pos, end - pos, limit)
                if end > n:
                    self._need = end - pos
                    break
                packet = _decode_body(p, pos, body, end, version)
                if self.version is None:
                    self.version = packet.protocol_version
                out.append(packet)
                pos = end
        except MQTTWireError as exc:
            _shift(exc, self._consumed)
            exc.packets = out
            self._error = exc
            self._buffer = bytearray()
            raise
        self._consumed += pos
        return pos

    @property
    def buffered(self):
        """How many bytes of an incomplete packet are held."""
        return len(self._buffer)

    def __repr__(self):
        state = "failed" if self._error is not None else f"{len(self._buffer)} bytes buffered"
        return (f"StreamDecoder(version={self.version!r}, "
                f"max_packet_size={self.max_packet_size!r}, {state})")
