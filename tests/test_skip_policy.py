"""The skip policy of the repository's conftest.py: under CI a skip fails unless it is an
expected one; elsewhere a skip stays a skip.  Each case runs pytest in a new directory
holding a copy of that conftest.py and a small test file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

UNEXPECTED = """
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicator not installed: no frob on PATH")

def test_passes():
    pass
"""

MODULE_LEVEL = """
import pytest

pytest.importorskip("no_such_module_here", reason="no_such_module_here not installed")

def test_never_runs():
    pass
"""

EXPECTED = """
import pytest

def test_peer_op():
    pytest.skip("n/a: somepeer does not encode AUTH")
"""

XFAIL = """
import pytest

@pytest.mark.xfail(reason="known", strict=True)
def test_known_bug():
    assert False
"""


def _pytest(tmp_path: Path, files: dict[str, str], ci: str | None) -> tuple[int, str]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\npython_files = test_*.py bench_*.py\n")
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Only pytest and the copied conftest.py: no installed plugin (hypothesis, xdist,
    # benchmark) to load, which would make each run several times slower.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if ci is not None:
        env["CI"] = ci
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("ci", [None, "", "0", "false"])
def test_outside_ci_a_skip_is_a_skip(tmp_path: Path, ci: str | None) -> None:
    code, out = _pytest(tmp_path, {"test_tool.py": UNEXPECTED}, ci)
    assert code == 0, out
    assert "1 passed, 1 skipped" in out, out
    assert "frobnicator not installed" in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_under_ci_an_unexpected_skip_fails_with_its_reason(tmp_path: Path, ci: str) -> None:
    code, out = _pytest(tmp_path, {"test_tool.py": UNEXPECTED}, ci)
    assert code == 1, out
    assert "1 failed, 1 passed" in out, out
    assert "skipped under CI, and not an expected skip" in out
    assert "frobnicator not installed: no frob on PATH" in out


def test_under_ci_a_module_level_skip_fails(tmp_path: Path) -> None:
    code, out = _pytest(tmp_path, {"test_module.py": MODULE_LEVEL}, "true")
    assert code != 0, out
    assert "no_such_module_here not installed" in out, out
    assert "skipped under CI" in out, out


def test_under_ci_an_expected_skip_stays_a_skip(tmp_path: Path) -> None:
    code, out = _pytest(tmp_path, {"benchmarks/bench_peers.py": EXPECTED}, "true")
    assert code == 0, out
    assert "1 skipped" in out, out


def test_an_expected_reason_elsewhere_is_not_expected(tmp_path: Path) -> None:
    # The reason alone is not enough: the node id must match too.
    code, out = _pytest(tmp_path, {"test_other.py": EXPECTED}, "true")
    assert code == 1, out
    assert "n/a: somepeer does not encode AUTH" in out


def test_under_ci_an_xfail_is_not_a_skip(tmp_path: Path) -> None:
    code, out = _pytest(tmp_path, {"test_xfail.py": XFAIL}, "true")
    assert code == 0, out
    assert "1 xfailed" in out, out
