"""Shared fixtures: every behavioural test runs against both implementations.

The ``codec`` fixture hands each test the module ``mqttwire._speedups`` (id "cython") and
``mqttwire._pure`` (id "python") in the same run.  A missing extension is a test failure,
not a skip: pass ``--no-c-extensions`` to leave the Cython items out on purpose.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

# tests/codec/test_includes.py reads the extension's Cython sources, test_layout.py the package's
# sources and CONTRIBUTING.md, test_tools.py lints them: only a checkout has them.  A
# wheel's release test ([tool.cibuildwheel] test-command) runs a copy of tests/ outside the
# source tree, where there is no mqttwire/ folder.  (A checkout always collects them.)
if not (Path(__file__).resolve().parent.parent / "mqttwire").is_dir():
    collect_ignore = ["codec/test_includes.py", "test_layout.py", "test_tools.py"]


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
