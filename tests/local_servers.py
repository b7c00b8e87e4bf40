"""Servers the tests start on 127.0.0.1 (Mosquitto, amqtt, the example broker), shared by
tests/interop and tests/spark: a free port, the program or a skip, stopping, and waiting
until a server says that it listens.

A server is ready when its own log says so, never when its port answers a connection:
between picking a free port and the server binding it, another test's server can take
the port, and a probe would then reach that one (a flaky failure of the 3.13 wheel run).
A server that could not bind exits or says so in its log, and its starter tries again on
another port.  (tests/ is on sys.path through tests/conftest.py: ``import local_servers``.)
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

HOST = "127.0.0.1"
#: Bound on a server's start and stop, in seconds.
START_TIMEOUT = 20.0
#: Mosquitto's line once every listener is bound.  Its "Opening ipv4 listen socket on
#: port N." comes before the bind (a taken port then gives "Error: Address already in
#: use" and the process exits), so it does not say the port is Mosquitto's.
MOSQUITTO_RUNNING = re.compile(r"mosquitto version \S+ running")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def require(program: str, package: str) -> str:
    """The path of ``program``, or skip the test saying what is missing (under CI a skip
    is a failure: the repository's conftest.py)."""
    path = shutil.which(program)
    if path is None:
        pytest.skip(f"{package} not installed: no {program} on PATH (apt-get install {package})")
    return path


def stop(proc: subprocess.Popen[Any], timeout: float = START_TIMEOUT) -> None:
    """Terminate ``proc`` (kill it if it does not end within ``timeout``) and reap it."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


def wait_for_log(proc: subprocess.Popen[Any], log: Path, ready: Sequence[str | re.Pattern[str]],
                 *, failed: str | None = None, since: int = 0,
                 timeout: float = START_TIMEOUT) -> bool:
    """Whether ``log`` (from byte ``since`` on) comes to hold every one of ``ready``
    (texts or patterns) while ``proc`` runs; False once ``proc`` has exited, ``failed``
    is in the log, or ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    while True:
        # Polled before the read: a process seen ended has written its last lines.
        exited = proc.poll() is not None
        with log.open("rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        if failed is not None and failed in text:
            return False
        if all((r.search(text) if isinstance(r, re.Pattern) else r in text) for r in ready):
            return not exited
        if exited or time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def start_mosquitto(folder: Path, settings: str, port: int | None = None
                    ) -> tuple[subprocess.Popen[bytes], int]:
    """Mosquitto configured by ``listener PORT 127.0.0.1`` and ``settings`` (more lines),
    in ``folder`` (mosquitto.conf; its output appended to mosquitto.log): on ``port``, or
    on a free port, tried three times (it can be taken before Mosquitto binds it).
    Returns the process, running, and its port; a failed start fails the test."""
    program = require("mosquitto", "mosquitto")
    conf, log = folder / "mosquitto.conf", folder / "mosquitto.log"
    for _ in range(1 if port is not None else 3):
        chosen = free_port() if port is None else port
        conf.write_text(f"listener {chosen} {HOST}\n{settings}")
        since = log.stat().st_size if log.exists() else 0
        with log.open("ab") as out:
            proc = subprocess.Popen([program, "-c", str(conf)], stdout=out, stderr=out)
        if wait_for_log(proc, log, [MOSQUITTO_RUNNING], since=since):
            return proc, chosen
        stop(proc)
    pytest.fail(f"mosquitto did not start:\n{log.read_text(errors='replace')[-3000:]}")


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def sample_maker() -> ModuleType:
    """examples/make_sample_capture.py as a module: its Mosquitto, tcpdump and scenario
    helpers (the live captures of tests/capture, the capture of test_live_backlog.py)."""
    name = "make_sample_capture"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules[name]
