"""The driver's progress lines while the tasks decode: the totals that the writing tasks
leave as small files in the run's staging directory (:class:`~.tasks.TaskTotals`),
summed and printed every few seconds."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .tasks import Counters

__all__ = ["Progress", "clock", "mib", "progress_dir", "progress_of"]


def progress_dir(root: str) -> str:
    """Where the writing tasks under staging directory ``root`` leave their totals."""
    return os.path.join(root, "_progress")


def progress_of(directory: str) -> Counters:
    """The totals the tasks wrote under ``directory`` so far (:class:`~.tasks.TaskTotals`)."""
    total = Counters()
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(directory, name)) as f:
                        total.add(Counters.parse(f.read()))
    return total


class Progress:
    """A driver thread that prints the run's totals every ``interval`` seconds while
    decoding runs, as ``current()`` gives them."""

    def __init__(self, current: Callable[[], Counters], total_files: int, total_bytes: int,
                 interval: float, stream: Any = None) -> None:
        self.current = current
        self.total_files = total_files
        self.total_bytes = total_bytes
        self.interval = interval
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqttwire-progress",
                                        daemon=True)

    def line(self) -> str:
        c = self.current()
        return (f"progress: {c.files}/{self.total_files} files, "
                f"{mib(c.bytes)}/{mib(self.total_bytes)}, "
                f"{c.packets:,} packets decoded, "
                f"{clock(time.monotonic() - self.started)} elapsed")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            print(self.line(), file=self.stream, flush=True)

    def start(self) -> None:
        if self.interval > 0:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def mib(n: int) -> str:
    """``n`` bytes in MiB, for people."""
    return f"{n / (1 << 20):,.1f} MiB"


def clock(seconds: float) -> str:
    """``seconds`` as H:MM:SS."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"
