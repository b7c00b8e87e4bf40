"""Shared fixtures: every behavioural test runs against both implementations.

The ``codec`` fixture hands each test the module ``mqttwire._speedups`` (id "cython") and
``mqttwire._pure`` (id "python") in the same run.  A missing extension is a test failure,
not a skip: pass ``--no-c-extensions`` to leave the Cython items out on purpose.
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import pytest

# tests/codec/test_includes.py reads the extension's Cython sources, test_layout.py the package's
# sources and CONTRIBUTING.md, test_tools.py lints them: only a checkout has them.  A
# wheel's release test ([tool.cibuildwheel] test-command) runs a copy of tests/ outside the
# source tree, where there is no mqttwire/ folder.  (A checkout always collects them.)
if not (Path(__file__).resolve().parent.parent / "mqttwire").is_dir():
    collect_ignore = ["codec/test_includes.py", "test_layout.py", "test_tools.py"]


#: The Spark settings of the JVMs that the tests start (the drivers of the tests' own
#: sessions, of the command line's and the live jobs' processes, Spark Connect's server):
#: the just-in-time compiler stopped at its first tier, as in the pipeline's own local
#: runs (mqttwire.spark.run.QUICK_JIT).  They live seconds, too short for the optimising
#: compiler to pay back its CPU, and on two cores that CPU is the suite's time:
#: tests/spark/test_small_files.py and test_folders.py together took 153 and 156 s of
#: the machine's CPU without, 105 and 109 s with (96 and 79 s of wall; 2026-11-30).  What
#: a Java program does is the same at every tier of the compiler.  Spark prepends these
#: options to the JVM options a session sets itself (spark.driver.extraJavaOptions).
SPARK_TEST_DEFAULTS = ("spark.driver.defaultJavaOptions -XX:TieredStopAtLevel=1\n"
                       "spark.executor.defaultJavaOptions -XX:TieredStopAtLevel=1\n")


def pytest_configure(config: pytest.Config) -> None:
    """A Spark configuration folder of the run's own (SPARK_CONF_DIR), holding
    SPARK_TEST_DEFAULTS, unless SPARK_CONF_DIR is set: by the caller, or for a
    pytest-xdist worker by the run that started it."""
    if os.environ.get("SPARK_CONF_DIR"):
        return
    folder = tempfile.mkdtemp(prefix="mqttwire-tests-spark-conf-")
    Path(folder, "spark-defaults.conf").write_text(SPARK_TEST_DEFAULTS)
    os.environ["SPARK_CONF_DIR"] = folder

    def remove() -> None:
        os.environ.pop("SPARK_CONF_DIR", None)
        shutil.rmtree(folder, ignore_errors=True)

    config.add_cleanup(remove)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-c-extensions",
        action="store_true",
        help="deselect the tests of mqttwire._speedups (for a pure-Python install)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("--no-c-extensions"):
        return
    kept, dropped = [], []
    for item in items:
        # Tests that compare the two implementations need the extension too.
        needs_c = item.get_closest_marker("c_extension") or "both_codecs" in getattr(
            item, "fixturenames", ()
        )
        (dropped if needs_c else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _load(name: str) -> ModuleType:
    # An ImportError here fails every test that uses the extension: that is the point.
    return importlib.import_module(name)


IMPLEMENTATIONS = [
    pytest.param("mqttwire._speedups", id="cython", marks=pytest.mark.c_extension),
    pytest.param("mqttwire._pure", id="python", marks=pytest.mark.pure_twin),
]


@pytest.fixture(scope="session", params=IMPLEMENTATIONS)
def codec(request: pytest.FixtureRequest) -> ModuleType:
    """The codec module under test: mqttwire._speedups or mqttwire._pure."""
    return _load(request.param)


@pytest.fixture(scope="session")
def both_codecs() -> tuple[ModuleType, ModuleType]:
    """(cython, python), for tests that compare the two implementations directly."""
    return _load("mqttwire._speedups"), _load("mqttwire._pure")


@pytest.fixture(params=[
    pytest.param(True, id="compiled", marks=pytest.mark.c_extension),
    pytest.param(False, id="reference", marks=pytest.mark.pure_twin)])
def derive_way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether mqttwire.spark.derive's CaptureTables.add_many takes its compiled path
    (mqttwire.spark.derive_c, which must then be built: an ImportError fails the test)
    or CaptureTables.add alone (the reference)."""
    import mqttwire.spark.derive as derive_module

    if request.param:
        importlib.import_module("mqttwire.spark.derive_c")
    monkeypatch.setattr(derive_module, "COMPILED", bool(request.param))
    return bool(request.param)
