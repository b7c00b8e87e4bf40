"""Typing for the packets table's compiled columns (mqttwire/capture/arrow_c.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

from .record import Record

COLUMN_KINDS: bytes
"""The value kinds of a PacketColumns column, one byte each."""
MESSAGE_KINDS: bytes
"""The kinds of the messages table's columns, which a PacketColumns of that layout writes
each by its own code."""
DIRECT_LAYOUT: tuple[tuple[str, bytes, int], ...]
"""The packets table's own columns (no context columns), which the compiled loop's packets
read without the decoder are written into from C values."""
TAKE_CAPSULE: bytes
"""The name of the capsule of the derived tables' function (derive_c.Deriver.capsule)."""
ROW_CAPSULE: bytes
"""The name of :func:`row_capsule`'s capsule."""

class PacketColumns:
    """The rows of a table of records, column by column, in Arrow's buffer layouts,
    filled by :meth:`mqttwire.capture.loop_c.FastReader.fill` without a Record per packet."""

    fallbacks: int
    side: int
    fast: int
    packets: int
    contexts: int
    direct_layout: bool
    message_layout: bool
    names: tuple[str, ...]

    def __init__(self, columns: Sequence[tuple[Any, ...]],
                 json: Callable[[Any], str | None] | None = None,
                 contexts: bool = True) -> None: ...
    def __len__(self) -> int: ...
    def derive_into(self, tables: Any, deriver: Any, capsule: Any) -> None: ...
    def add_record(self, rec: Record) -> None: ...
    def append(self, values: Sequence[Any]) -> None: ...
    def take_buffers(self) -> list[Any]: ...

def row_capsule() -> Any:
    """The C function that appends a row of values to a PacketColumns, in a capsule."""
