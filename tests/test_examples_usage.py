"""The example programs' command lines at their edges, run as a user runs them: a port
out of range is a usage error (exit status 2, argparse's usage and message on stderr)
like a port that is not a number, and a port that cannot be listened on ends the broker
with one line and exit status 1; never a Python traceback."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
BROKER = REPO / "examples" / "broker.py"
CLIENT = REPO / "examples" / "client.py"
TIMEOUT = 30.0


def run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True,
                          text=True, env=env, timeout=TIMEOUT, check=False)


@pytest.mark.parametrize(("port", "message"), [
    ("99999", "argument --port: 99999 is not a TCP port (0 to 65535)"),
    ("65536", "argument --port: 65536 is not a TCP port (0 to 65535)"),
    ("-1", "argument --port: -1 is not a TCP port (0 to 65535)"),
    ("abc", "argument --port: invalid int value: 'abc'"),
])
def test_broker_port_out_of_range_is_a_usage_error(port: str, message: str) -> None:
    done = run(BROKER, "--port", port)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("usage: broker.py")
    assert done.stderr.rstrip().endswith(f"broker.py: error: {message}")
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_broker_port_taken_is_one_line_and_status_1() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = run(BROKER, "--host", "127.0.0.1", "--port", str(port))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"broker.py: cannot listen on 127.0.0.1:{port}: ")
    assert "address already in use" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize(("port", "message"), [
    ("99999", "argument --port: 99999 is not a TCP port (1 to 65535)"),
    ("0", "argument --port: 0 is not a TCP port (1 to 65535)"),
    ("abc", "argument --port: invalid int value: 'abc'"),
])
def test_client_port_out_of_range_is_a_usage_error(port: str, message: str) -> None:
    done = run(CLIENT, "--port", port, "pub", "t", "m")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("usage: client.py")
    assert done.stderr.rstrip().endswith(f"client.py: error: {message}")
    assert "Traceback" not in done.stderr


def broker_config(*args: str) -> Any:
    """The BrokerConfig examples/broker.py's main() builds from ``args`` (serve() replaced
    by one that keeps it: nothing listens)."""
    spec = importlib.util.spec_from_file_location("mqttwire_example_broker", BROKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kept: list[Any] = []

    async def serve(host: str, port: int, config: Any, context: Any) -> None:
        kept.append(config)

    module.serve = serve
    module.main(list(args))
    [config] = kept
    return config


def test_broker_bounds_options_reach_its_config() -> None:
    from mqttwire.session import BrokerConfig

    defaults, config = BrokerConfig(), broker_config()
    for name in ("max_unwritten_bytes", "max_unwritten_messages", "max_queued_messages",
                 "max_queued_bytes", "write_stall_timeout", "max_session_expiry"):
        assert getattr(config, name) == getattr(defaults, name), name
    config = broker_config("--max-unwritten-bytes", "5000", "--max-unwritten-messages", "7",
                           "--max-queued-messages", "9", "--max-queued-bytes", "4096",
                           "--write-stall-timeout", "2.5", "--max-session-expiry", "60")
    assert (config.max_unwritten_bytes, config.max_unwritten_messages,
            config.max_queued_messages, config.max_queued_bytes, config.write_stall_timeout,
            config.max_session_expiry) == (5000, 7, 9, 4096, 2.5, 60)
    # 0 turns a queue bound and the stall timeout off.
    config = broker_config("--max-queued-messages", "0", "--max-queued-bytes", "0",
                           "--write-stall-timeout", "0")
    assert (config.max_queued_messages, config.max_queued_bytes,
            config.write_stall_timeout) == (None, None, None)
