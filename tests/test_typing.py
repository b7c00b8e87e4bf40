"""The type information mqttwire ships (py.typed, the annotated fallback, the extension
stubs) passes mypy --strict, so users' type checkers see a true picture.

It checks the package that ``import mqttwire`` finds: the source tree in a checkout, the
installed files in the wheel tests and the pure-Python pass (wheels ship the .py and .pyi
files mypy reads).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import mqttwire

PACKAGE = pathlib.Path(mqttwire.__file__).resolve().parent
TYPED = [
    "mqttwire/__init__.py", "mqttwire/_impl.py", "mqttwire/_pure.py", "mqttwire/_wire.py",
    "mqttwire/_properties.py", "mqttwire/_cold.py", "mqttwire/_constants.py",
    "mqttwire/_errors.py", "mqttwire/_topics.py", "mqttwire/_speedups.pyi",
    "mqttwire/_ctopics.pyi", "mqttwire/capture",
]


def test_mypy_strict(tmp_path: pathlib.Path) -> None:
    for name in TYPED:  # a file left out of the wheel would otherwise go unchecked
        assert (PACKAGE.parent / name).exists(), f"{name} is not in {PACKAGE.parent}"
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path),
           "--no-site-packages", *TYPED]
    result = subprocess.run(cmd, cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
