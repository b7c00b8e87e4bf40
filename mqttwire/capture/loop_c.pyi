"""Typing for the compiled capture loop (mqttwire/capture/loop_c.pyx)."""

from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any, BinaryIO

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

USED_SLOTS: list[tuple[str, str]]
"""(class name, slot) of every shared slot the loop uses (mqttwire/capture/shared_slots.py)."""

def slot_offset(cls: type, name: str) -> int:
    """The offset of a shared slot, checked as at import; ImportError if it is not one."""

def flow_key(linktype: int, data: bytes | memoryview) -> bytes | None:
    """The TCP connection key of a frame in the common case the loop parses (both
    directions alike), or None: then link.py must say what the frame is."""

class SectionPacker:
    """The compiled loop of mqttwire.capture.sections.range_sections (the pure twin:
    loop._sections_pure): a range's frames, fed as the file's bytes, gathered by
    connection."""

    count: int
    last_parsed: int
    next: int | None
    done: bool

    def __init__(self, ng: bool, big: bool, nanos: bool, linktype: int,
                 interfaces: Sequence[Any], end: int, size: int, piece_bytes: int,
                 other: Callable[[int, memoryview], bytes | None]) -> None: ...
    @property
    def last_ts(self) -> int | None: ...
    def feed(self, data: bytes, base: int) -> int: ...
    def sections(self, section: Callable[[list[int], bytearray], bytes]
                 ) -> list[tuple[bytes, int, bytes, bytes]]: ...

COLUMN_KINDS: bytes
"""The value kinds of a PacketColumns column, one byte each."""
TAKE_CAPSULE: bytes
"""The name of the capsule of the derived tables' function (derive_c.Deriver.capsule)."""
ROW_CAPSULE: bytes
"""The name of :func:`row_capsule`'s capsule."""

class PacketColumns:
    """The rows of a table of records, column by column, in Arrow's buffer layouts,
    filled by :meth:`FastReader.fill` without a Record per packet."""

    fallbacks: int
    side: int
    fast: int
    packets: int
    names: tuple[str, ...]

    def __init__(self, columns: Sequence[tuple[Any, ...]],
                 json: Callable[[Any], str | None] | None = None) -> None: ...
    def __len__(self) -> int: ...
    def derive_into(self, tables: Any, deriver: Any, capsule: Any) -> None: ...
    def add_record(self, rec: Record) -> None: ...
    def take_buffers(self) -> list[Any]: ...

def row_capsule() -> Any:
    """The C function that appends a row of values to a PacketColumns, in a capsule."""
