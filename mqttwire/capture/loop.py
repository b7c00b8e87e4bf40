"""The per-frame loop of :func:`mqttwire.capture.read_capture`, in pure Python.

:func:`_read_pure` is the reference loop (:func:`_read_pure_chain` the same over the
files of a set) (and the one used with the pure codec, or where
the compiled :mod:`mqttwire.capture.loop_c` is not built); :func:`_frame` and
:func:`_finish` are the steps both loops share: the compiled one hands every frame it does
not handle itself to :func:`_frame`, and ends with :func:`_finish`.  (A split capture's
range has a loop of its own: :func:`mqttwire.capture.sections.sections_pure`.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .link import IPFragment, TcpSegment, parse_frame
from .mqtt_streams import MqttStreams
from .pcap import CaptureFormatError, iter_frames
from .record import Record, ip_text
from .sets import FileChain

__all__: list[str] = []


def _read_pure(f: BinaryIO, handler: MqttStreams) -> Iterator[Record]:
    """The reference loop: frames from iter_frames, each through :func:`_frame`."""
    out = handler.out
    ts = 0
    failure: CaptureFormatError | None = None
    try:
        for index, _offset, ts, linktype, data, _orig_len, _iface in iter_frames(
                f, handler.capture):
            _frame(handler, index, ts, linktype, data)
            if out:
                yield from out
                out.clear()
    except CaptureFormatError as exc:
        failure = exc
    _finish(handler, ts, failure)
    yield from out
    out.clear()


def _read_pure_chain(chain: FileChain, handler: MqttStreams) -> Iterator[Record]:
    """The reference loop over the files of a set (:mod:`.sets`): one handler, so one
    reassembler and one MQTT state, over the frames of every file in turn, numbered on
    from file to file; the streams end only after the last file.  A file that stops
    being a capture ends the set there, as it would end its own capture."""
    out = handler.out
    ts = 0
    done = 0  # frames of the files before the current one
    failure: CaptureFormatError | None = None
    try:
        while (opened := chain.open_next(done)) is not None:
            f, label = opened
            index = 0
            for index, _offset, ts, linktype, data, _orig_len, _iface in iter_frames(
                    f, label):
                _frame(handler, done + index, ts, linktype, data)
                if out:
                    yield from out
                    out.clear()
            done += index
    except CaptureFormatError as exc:
        failure = chain.failed(exc)
    finally:
        chain.close()
    _finish(handler, ts, failure)
    yield from out
    out.clear()


def _frame(handler: MqttStreams, index: int, ts: int, linktype: int, data: memoryview) -> None:
    """Process frame number ``index``: its TCP segment goes to the reassembler, an IP
    fragment becomes a record, anything else is not ours."""
    seg = parse_frame(linktype, data)
    if seg is None:
        return
    handler.frame = index
    if isinstance(seg, TcpSegment):
        handler.reassembler.add(ts, seg)
    elif handler.unconnected:
        handler.out.append(_fragment_record(handler.capture, index, ts, seg))


def _finish(handler: MqttStreams, ts: int, failure: CaptureFormatError | None) -> None:
    """The end of the capture (``ts``: its last frame's time): open streams end, and a
    file error becomes the last record."""
    handler.reassembler.flush(ts)
    if failure is not None and handler.unconnected:
        handler.out.append(Record("capture_error", handler.capture, ts, error=str(failure),
                                  error_offset=failure.offset))


def _fragment_record(name: str, index: int, ts: int, frag: IPFragment) -> Record:
    return Record(
        "fragment", name, ts, index, src_ip=ip_text(frag.src), src_port=frag.sport,
        dst_ip=ip_text(frag.dst), dst_port=frag.dport, length=frag.length,
        error=(f"IP fragment (protocol {frag.protocol}, id 0x{frag.ident:x}, offset "
               f"{frag.offset}{', more follow' if frag.more else ''}): not reassembled"),
    )
