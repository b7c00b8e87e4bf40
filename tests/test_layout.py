"""The package's layout as its sources describe it: every path of the repository and
every module that a docstring or comment names exists, and no module imports another
that imports it back (imports inside functions count; those under TYPE_CHECKING do not,
as they never run)."""

from __future__ import annotations

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
