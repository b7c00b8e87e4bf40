"""The type information mqttwire ships (py.typed, the annotated fallback, the extension
stubs) passes mypy --strict, so users' type checkers see a true picture."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TYPED = [
    "mqttwire/__init__.py", "mqttwire/_impl.py", "mqttwire/_pure.py", "mqttwire/_wire.py",
    "mqttwire/_properties.py", "mqttwire/_cold.py", "mqttwire/_constants.py",
    "mqttwire/_errors.py", "mqttwire/_topics.py", "mqttwire/_speedups.pyi",
    "mqttwire/_ctopics.pyi", "mqttwire/capture",
]


def test_mypy_strict(tmp_path: pathlib.Path) -> None:
    if not (ROOT / "mqttwire" / "_pure.py").exists():
        pytest.skip("needs the source tree: the wheel test copies tests/ only")
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path), *TYPED]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
