"""``StreamDecoder`` of the pure-Python twin, re-exported by ``_pure``.

Twin of ``_codec/stream_c.pxi``.  The class docstring is ``_codec.docstrings.STREAM_DECODER``,
which both twins assign; the methods' docstrings are the same text in both files
(tests/codec/test_parity.py compares them).  The framing loop reads short fixed headers inline,
as ``_codec.decode.decode()`` does, and calls the body decoders of ``_codec.decode`` straight
from its table.
"""

from __future__ import annotations

from typing import Any

from .._constants import PACKET_NAMES
from .._errors import MQTTWireError
from .datatypes import Buffer, as_buffer, check_version, connect_order_error, too_large
from .decode import FIRST_BYTE_DECODERS
from .docstrings import STREAM_DECODER
from .framing import read_header
from .packets import Packet

__all__ = ["StreamDecoder"]


class StreamDecoder:
    # The docstring, shared with the Cython twin, is _codec.docstrings.STREAM_DECODER.
    __doc__ = STREAM_DECODER

    __slots__ = (
        "version",
        "max_packet_size",
        "_learn",
        "_buffer",
        "_need",
        "_consumed",
        "_error",
        "_feeding",
    )

    def __init__(self, version: int | None = None, *, max_packet_size: int | None = None) -> None:
        if version is not None:
            check_version(version)
        if max_packet_size is not None and max_packet_size < 2:
            raise ValueError(f"max_packet_size must be at least 2, not {max_packet_size}")
        self.version = version
        self.max_packet_size = max_packet_size
        self._learn = version is None
        self._buffer = bytearray()  # the incomplete packet carried over to the next feed()
        self._need = 0  # its full size once its fixed header is known, else 0
        self._consumed = 0  # stream offset of self._buffer[0]
        self._error: MQTTWireError | None = None
        self._feeding = False

    def feed(self, chunk: Any) -> list[Packet]:
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

    def _feed(self, chunk: Any) -> list[Packet]:
        chunk = as_buffer(chunk)
        buf = self._buffer
        if buf:
            # Append (amortised O(1)) and parse nothing until the pending packet can be
            # complete: a large packet fed one byte at a time stays linear.
            buf += chunk
            if len(buf) < self._need:
                return []
            view = memoryview(buf)
            try:
                pos, out = self._parse(view)
            finally:
                view.release()  # decoded packets hold copies, never views of the buffer
            del buf[:pos]
        else:
            # Nothing pending: parse the chunk in place and keep only its incomplete tail.
            pos, out = self._parse(chunk)
            if pos < len(chunk):
                buf += chunk[pos:]
        return out

    def _parse(self, data: Buffer) -> tuple[int, list[Packet]]:
        """Decode the complete packets at the start of ``data``: (bytes used, packets)."""
        n = len(data)
        pos = 0
        out: list[Packet] = []
        append = out.append
        limit = self.max_packet_size
        learn = self._learn
        # A server-side decoder reads the CONNECT's fixed header at level 5 (the same at
        # every level); the CONNECT decoder takes the level from the packet itself.
        version: int = 5 if self.version is None else self.version
        decoders = FIRST_BYTE_DECODERS[version]
        self._need = 0
        try:
            while pos < n:
                b0 = data[pos]
                if learn:
                    err = connect_order_error(b0, pos, self.version)
                    if err is not None:
                        raise err
                # The fixed header as in decode(): one- and two-byte Remaining Lengths
                # inline, the rest (and every error) through read_header().  Inline on
                # purpose: a call costs more than a third of a small PUBLISH's decode
                # (measured: see "Speed" in _codec.decode).
                body = end = 0
                decoder = decoders[b0]
                if pos + 1 < n and decoder is not None:
                    b1 = data[pos + 1]
                    if b1 < 0x80:
                        body = pos + 2
                        end = body + b1
                    elif pos + 2 < n and 0 < data[pos + 2] < 0x80:
                        body = pos + 3
                        end = body + ((b1 & 0x7F) | (data[pos + 2] << 7))
                if not body:
                    header = read_header(data, pos, n, version)
                    if header is None:
                        break
                    body, end = header
                if limit is not None and end - pos > limit:
                    raise too_large(PACKET_NAMES[b0 >> 4], pos, end - pos, limit)
                if end > n:
                    self._need = end - pos
                    break
                packet = decoder(data, body, end, b0, version)  # type: ignore[misc]
                if learn and self.version is None:
                    self.version = version = packet.protocol_version
                    decoders = FIRST_BYTE_DECODERS[version]
                append(packet)
                pos = end
        except MQTTWireError as exc:
            if exc.offset is not None:
                exc.offset += self._consumed
            exc.packets = out
            self._error = exc
            self._buffer = bytearray()
            raise
        self._consumed += pos
        return pos, out

    @property
    def buffered(self) -> int:
        """How many bytes of an incomplete packet are held."""
        return len(self._buffer)

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else f"{len(self._buffer)} bytes buffered"
        return (f"StreamDecoder(version={self.version!r}, "
                f"max_packet_size={self.max_packet_size!r}, {state})")
