"""Typing for the compiled column buffers (mqttwire/spark/columns_c.pyx)."""

from typing import Any

KINDS: dict[str, bytes]
"""The type codes of :func:`buffers`, by Arrow type name."""

def buffers(
    objs: list[Any], sources: list[Any], kinds: bytes, mapping: bool
) -> list[tuple[int, bytes | None, bytes, bytes | None] | None]:
    """The Arrow buffers of each column of ``objs``, or None for a column to build the
    reference way."""
