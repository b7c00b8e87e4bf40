"""mosquitto_sub processes for the interoperability tests, each with its output lines
collected by a thread: the ``mosquitto_sub`` fixture of conftest.py, and the module-scoped
subscribers of test_broker_acl.py (a fixture per test cannot serve those)."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from local_servers import require, stop

#: Bound on each wait, in seconds.
TIMEOUT = 10.0


@dataclass
class Subscriber:
    """A mosquitto_sub process, its output lines collected by a thread."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str]
    reader: threading.Thread

    def wait_subscribed(self) -> None:
        """Wait for the debug line saying the SUBACK came (mosquitto_sub -d)."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError("mosquitto_sub got no SUBACK in time") from None
            if "received SUBACK" in line:
                return

    def messages(self, separator: str = "|") -> list[list[str]]:
        """The formatted message lines (containing ``separator``), once it has exited."""
        try:
            self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            stop(self.proc)
            raise
        self.reader.join(TIMEOUT)  # until it has queued the last line
        out: list[list[str]] = []
        while not self.lines.empty():
            line = self.lines.get()
            if separator in line and not line.startswith("Client "):
                out.append(line.rstrip("\n").split(separator))
        return out


@contextlib.contextmanager
def mosquitto_subscribers() -> Iterator[Callable[..., Subscriber]]:
    """``start(*args)``: mosquitto_sub started with -d (for the SUBACK line) and ``args``;
    every one started is stopped at the end."""
    program = require("mosquitto_sub", "mosquitto-clients")
    # Its debug lines go through stdio, which buffers a pipe: stdbuf makes it flush
    # each line.
    stdbuf = require("stdbuf", "coreutils")
    started: list[Subscriber] = []

    def start(*args: str) -> Subscriber:
        proc = subprocess.Popen([stdbuf, "-oL", program, "-d", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        sub = Subscriber(proc, lines, reader)
        started.append(sub)
        return sub

    try:
        yield start
    finally:
        for sub in started:
            stop(sub.proc)
