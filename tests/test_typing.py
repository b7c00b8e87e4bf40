"""The type information mqttwire ships (py.typed, the annotated fallback, the extension
stubs) passes mypy --strict, so users' type checkers see a true picture.

It checks the package that ``import mqttwire`` finds: the source tree in a checkout, the
installed files in the wheel tests and the pure-Python pass (wheels ship the .py and .pyi
files mypy reads).  The files are copied to a directory of their own first: run in
site-packages, mypy would take its neighbours (typing_extensions.py, ...) for user modules
that shadow the libraries.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import mqttwire

PACKAGE = pathlib.Path(mqttwire.__file__).resolve().parent
TYPED = [
    "mqttwire/__init__.py", "mqttwire/_implementation.py", "mqttwire/_pure.py",
    "mqttwire/_constants.py", "mqttwire/_errors.py", "mqttwire/_topics.py",
    "mqttwire/_speedups.pyi", "mqttwire/_topics_c.pyi", "mqttwire/_topic_rules.py",
    "mqttwire/_codec", "mqttwire/capture", "mqttwire/session",
]


def test_mypy_strict(tmp_path: pathlib.Path) -> None:
    for name in TYPED:  # a file left out of the wheel would otherwise go unchecked
        assert (PACKAGE.parent / name).exists(), f"{name} is not in {PACKAGE.parent}"
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "mqttwire",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.c"))
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
           "--no-site-packages", *TYPED]
    result = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_examples_mypy_strict(tmp_path: pathlib.Path) -> None:
    """examples/broker.py and examples/client.py, thin glue over mqttwire.session, are
    typed against the package too."""
    examples = pathlib.Path(__file__).resolve().parents[1] / "examples"
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "mqttwire",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.c"))
    for name in ("broker.py", "client.py"):
        shutil.copy(examples / name, src / name)
    cmd = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
           "--no-site-packages", "broker.py", "client.py"]
    result = subprocess.run(cmd, cwd=src, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
