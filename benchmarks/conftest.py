"""Benchmark fixtures: every benchmark runs for the extension and the fallback in one run,
so their ratio is measured under the same machine load."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


@pytest.fixture(
    scope="session",
    params=[
        pytest.param("mqttwire._speedups", id="cython"),
        pytest.param("mqttwire._pure", id="python"),
    ],
)
def codec(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)
