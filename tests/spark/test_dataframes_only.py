"""The capture pipeline's code uses DataFrame operations only: no SparkContext, RDD,
accumulator or py4j on the path of ``read_tables``, ``mqttwire pipeline`` and the live
source's ``register`` (which a Spark Connect session does not have: its client has no
JVM).  The source is read, not run: the names of the code (attributes, names, imports;
not the docstrings or comments) are checked, so that a later change that brings one
back fails here, naming the file, line and name, before a Connect user meets it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mqttwire

#: The package that ``import mqttwire`` finds: the source tree in a checkout, the
#: installed files in the wheel tests and the pure pass (both ship these .py files).
PACKAGE = Path(mqttwire.__file__).resolve().parent
SPARK = PACKAGE / "spark"

#: The modules on the path of read_tables and the command (every function in them):
#: every module of the batch pipeline (the live source is a package of its own, below).
ON_THE_PATH = sorted(SPARK.glob("*.py")) + [PACKAGE / "cli.py"]

#: Names that a Connect session lacks: the context, RDDs and their jobs, accumulators,
#: the JVM through py4j, the context's log level and status tracker.
FORBIDDEN = frozenset({
    "sparkContext", "SparkContext", "_jvm", "_jsc", "_gateway", "py4j", "parallelize",
    "mapPartitions", "mapPartitionsWithIndex", "runJob", "accumulator", "Accumulator",
    "AccumulatorParam", "RDD", "rdd", "repartitionAndSortWithinPartitions",
    "statusTracker", "setLogLevel", "defaultParallelism", "getConf", "hadoopConfiguration",
})

#: Functions allowed to use them, with why: the ``--jvm-cache`` class archive ends the
#: JVM that pyspark started in this process (a classic session's, never a Connect one's;
#: run_pipeline makes no archive for a remote session).
ALLOWED = {("startup.py", "jvm_running"), ("startup.py", "_end_jvm")}


def _uses(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Name):
            name = node.id
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names = [alias.name for alias in node.names]
            for text in modules + names:
                if any(part in FORBIDDEN for part in text.split(".")):
                    found.append((node.lineno, text))
            continue
        if name in FORBIDDEN:
            found.append((node.lineno, name))
    return found


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _findings(path: Path, only: set[str] | None = None) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    allowed = {function for file, function in ALLOWED if file == path.name}
    skipped: set[int] = set()  # lines of the allowed functions
    checked: list[ast.AST] = []
    for function in _functions(tree):
        if function.name in allowed or (only is not None and function.name not in only):
            skipped.update(range(function.lineno, (function.end_lineno or function.lineno) + 1))
        elif only is not None:
            checked.append(function)
    if only is None:
        checked = [tree]
    return sorted({f"{path.name}:{line}: {name}" for node in checked
                   for line, name in _uses(node) if line not in skipped})


@pytest.mark.parametrize("path", ON_THE_PATH, ids=lambda p: p.name)
def test_no_sparkcontext_rdd_or_py4j_on_the_path(path: Path) -> None:
    assert _findings(path) == []


def test_the_live_sources_register_uses_dataframes_only() -> None:
    """``register`` (and its worker check in startup.py, checked above); the rest of
    live/source.py runs in Python workers, or is use_filesystem_checkpoints (py4j on a classic
    session, the conf alone on a Connect one)."""
    assert _findings(SPARK / "live" / "source.py", {"register"}) == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The check itself, on code that does what the pipeline did before: an RDD job
    over parallelize, an accumulator, py4j's JVM."""
    code = tmp_path / "pipeline.py"
    code.write_text(
        '"""sparkContext in a docstring is no use."""\n'
        "from py4j.protocol import Py4JJavaError\n"
        "def run(spark):\n"
        "    sc = spark.sparkContext  # a comment: parallelize\n"
        "    counter = sc.accumulator(0)\n"
        "    return sc.parallelize([1], 1).mapPartitions(len).collect(), sc._jvm\n")
    found = [line.split(": ", 1)[1] for line in _findings_at(code)]
    assert found == ["_jvm", "accumulator", "mapPartitions", "parallelize", "py4j.protocol",
                     "sparkContext"]


def _findings_at(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    return sorted({f"{line}: {name}" for line, name in _uses(tree)},
                  key=lambda text: text.split(": ", 1)[1])
