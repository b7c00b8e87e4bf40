"""Typing for the compiled loop of a split capture's ranges (mqttwire/capture/sections_c.pyx)."""

from collections.abc import Callable, Sequence
from typing import Any

class SectionPacker:
    """The compiled loop of mqttwire.capture.sections.range_sections (the pure twin:
    sections.sections_pure): a range's frames, fed as the file's bytes, gathered by
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
