"""Read MQTT out of packet captures: pcap/pcapng in, one record per MQTT packet out.

The layers, each usable alone:

- :func:`iter_frames` (pcap.py): the frames of a classic pcap or pcapng file;
- :func:`parse_frame` (link.py): the TCP segment (or IP fragment) in a frame;
- :class:`TcpReassembler` (tcp.py): TCP connections into ordered byte streams;
- :class:`MqttStreams` (mqtt_streams.py): those streams decoded into :class:`Record` objects
  (record.py), each direction by direction.py (with websocket.py for MQTT inside WebSocket
  frames);
- :func:`read_capture`: all of the above for one file, or for several (those that are
  pieces of one capture, a *set*, read as one: :mod:`.sets`).

:func:`read_capture` runs its per-frame loop in the compiled module
:mod:`mqttwire.capture.loop_c` when it reads with the Cython codec; the pure-Python layers
above are the reference and the fallback (with the pure codec, or where the module is not
built), and they handle everything the compiled loop hands over to them.
:mod:`mqttwire.capture.writers` writes synthetic captures for tests and benchmarks.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from types import ModuleType
from typing import BinaryIO, Union, cast

from .._implementation import IMPLEMENTATION
from .boundaries import looks_like_connect
from .link import IPFragment, TcpSegment, parse_frame
from .loop import _read_pure, _read_pure_chain
from .mqtt_streams import MqttStreams
from .pcap import CaptureFormatError, Frame, iter_frames
from .record import Record
from .sets import CaptureSet, FileChain, plan_sets
from .tcp import TcpConnection, TcpReassembler, TcpStream

try:
    if IMPLEMENTATION != "cython":  # mqttwire._implementation decides, for the codec and this loop
        raise ImportError("the pure-Python codec was chosen")
    from . import loop_c
except ImportError:  # a pure-Python install or run
    loop_c = None  # type: ignore[assignment]

__all__ = [
    "CaptureFormatError",
    "CaptureSet",
    "CaptureSetWarning",
    "Frame",
    "IPFragment",
    "MqttStreams",
    "Record",
    "TcpConnection",
    "TcpReassembler",
    "TcpSegment",
    "TcpStream",
    "iter_frames",
    "looks_like_connect",
    "parse_frame",
    "read_capture",
    "read_chain",
    "read_with",
]

PathOrFile = Union[str, "os.PathLike[str]", BinaryIO]
#: What read_capture reads: one file, a planned set, or several paths (grouped).
# Union, not |: a string forward reference is no operand of | at run time.
Source = Union[PathOrFile, CaptureSet, Sequence[Union[str, "os.PathLike[str]"]]]  # noqa: UP007


class CaptureSetWarning(UserWarning):
    """How :func:`read_capture` grouped several files is worth knowing: files that
    overlap in time (read as separate captures), a file that ends its set early, a
    file of a set missing (see :mod:`mqttwire.capture.sets`)."""


def read_capture(
    source: Source,
    *,
    ports: Iterable[int] = (1883,),
    payload_limit: int | None = None,
    codec: ModuleType | None = None,
    version: int | None = None,
    name: str | None = None,
    max_pending: int = 1 << 20,
    stream_ends: bool = False,
    group: str = "auto",
) -> Iterator[Record]:
    """Yield the MQTT records of a pcap or pcapng capture, in capture order.

    Args:
        source: a path, or a binary file object open for reading; or a
            :class:`CaptureSet` (files read as one capture, in order); or a list or tuple
            of paths, grouped as ``group`` says into captures, which are read one after
            the other, each with its own name and connections.
        ports: the MQTT server ports (a connection on another port is MQTT too when its
            client's first bytes are a CONNECT, or a WebSocket Upgrade that offers the
            subprotocol mqtt: see mqttwire/capture/websocket.py).
        payload_limit: keep each PUBLISH payload cut to this many bytes in
            ``Record.payload``; None (the default) keeps no payloads.
        codec: the codec module; the default is the one ``import mqttwire`` chose.
        version: the protocol level (3, 4, 5) to assume for connections whose CONNECT is
            not in the capture; None infers it from their traffic (see
            ``Record.version_source``).
        name: the capture's name in records and connection ids; default the file's base
            name (a set's: its first file's; not with a list of paths).
        max_pending: the most out-of-order bytes held per TCP stream.
        stream_ends: also yield, when a direction of an MQTT connection ends, a record of
            kind "end" saying how (``Record.end_reason``: "fin", "rst" or "eof"), in its
            place among the records, after that direction's last record.  It covers no
            stream bytes (``length`` 0 at the direction's end offset).  Off by default.
        group: for a list of paths, which of them are one capture: "auto" (the files
            of a ring buffer or a split, recognised by their names and confirmed by their
            times: :mod:`.sets`), "never" (each file alone) or "one" (all of them one
            capture).  What is worth knowing about the grouping (files that overlap in
            time, read as separate captures, say) comes as a :class:`CaptureSetWarning`.
            To know each record's file, plan the sets yourself
            (:func:`mqttwire.capture.sets.plan_sets`) and read each :class:`CaptureSet`:
            its ``file_of(record)`` says.

    Records of a set are those of the file that ``mergecap -a`` makes of its files:
    frame numbers count on from file to file, and a connection that crosses files is one.
    A file of a set that stops being a capture ends the set's capture there (its
    capture_error record names the file and the later files not read).

    A corrupt or truncated file does not raise: the records decoded so far are yielded,
    open streams are ended, and a last record of kind "capture_error" says what is wrong
    and at which file offset.  Opening the file can raise OSError.
    """
    if codec is None:
        from .._implementation import impl

        codec = impl
    if isinstance(source, (list, tuple)):
        if name is not None:
            raise ValueError("name names one capture: not with a list of paths (give a "
                             "CaptureSet)")
        sets, notes = plan_sets([os.fspath(p) for p in source], group)
        for note in notes:
            warnings.warn(note, CaptureSetWarning, stacklevel=2)
        for capture_set in sets:
            yield from _read_set(capture_set, None, ports, payload_limit, codec, version,
                                 max_pending, stream_ends)
        return
    if isinstance(source, CaptureSet):
        yield from _read_set(source, name, ports, payload_limit, codec, version,
                             max_pending, stream_ends)
        return
    source = cast(Union[str, "os.PathLike[str]", BinaryIO], source)  # one file
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            yield from _read(f, name or os.path.basename(os.fspath(source)), ports,
                             payload_limit, codec, version, max_pending, stream_ends)
    else:
        label = name or os.path.basename(str(getattr(source, "name", "<stream>")))
        yield from _read(source, label, ports, payload_limit, codec, version, max_pending,
                         stream_ends)


def _read_set(capture_set: CaptureSet, name: str | None, ports: Iterable[int],
              payload_limit: int | None, codec: ModuleType, version: int | None,
              max_pending: int, stream_ends: bool) -> Iterator[Record]:
    """The records of a set; one file read as a file is (the same loop and checks)."""
    label = name or capture_set.name
    if len(capture_set.paths) == 1:
        capture_set.open_chain()  # for file_of
        with open(capture_set.paths[0], "rb") as f:
            yield from _read(f, label, ports, payload_limit, codec, version, max_pending,
                             stream_ends)
        return
    yield from _read_chain(capture_set.open_chain(), label, ports, payload_limit, codec,
                           version, max_pending, stream_ends)


def _read_chain(chain: FileChain, name: str, ports: Iterable[int],
                payload_limit: int | None, codec: ModuleType, version: int | None,
                max_pending: int, stream_ends: bool) -> Iterator[Record]:
    """The records of the files of ``chain``, as one capture (see :func:`read_chain`)."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends)
    return read_chain(chain, handler)


