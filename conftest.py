"""The skip policy of every pytest run of this repository (tests/ and benchmarks/).

Outside CI a skip stays a skip, with its reason.  Under CI (the environment variable CI set
to anything but "", "0" or "false", as GitHub Actions and this project's .ci/run set it) a
skipped test is reported as a failure, reason included, unless the skip is on the list
below: a missing tool, a missing Java or a missing permission must fail loudly there, never
pass quietly.  Each entry is a skip that is right in some CI environment, with why.
The list is documented, with why each is right, in CONTRIBUTING.md ("Running the tests").

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


# Test modules that share one xdist group, so that their session-scoped fixtures are made
# once: the local Spark run of tests/spark/conftest.py (over a minute) is the reference of
# both the pipeline's tests and the cluster's.
_SHARED_GROUPS = {
    "tests/spark/test_pipeline.py": "tests/spark/local-run",
    "tests/spark/test_cluster.py": "tests/spark/local-run",
    "tests/spark/test_split.py": "tests/spark/local-run",
    "tests/spark/test_connect.py": "tests/spark/local-run",
}


_GROUP = pytest.StashKey[str]()  # an item's xdist group


def _weight(item: pytest.Item) -> int:
    """How early a test's group should start: the wheel's build and tests (about ten
    minutes), then the other long tests, then the rest."""
    if item.get_closest_marker("packaging") is not None:
        return 0
    if item.get_closest_marker("slow") is not None:
        return 1
    return 2


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist's ``--dist loadgroup``, a test module's tests run on one worker,
    so that its module- and session-scoped fixtures (a live capture, a Spark session) are
    set up once, as with ``--dist loadfile``; unless a test names an ``xdist_group`` of
    its own, or its module shares a group (_SHARED_GROUPS).  First of the hooks: xdist's
    own, on each worker, reads the groups (and pytest_xdist_node_collection_finished
    below checks that it did)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            module = item.nodeid.split("::", 1)[0]
            item.add_marker(pytest.mark.xdist_group(_SHARED_GROUPS.get(module, module)))


class _GroupOrder:
    """The groups with the longest tests come first, so that the workers start them first
    and do not end on one of them alone (scripts/test.sh passes --no-loadscope-reorder,
    which keeps this order rather than xdist's, by number of tests).  Last of the hooks
    (a plugin of its own, since a module holds one hook of a name): pytest's own reorders
    the items by their parametrized fixtures, which would undo this.  The sort is stable:
    within a group, the order is pytest's."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        group_weight: dict[str, int] = {}
        for item in items:
            marker = item.get_closest_marker("xdist_group")
            assert marker is not None
            group = str(marker.args[0] if marker.args else marker.kwargs.get("name"))
            group_weight[group] = min(group_weight.get(group, 2), _weight(item))
            item.stash[_GROUP] = group
        items.sort(key=lambda item: group_weight[item.stash[_GROUP]])


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupOrder(), "mqttwire-group-order")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, where it is installed
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """Under ``--dist loadgroup``: stop the run, before any test, unless xdist marked the
    groups.  It marks them by adding "@group" to each test's node id, which pytest 9.2's
    structured node ids silently ignore (pytest-dev/pytest-xdist#1386): the tests are then
    dealt out one by one, every module fixture (a Spark session, a wheel build) made on
    both workers, and the run takes far longer without a word."""
    if node.config.getvalue("dist") != "loadgroup":
        return
    ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
    if ungrouped:
        pytest.exit(
            f"pytest-xdist --dist loadgroup did not group {len(ungrouped)} of {len(ids)} "
            f"tests (the first: {ungrouped[0]}), with pytest {pytest.__version__}: see "
            "pytest-dev/pytest-xdist#1386 and the pin in pyproject.toml's test extra",
            returncode=pytest.ExitCode.USAGE_ERROR)
