"""The repository's own tools, as CONTRIBUTING.md runs them: ruff (pyproject.toml's
rules, with RUF100 for noqa comments that suppress nothing) over everything, and mypy
with the project's strict configuration over the whole package (mqttwire.spark and the
command line included: the Spark extra's pyspark and pyarrow give their types).  Not
implementation-dependent: run once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.once


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.spark
def test_mypy_strict_over_the_package(tmp_path: Path) -> None:
    # The files and the strictness are pyproject.toml's [tool.mypy].
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
