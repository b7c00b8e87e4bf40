"""Typing for the compiled capture loop (mqttwire/capture/loop_c.pyx)."""

from collections.abc import Iterator
from types import ModuleType
from typing import BinaryIO

from .arrow_c import PacketColumns
from .mqtt_streams import MqttStreams
from .record import Record
from .sets import FileChain

CODEC: ModuleType
"""The codec module this loop decodes with (mqttwire._speedups)."""

class FastReader(Iterator[Record]):
    """Iterate over the records of a capture, as ``_read_pure(f, handler)`` does (or of
    the files of a set, as ``_read_pure_chain(chain, handler)`` does)."""

    def __init__(self, f: BinaryIO | None, handler: MqttStreams,
                 chain: FileChain | None = None) -> None: ...
    def __iter__(self) -> FastReader: ...
    def __next__(self) -> Record: ...
    def fill(self, sink: PacketColumns, rows: int) -> bool:
        """Read on into ``sink`` instead of yielding records, until it holds at least
        ``rows`` rows or the capture has ended (then False)."""
    @property
    def direct(self) -> int:
        """The packets that fill read without the codec's decoder (the common PUBLISH
        and PUBACK: capture/direct_c.pxd)."""

USED_SLOTS: list[tuple[str, str]]
"""(class name, slot) of every shared slot the loop uses (mqttwire/capture/shared_slots.py)."""

def slot_offset(cls: type, name: str) -> int:
    """The offset of a shared slot, checked as at import; ImportError if it is not one."""

def flow_key(linktype: int, data: bytes | memoryview) -> bytes | None:
    """The TCP connection key of a frame in the common case the loop parses (both
    directions alike), or None: then link.py must say what the frame is."""
