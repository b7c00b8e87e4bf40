"""Deadlines without a clock: the caller says what time it is."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable

__all__ = ["Timers"]


class Timers:
    """Named deadlines: ``set(key, when)`` replaces the key's deadline, ``cancel(key)``
    drops it, ``due(now)`` pops the keys whose deadline is ``<= now``.

    A heap with lazy deletion: a replaced or cancelled deadline stays in the heap until it
    reaches the top, where it is recognised as stale (its time is no longer the key's).
    """

    __slots__ = ("_heap", "_when", "_order")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._when: dict[Hashable, float] = {}
        self._order = itertools.count()

    def set(self, key: Hashable, when: float) -> None:
        self._when[key] = when
        heapq.heappush(self._heap, (when, next(self._order), key))

    def cancel(self, key: Hashable) -> None:
        if self._when.pop(key, None) is not None and len(self._heap) > 2 * len(self._when) + 64:
            # Most of the heap is stale: rebuild it, so that cancelled deadlines (and the
            # connections their keys hold) do not stay until their time comes.
            self._heap = [entry for entry in self._heap if self._when.get(entry[2]) == entry[0]]
            heapq.heapify(self._heap)

    def get(self, key: Hashable) -> float | None:
        return self._when.get(key)

    def _prune(self) -> None:
        heap = self._heap
        while heap and self._when.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        """The earliest pending deadline, or None."""
        self._prune()
        return self._heap[0][0] if self._heap else None

    def due(self, now: float) -> list[Hashable]:
        """Remove and return the keys whose deadline has come, earliest first."""
        out: list[Hashable] = []
        while True:
            self._prune()
            if not self._heap or self._heap[0][0] > now:
                return out
            _, _, key = heapq.heappop(self._heap)
            del self._when[key]
            out.append(key)

    def __len__(self) -> int:
        return len(self._when)

    def __repr__(self) -> str:
        return f"Timers({len(self._when)} pending, next at {self.next_deadline()!r})"
