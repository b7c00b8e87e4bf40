"""Packet Identifiers (MQTT 3.1.1 §2.3.1, MQTT 5.0 §2.2.1)."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import SessionError

__all__ = ["PacketIds"]


class PacketIds:
    """Allocates non-zero Packet Identifiers that no unacknowledged exchange of the same
    sender is using (3.1.1 [MQTT-2.3.1-2], 5.0 [MQTT-2.2.1-3]; QoS 1 [MQTT-4.3.2-1],
    QoS 2 [MQTT-4.3.3-1]).  An identifier is free again once ``release``d."""

    __slots__ = ("_used", "_last")

    def __init__(self) -> None:
        self._used: set[int] = set()
        self._last = 0

    def allocate(self) -> int:
        if len(self._used) >= 65535:
            raise SessionError("all 65,535 packet identifiers are in use")
        pid = self._last
        while True:
            pid = pid % 65535 + 1
            if pid not in self._used:
                self._used.add(pid)
                self._last = pid
                return pid

    def claim(self, pid: int) -> None:
        """Mark ``pid`` used (a session restored with its in-flight identifiers)."""
        self._used.add(pid)

    def release(self, pid: int) -> None:
        self._used.discard(pid)

    def keep_only(self, pids: Iterable[int]) -> None:
        """Release every identifier but ``pids``."""
        self._used.intersection_update(pids)

    def __contains__(self, pid: object) -> bool:
        return pid in self._used

    def __len__(self) -> int:
        return len(self._used)

    def clear(self) -> None:
        self._used.clear()

    def __repr__(self) -> str:
        return f"PacketIds({len(self._used)} in use, last {self._last})"
