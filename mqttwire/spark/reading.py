"""One capture's records, plus the TCP stream ends that the connections table needs.

:func:`mqttwire.capture.read_capture` yields the MQTT records of a capture, but not how each
TCP connection ended (FIN, RST or the end of the capture), which the ``connections`` table
reports.  :func:`iter_capture` drives the same public layers (``iter_frames``,
``parse_frame``, ``MqttStreams``) with a handler that also notes every stream end, and
yields those as :class:`StreamEnd` items between the records, in capture order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import BinaryIO, NamedTuple, cast

from ..capture import (
    CaptureFormatError,
    IPFragment,
    MqttStreams,
    Record,
    TcpSegment,
    iter_frames,
    parse_frame,
)
from ..capture.records import ip_text
from ..capture.tcp import TcpStream

__all__ = ["StreamEnd", "iter_capture"]


class StreamEnd(NamedTuple):
    """One direction of an MQTT connection ended.

    Attributes:
        connection_id: the connection's id, as in its records.
        src_ip, src_port: the sender of the direction that ended.
        ts: when (integer ns): the FIN or RST segment, or the last frame of the capture.
        reason: "fin", "rst" or "eof" (the capture ended with the stream still open).
    """

    connection_id: str
    src_ip: str
    src_port: int
    ts: int
    reason: str


Item = Record | StreamEnd


class _EndNotingStreams(MqttStreams):
    """MqttStreams that also appends a StreamEnd to ``out`` when an MQTT direction ends."""

    def on_end(self, stream: TcpStream, ts: int, reason: str) -> None:
        super().on_end(stream, ts, reason)
        if stream.user is not None:  # an MQTT direction (not a sniffed or ignored one)
            conn_id = f"{self.capture}#{stream.conn.index}"
            # Into the records' list, so that the end keeps its place among them.
            end = StreamEnd(conn_id, ip_text(stream.src), stream.sport, ts, reason)
            self.out.append(end)  # type: ignore[arg-type]


def iter_capture(f: BinaryIO, name: str, *, ports: Iterable[int] = (1883,),
                 payload_limit: int | None = None, version: int | None = None,
                 codec: ModuleType | None = None) -> Iterator[Item]:
    """Yield the records of the capture in ``f`` (as ``read_capture`` does) and, between
    them, a :class:`StreamEnd` for each direction of an MQTT connection as it ends.
    ``ports``, ``payload_limit`` and ``version`` are those of ``read_capture``.

    A corrupt or truncated file does not raise: what was decoded is yielded, the open
    streams are ended ("eof"), and a last record of kind "capture_error" says what is
    wrong.
    """
    if codec is None:
        from .._impl import impl

        codec = impl
    handler = _EndNotingStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                                version=version)
    add = handler.reassembler.add
    out = handler.out
    ts = 0
    failure: CaptureFormatError | None = None
    try:
        for index, _offset, ts, linktype, data, _orig_len, _iface in iter_frames(f, name):
            seg = parse_frame(linktype, data)
            if seg is None:
                continue
            handler.frame = index
            if type(seg) is TcpSegment:
                add(ts, seg)
            else:
                out.append(_fragment_record(name, index, ts, cast(IPFragment, seg)))
            if out:
                yield from out
                out.clear()
    except CaptureFormatError as exc:
        failure = exc
    handler.reassembler.flush(ts)
    yield from out
    out.clear()
    if failure is not None:
        yield Record("capture_error", name, ts, error=str(failure), error_offset=failure.offset)


def _fragment_record(name: str, index: int, ts: int, frag: IPFragment) -> Record:
    """The record of an IP fragment, as ``read_capture`` makes it."""
    return Record(
        "fragment", name, ts, index, src_ip=ip_text(frag.src), src_port=frag.sport,
        dst_ip=ip_text(frag.dst), dst_port=frag.dport, length=frag.length,
        error=(f"IP fragment (protocol {frag.protocol}, id 0x{frag.ident:x}, offset "
               f"{frag.offset}{', more follow' if frag.more else ''}): not reassembled"))
