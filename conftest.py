"""The skip policy of every pytest run of this repository (tests/ and benchmarks/).

Outside CI a skip stays a skip, with its reason.  Under CI (the environment variable CI set
to anything but "", "0" or "false", as GitHub Actions and this project's .ci/run set it) a
skipped test is reported as a failure, reason included, unless the skip is on the list
below: a missing tool, a missing Java or a missing permission must fail loudly there, never
pass quietly.  Each entry is a skip that is right in some CI environment, with why.
The list is documented in the README ("Tests").

It also keeps each test module on one pytest-xdist worker (scripts/test.sh runs the suite
with ``-n auto --dist loadgroup``): see :func:`pytest_collection_modifyitems`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

#: (node id pattern, reason pattern, why the skip is right): both patterns are regular
#: expressions that must match (re.search) for a skip to be accepted under CI.
EXPECTED_SKIPS: list[tuple[str, str, str]] = [
    (
        r"tests/test_wheel\.py::test_wheel_built_and_tested_on_other_cpython",
        r"^Python 3\.\d+ runs this suite",
        "the wheel of the running CPython is already tested by the test before it",
    ),
    (
        r"^benchmarks/bench_peers\.py::",
        r"^(n/a|incorrect): ",
        "a peer codec that lacks an operation or gets it wrong has no figure to report; "
        "benchmarks/peers.md tabulates these",
    ),
    (
        r"^benchmarks/",
        r"mqttwire\._speedups (is not built|does not import)",
        "a pure-Python install benchmarks the fallback alone (benchmarks/conftest.py)",
    ),
]


def ci() -> bool:
    """Whether this run is a CI run, whose unexpected skips fail."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def _skip_reason(longrepr: Any) -> str:
    # A skip's longrepr is (path, line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def expected_skip(nodeid: str, reason: str) -> bool:
    """Whether a skip of ``nodeid`` for ``reason`` is on the list of expected skips."""
    return any(re.search(node, nodeid) and re.search(why, reason)
               for node, why, _ in EXPECTED_SKIPS)


def _fail_unexpected_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not (report.skipped and ci()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report.longrepr)
    if expected_skip(report.nodeid, reason):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"skipped under CI, and not an expected skip (conftest.py EXPECTED_SKIPS): {reason}"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[
        None, Any, None]:
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    # A module-level pytest.importorskip or pytest.skip(allow_module_level=True).
    outcome = yield
    _fail_unexpected_skip(outcome.get_result())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup``, a test module's tests run on one worker,
    so that its module- and session-scoped fixtures (a live capture, a Spark session) are
    set up once, as with ``--dist loadfile``; unless a test names an ``xdist_group`` of
    its own, as the long wheel tests do, so that they spread over the workers.  (Before
    xdist's own hook, which reads the groups.)"""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))
