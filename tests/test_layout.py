"""The package's layout as its sources describe it: every path of the repository and
every module that a docstring or comment names exists, and no module imports another
that imports it back (imports inside functions count; those under TYPE_CHECKING do not,
as they never run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mqttwire"
SOURCES = sorted(p for suffix in ("*.py", "*.pyx", "*.pxi", "*.pxd")
                 for p in PACKAGE.rglob(suffix))

#: A path in the repository: tests/..., benchmarks/..., docs/..., examples/...,
#: mqttwire/..., scripts/... with a file suffix.
REPO_PATH = re.compile(r"\b((?:tests|benchmarks|docs|examples|mqttwire|scripts)/"
                       r"[\w./-]*\w\.(?:py|pyx|pxi|pxd|md|sh|c|json))\b")
#: A module named in full (mqttwire.x.y) or relative to the file's package (:mod:`.x`).
FULL_MODULE = re.compile(r"\b(mqttwire(?:\.[a-z_][a-z0-9_]*)+)")
RELATIVE_MODULE = re.compile(r":(?:mod|func|class|data|meth|attr):`~?(\.+[a-z_][\w.]*)`")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SOURCES}


def _exists(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or a name in one (its longest module prefix)."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return True
    return False


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_what_the_sources_name_exists(path: Path) -> None:
    text = path.read_text()
    missing = [p for p in REPO_PATH.findall(text) if not (ROOT / p).exists()]
    missing += [m for m in FULL_MODULE.findall(text) if not _exists(m.rstrip("."))]
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for ref in RELATIVE_MODULE.findall(text):
        dots = len(ref) - len(ref.lstrip("."))
        base = package[:len(package) - (dots - 1)] if dots > 1 else package
        if not _exists(".".join(base + [ref.lstrip(".")])):
            missing.append(ref)
    assert missing == [], f"{path.relative_to(ROOT)} names what does not exist: {missing}"


def test_contributing_names_every_module() -> None:
    """CONTRIBUTING.md's layout ("Where the rest lives" and the twins' table) names each
    source file of the package (the stubs, .pyi, go with their extension)."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    unnamed = [str(p.relative_to(ROOT)) for p in SOURCES
               if p.name != "__init__.py" and p.name not in text]
    assert unnamed == []


def _imports(path: Path) -> set[str]:
    """The package's modules that ``path`` imports, anywhere in it but under
    ``if TYPE_CHECKING:`` (names imported from a module count as that module)."""
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"):
                for child in node.orelse:
                    self.visit(child)
            else:
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.update(a.name for a in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            base = package[:len(package) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                name = f"{target}.{alias.name}"
                found.add(name if name in MODULES else target)

    Visitor().visit(ast.parse(path.read_text()))
    return {m for m in found if m in MODULES and m != module}


def test_no_module_imports_one_that_imports_it_back() -> None:
    graph = {name: _imports(path) for name, path in MODULES.items()
             if path.suffix == ".py"}
    cycles = []
    for start in graph:
        # Every path back to start, depth first (the graph is small).
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join(path + [start]))
                elif nxt not in path and nxt > start:  # each cycle once, from its least
                    stack.append((nxt, path + [nxt]))
    assert cycles == []


#: A date, or the tool of a one-off timing: what a lab note has and the code does not need.
LAB_NOTE = re.compile(r"\b20\d\d-\d\d-\d\d\b|\btimeit\b")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_sources_hold_no_dated_measurement(path: Path) -> None:
    """Measurements live in benchmarks/ (their history in benchmarks/history/); a
    comment may point there, never hold the date or the timing."""
    found = [m.group(0) for m in LAB_NOTE.finditer(path.read_text())]
    assert found == [], f"{path.relative_to(ROOT)}: {found}"


#: The most lines a file of code may have: a longer one holds several things, and is split
#: by concern (CONTRIBUTING.md's layout names the parts).
MAX_LINES = 1000
CODE = sorted(p for folder in ("mqttwire", "tests", "benchmarks", "examples", "scripts")
              for suffix in ("*.py", "*.pyx", "*.pxi", "*.pxd", "*.pyi", "*.sh")
              for p in (ROOT / folder).rglob(suffix))


def test_no_file_of_code_is_over_1000_lines() -> None:
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in CODE}
    assert {path: n for path, n in lines.items() if n > MAX_LINES} == {}
    assert "mqttwire/capture/loop_c.pyx" in lines  # the files were found
