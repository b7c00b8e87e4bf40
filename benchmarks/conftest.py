"""Benchmark fixtures: every benchmark runs for the extension and the fallback in one run,
so their ratio is measured under the same machine load.

On a pure-Python install (no mqttwire._speedups built) the extension's benchmarks skip,
with that reason, and the fallback's run: the suites work wherever mqttwire installs.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

# The benchmarks start their brokers with the tests' helpers (tests/local_servers.py:
# ready when the broker's log says it listens, not when its port answers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _speedups() -> ModuleType:
    try:
        return importlib.import_module("mqttwire._speedups")
    except ImportError as exc:
        pytest.skip(f"mqttwire._speedups is not built (a pure-Python install): {exc}")


@pytest.fixture(
    scope="session",
    params=[
        pytest.param("mqttwire._speedups", id="cython"),
        pytest.param("mqttwire._pure", id="python"),
    ],
)
def codec(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "mqttwire._speedups":
        return _speedups()
    return importlib.import_module(request.param)


@pytest.fixture(scope="session")
def speedups() -> ModuleType:
    """The extension module, for benchmarks that only make sense with it."""
    return _speedups()