def _read(f: BinaryIO, name: str, ports: Iterable[int], payload_limit: int | None,
          codec: ModuleType, version: int | None, max_pending: int,
          stream_ends: bool) -> Iterator[Record]:
    """The records of the capture in ``f`` (see :func:`read_with`)."""
    handler = MqttStreams(name, ports=ports, codec=codec, payload_limit=payload_limit,
                          version=version, max_pending=max_pending, stream_ends=stream_ends)
    return read_with(f, handler)


def read_with(f: BinaryIO, handler: MqttStreams) -> Iterator[Record]:
    """The records of the capture in ``f``, decoded by ``handler`` (made by the caller,
    for the options :func:`read_capture` does not offer): through the compiled loop of
    :mod:`mqttwire.capture.loop_c` when the handler's codec is the Cython codec and that
    module is built, else through the pure-Python loop.  Both yield the same records."""
    if loop_c is not None and handler.codec is loop_c.CODEC:
        return loop_c.FastReader(f, handler)
    return _read_pure(f, handler)


def read_chain(chain: FileChain, handler: MqttStreams) -> Iterator[Record]:
    """:func:`read_with` over the files of a set (:class:`~.sets.FileChain`), read as
    one capture: the compiled loop or the pure one, as there; each file is opened as
    the one before it ends, and closed when the next is opened or the reading ends."""
    if loop_c is not None and handler.codec is loop_c.CODEC:
        return loop_c.FastReader(None, handler, chain)
    return _read_pure_chain(chain, handler)
