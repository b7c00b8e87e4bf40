"""The repository's conftest.py keeps each test module on one pytest-xdist worker
(scripts/test.sh runs the suite with ``-n auto --dist loadgroup``), so that a module
fixture (a Spark session, a live query, a wheel build) is made once, and fails the run
when xdist did not group the tests.  Each case runs pytest with two workers in a new
directory holding a copy of that conftest.py and two small test modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

# A module fixture that records, per setup, the module and the worker's process id; six
# tests that record theirs.
MODULE = """
import os
import pytest

LOG = os.environ["GROUPS_LOG"]

def _say(what):
    with open(LOG, "a") as f:
        f.write(f"{what} {__name__} {os.getpid()}\\n")

@pytest.fixture(scope="module")
def made_once():
    _say("fixture")
    return __name__

@pytest.mark.parametrize("i", range(6))
def test_one(made_once, i):
    _say("test")
"""

# Undoes what xdist does to mark the groups (a suffix to the node id, which pytest 9.2's
# structured node ids ignore): the run must then fail rather than deal the tests out.
LOSE_GROUPS = """
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item._nodeid = item.nodeid.split("@")[0]
"""


def _run(tmp_path: Path, plugin: str | None = None) -> tuple[int, str, list[str]]:
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    for name in ("test_a.py", "test_b.py"):
        (tmp_path / name).write_text(MODULE)
    args = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "xdist.plugin",
            "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["GROUPS_LOG"] = str(tmp_path / "log.txt")
    # Only pytest, xdist and the copied conftest.py (hypothesis and benchmark would make
    # each run slower).
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if plugin is not None:
        (tmp_path / "lose_groups.py").write_text(plugin)
        env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env.get('PYTHONPATH', '')}"
        args[3:3] = ["-p", "lose_groups"]
    proc = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    log = tmp_path / "log.txt"
    return proc.returncode, proc.stdout + proc.stderr, (
        log.read_text().splitlines() if log.exists() else [])


def test_each_module_runs_on_one_worker_and_makes_its_fixture_once(tmp_path: Path) -> None:
    code, out, log = _run(tmp_path)
    assert code == 0, out
    assert "12 passed" in out, out
    workers: dict[str, set[str]] = defaultdict(set)
    fixtures: dict[str, int] = defaultdict(int)
    for line in log:
        what, module, pid = line.split()
        workers[module].add(pid)
        fixtures[module] += what == "fixture"
    assert fixtures == {"test_a": 1, "test_b": 1}, log
    assert all(len(pids) == 1 for pids in workers.values()), log


def test_a_run_whose_tests_xdist_did_not_group_fails(tmp_path: Path) -> None:
    code, out, log = _run(tmp_path, LOSE_GROUPS)
    assert code != 0, out
    assert "did not group 12 of 12 tests" in out, out
    assert "pytest-xdist#1386" in out, out
    assert not [line for line in log if line.startswith("test")], log
