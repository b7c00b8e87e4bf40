"""The selector: the extension unless MQTTWIRE_PURE_PYTHON asks for the fallback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import mqttwire


def test_extension_loaded_unless_pure_requested(request: pytest.FixtureRequest) -> None:
    # A silent fallback to pure Python would pass every other test while being 10x slower.
    # Pure: asked for by the variable, or a pure-Python install (run with
    # --no-c-extensions, as scripts/test.sh's second pass is).
    pure = os.environ.get("MQTTWIRE_PURE_PYTHON") or request.config.getoption(
        "--no-c-extensions")
    expected = "python" if pure else "cython"
    assert mqttwire.IMPLEMENTATION == expected


def _implementation_with(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MQTTWIRE_PURE_PYTHON"}
    if env_value is not None:
        env["MQTTWIRE_PURE_PYTHON"] = env_value
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import mqttwire; print(mqttwire.IMPLEMENTATION, mqttwire.Publish.__module__)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


@pytest.mark.c_extension
def test_environment_variable_selects_the_fallback() -> None:
    assert _implementation_with("1") == "python mqttwire._pure"
    assert _implementation_with(None) == "cython mqttwire._speedups"
    # "non-empty" is the rule: an empty value does not force the fallback.
    assert _implementation_with("") == "cython mqttwire._speedups"
