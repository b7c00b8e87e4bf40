"""Type stub of the compiled module mqttwire/spark/derive_c.pyx."""

from typing import Any

__all__ = ["CONN_SLOTS", "RECORD_SLOTS", "Deriver"]

RECORD_SLOTS: tuple[str, ...]
CONN_SLOTS: tuple[str, ...]

class Deriver:
    def __init__(self, record_cls: type, conn_cls: type) -> None: ...
    def add_many(self, tables: Any, records: list[Any]) -> None: ...
