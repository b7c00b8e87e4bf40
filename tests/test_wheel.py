"""The distributions: what the sdist and the wheel hold, and that the installed wheel works.

Marker ``packaging``.  The sdist is built from a copy of the working tree, and from that
sdist a wheel, as the release workflow does with cibuildwheel, by the newest CPython of the
release matrix that this machine has (WHEEL_PYTHON).  That wheel's contents are checked; it
is installed, with no extra, into a new virtualenv and every module imported from outside
the source tree; and it is tested as cibuildwheel tests every release wheel, with the
test-sources and test-command of pyproject's [tool.cibuildwheel]: installed with its test
extra into a new virtualenv, the suite run from a directory outside the source tree, so
that ``import mqttwire`` can only find the installed wheel.  Here the test-command leaves
out the pure twin's items (marker ``pure_twin``, about two fifths of them): they test
the same .py files that the suite's first pass tests in place and its pure pass on 3.10,
while the compiled modules are this wheel's own.  The running CPython's build
is the one the whole suite tests in place (the editable install compiles the same
extensions from the same setup.py); the oldest CPython of the matrix, 3.10, runs the
suite in scripts/test.sh's pure-Python pass; the wheels workflow builds and tests every
other.  One wheel build, not one per CPython here: each compiles every extension (about
three minutes of a core).  This needs the source checkout and a network path to PyPI
(build requirements, test dependencies).
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[1]

# Not sources: left out of the copy that the sdist is built from.  Compiled extensions and
# generated C stay in the copy on purpose, so that the sdist test proves MANIFEST.in keeps
# them out.
_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".pure", "build", "dist", "*.egg-info", "__pycache__", ".hypothesis",
    ".pytest_cache", ".benchmarks",
)  # fmt: skip

# Files generated from sources, or built for one platform: never in the sdist.
_GENERATED = (".c", ".so", ".pyd", ".html", ".pyc")


@dataclass(frozen=True)
class Sdist:
    source: Path  # the copy of the working tree that the sdist was built from
    sdist: Path


def _environ() -> dict[str, str]:
    """The environment for the builds and the wheel venv: nothing that points back at the
    source tree or asks for a pure build."""
    env = dict(os.environ)
    for name in ("MQTTWIRE_PURE_PYTHON", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def _run(
    args: list[str | Path], *, cwd: Path, timeout: int, env: dict[str, str] | None = None
) -> str:
    """Run a command; on failure, fail the test with its whole output."""
    proc = subprocess.run(
        [str(a) for a in args],
        check=False,  # the output goes into the failure message below
        cwd=cwd,
        env=env or _environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}", pytrace=False
        )
    return proc.stdout


@pytest.fixture(scope="module")
def sdist(tmp_path_factory: pytest.TempPathFactory) -> Sdist:
    """Build the sdist from a copy of the working tree, with `python -m build`."""
    top = tmp_path_factory.mktemp("sdist")
    source = top / "source"
    shutil.copytree(REPO, source, ignore=_NOT_SOURCES)
    _run([sys.executable, "-m", "build", "--sdist", "--outdir", top / "dist", source],
         cwd=top, timeout=900)
    (built,) = (top / "dist").glob("*.tar.gz")
    return Sdist(source, built)


@pytest.fixture(scope="module")
def wheel_python() -> Path:
    """The CPython that builds the wheel: the running one if it is WHEEL_PYTHON, else
    WHEEL_PYTHON found here.  Without one the tests skip, which fails under CI."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == WHEEL_PYTHON:
        return Path(sys.executable)
    python = _other_python(WHEEL_PYTHON)
    if python is None:
        pytest.skip(f"no CPython {WHEEL_PYTHON} here: neither under pyenv (PYENV_ROOT) nor "
                    f"as python{WHEEL_PYTHON} on PATH")
    return python


@pytest.fixture(scope="module")
def wheel(sdist: Sdist, wheel_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from the sdist by WHEEL_PYTHON, with pip in a fresh virtualenv."""
    top = tmp_path_factory.mktemp("wheel")
    builder = _new_venv(wheel_python, top)
    pip = [builder / "bin" / "python", "-m", "pip"]
    _run([*pip, "install", "--quiet", "pip>=25.3"], cwd=top, timeout=300)
    env = _environ()
    # The pinned Cython, in pip's isolated build environment (pip >= 25.3).
    env["PIP_BUILD_CONSTRAINT"] = str(sdist.source / "requirements" / "cython.txt")
    wheels = top / "wheels"
    _run([*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, sdist.sdist],
         cwd=top, env=env, timeout=900)  # fmt: skip
    (built,) = wheels.glob("*.whl")
    tag = "cp" + WHEEL_PYTHON.replace(".", "")
    assert f"-{tag}-{tag}-" in built.name, built.name
    return built


def _package_sources(root: Path) -> set[str]:
    """Paths, relative to `root`, of the files under mqttwire/ that are sources."""
    return {
        p.relative_to(root).as_posix()
        for p in (root / "mqttwire").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.endswith(_GENERATED)
    }


def test_sdist_has_sources_and_no_generated_files(sdist: Sdist) -> None:
    with tarfile.open(sdist.sdist) as tar:
        # Every member sits under one top directory, "mqttwire-<version>/".
        names = {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}
    assert "mqttwire/_speedups.pyx" in names
    missing = _package_sources(sdist.source) - names
    assert not missing, f"package sources missing from the sdist: {sorted(missing)}"
    for needed in (
        "pyproject.toml", "setup.py", "README.md", "requirements/cython.txt",
        "tests/conftest.py", "examples/demo.py", "conftest.py", "docs/codec.md",
    ):  # fmt: skip
        assert needed in names, f"{needed} missing from the sdist"
    generated = sorted(n for n in names if n.endswith(_GENERATED))
    assert not generated, f"generated or compiled files in the sdist: {generated}"


def test_wheel_has_extension_and_typing_files_and_no_sources(sdist: Sdist, wheel: Path) -> None:
    assert not wheel.name.endswith("-none-any.whl"), "a pure wheel was built: no compiler?"
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    # One compiled module per .pyx, e.g. mqttwire/_speedups.cpython-313-x86_64-linux-gnu.so.
    abi = "cpython-" + WHEEL_PYTHON.replace(".", "")
    for pyx in sorted((sdist.source / "mqttwire").rglob("*.pyx")):
        stem = pyx.relative_to(sdist.source).with_suffix("").as_posix()
        assert any(n.startswith(f"{stem}.{abi}") and n.endswith(".so") for n in names), (
            f"no compiled {stem} for {abi}")
    assert "mqttwire/py.typed" in names
    assert "mqttwire/_speedups.pyi" in names
    missing = {p for p in _package_sources(sdist.source) if p.endswith(".py")} - names
    assert not missing, f"modules missing from the wheel (a package not listed?): {sorted(missing)}"
    sources = sorted(n for n in names if n.endswith((".pyx", ".pxi", ".pxd", ".c", ".html")))
    assert not sources, f"build sources in the wheel: {sources}"


def test_wheel_provides_every_extra_the_docs_install(sdist: Sdist, wheel: Path) -> None:
    """Each ``mqttwire[...]`` that README.md and docs/ tell users to install names extras
    that the wheel's metadata provides: a misspelt or dropped extra makes pip warn and
    install without it.  The ``connect`` extra brings pyspark's own ``connect`` extra."""
    with zipfile.ZipFile(wheel) as whl:
        (metadata,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
        message = email.parser.Parser().parsestr(whl.read(metadata).decode())
    provided = set(message.get_all("Provides-Extra") or [])
    asked: set[str] = set()
    for page in [sdist.source / "README.md", *sorted((sdist.source / "docs").glob("*.md"))]:
        for extras in re.findall(r"mqttwire\[([a-z,\s-]+)\]", page.read_text()):
            asked.update(e.strip() for e in extras.split(","))
    assert {"spark", "connect"} <= asked, asked
    assert asked <= provided, f"extras the docs install but the wheel lacks: {asked - provided}"
    requires = message.get_all("Requires-Dist") or []
    assert any(r.replace(" ", "").startswith("pyspark[connect]>=4.0;") and "connect" in
               r.split(";", 1)[1] for r in requires), requires


def _cibuildwheel_test_config(project: Path) -> tuple[list[str], str]:
    """[tool.cibuildwheel]'s test-sources, and its test-command joined with && as
    cibuildwheel joins a list.  With test-sources, the command uses paths relative to the
    directory it runs in, not the {project} placeholder."""
    with open(project / "pyproject.toml", "rb") as f:
        cibw = tomllib.load(f)["tool"]["cibuildwheel"]
    return cibw["test-sources"], " && ".join(cibw["test-command"])


def _without_pure_twin(test_command: str) -> str:
    """``test_command`` with its pytest marker expression narrowed to the items that are
    not the pure twin's (see the module's docstring)."""
    marker = '-m "not interop and not slow and not spark and not packaging"'
    assert test_command.count(marker) == 1, f"the test-command changed: {test_command}"
    return test_command.replace(marker, marker[:-1] + ' and not pure_twin"')


def test_installed_wheel_imports_its_compiled_modules(
    sdist: Sdist, wheel_python: Path, wheel: Path, tmp_path: Path
) -> None:
    """Installed into a new virtualenv, with no extra, the wheel imports every one of its
    modules from site-packages, the compiled ones compiled: a module left out of the wheel,
    or a compiled module that fails to load (and a silent fallback to _pure), fails here."""
    venv = _new_venv(wheel_python, tmp_path)
    _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", "--no-compile", wheel],
         cwd=tmp_path, timeout=600)
    modules = sorted(
        p.relative_to(sdist.source).with_suffix("").as_posix().replace("/", ".")
        .removesuffix(".__init__")
        for p in (sdist.source / "mqttwire").rglob("*")
        if p.suffix in (".py", ".pyx") and "__pycache__" not in p.parts
    )
    # mqttwire.spark needs the spark extra, mqttwire.__main__ runs the command line.
    modules = [m for m in modules
               if m != "mqttwire.__main__" and m.split(".")[:2] != ["mqttwire", "spark"]]
    compiled = sorted(
        p.relative_to(sdist.source).with_suffix("").as_posix().replace("/", ".")
        for p in (sdist.source / "mqttwire").rglob("*.pyx"))
    probe = (
        "import importlib, importlib.machinery, sys, mqttwire\n"
        "assert mqttwire.IMPLEMENTATION == 'cython', mqttwire.IMPLEMENTATION\n"
        "for name in sys.argv[1].split():\n"
        "    m = importlib.import_module(name)\n"
        "    assert m.__file__.startswith(sys.prefix), (name, m.__file__)\n"
        "for name in sys.argv[2].split():\n"
        "    f = importlib.import_module(name).__file__\n"
        "    assert f.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)), (name, f)\n"
        "print(len(sys.argv[1].split()), 'modules imported')\n"
    )
    run_dir = tmp_path / "empty"
    run_dir.mkdir()
    out = _run([venv / "bin" / "python", "-c", probe, " ".join(modules), " ".join(compiled)],
               cwd=run_dir, timeout=120)
    assert out.strip() == f"{len(modules)} modules imported", out


def _new_venv(python: Path, tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", venv], cwd=tmp_path, timeout=300)
    return venv


# The CPython whose wheel is built and tested here: the newest of the release matrix
# ([tool.cibuildwheel] build) that this project's machines have.  What differs between
# CPython versions shows only in a wheel built and tested by that version (Python 3.13's
# compiler strips the indentation of docstrings, which Cython keeps, and a parity test
# compared them as they were).
WHEEL_PYTHON = "3.13"


def _other_python(version: str) -> Path | None:
    """A CPython `version`.x: pyenv's newest (this project's machines), else the
    `python<version>` on PATH that really is one (actions/setup-python on GitHub's runners;
    a pyenv shim for a version pyenv does not select fails to run and is passed over)."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))

    def newness(path: Path) -> tuple[bool, int]:
        # A final release before anything else (3.13.0rc1, 3.13t), then by micro version
        # as a number: 3.10.13 is newer than 3.10.9.
        micro = path.parents[1].name.removeprefix(f"{version}.")
        return micro.isdigit(), int(micro) if micro.isdigit() else 0

    found = max(root.glob(f"versions/{version}.*/bin/python{version}"), key=newness,
                default=None)
    if found is not None:
        return found
    on_path = shutil.which(f"python{version}")
    if on_path is None:
        return None
    probe = subprocess.run(
        [on_path, "-c", "import platform, sys; print(platform.python_implementation(),"
         " '%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return Path(on_path) if probe.stdout.split() == ["CPython", version] else None


def test_wheel_passes_the_release_tests(
    sdist: Sdist, wheel_python: Path, wheel: Path, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The wheel, tested as the release workflow tests it, its compiled twin's items."""
    summary = _release_test(wheel_python, wheel, sdist.source, tmp_path)
    with capsys.disabled():
        print(f"\n[wheel venv, Python {WHEEL_PYTHON}]\n{summary}")


def _release_test(python: Path, wheel: Path, source: Path, tmp_path: Path) -> str:
    """Install `wheel` with its test extra into a new virtualenv of `python`, then run
    [tool.cibuildwheel]'s test-command in a directory outside the source tree holding only
    its test-sources; return the command and pytest's summary line."""
    venv = _new_venv(python, tmp_path)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    # The wheel file itself, with the test extra's dependencies from the index.  Not
    # byte-compiled by pip (cibuildwheel's install is): what the tests import is compiled
    # as it is imported, and pip's compiling of every module of pyspark, pandas... took
    # twice the rest of this install (scripts/_venv.sh, install_editable).
    _run(
        [bin_dir / "python", "-m", "pip", "install", "--quiet", "--no-compile",
         f"{wheel}[test]"],
        cwd=tmp_path,
        timeout=900,
    )

    test_sources, test_command = _cibuildwheel_test_config(source)
    test_command = _without_pure_twin(test_command)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in test_sources:
        origin = source / name
        if origin.is_dir():
            shutil.copytree(origin, run_dir / name, ignore=_NOT_SOURCES)
        else:
            shutil.copy2(origin, run_dir / name)
    env = _environ()
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"  # `python` is the venv's

    # The compiled module must be what `import mqttwire` picks, from the venv: a silent
    # fallback to _pure, or an import of the source tree, would pass every test.
    probe = "import mqttwire; print(mqttwire.IMPLEMENTATION); print(mqttwire.__file__)"
    out = _run(["python", "-c", probe], cwd=run_dir, env=env, timeout=60)
    implementation, location = out.splitlines()
    assert implementation == "cython"
    assert Path(location).resolve().is_relative_to(venv.resolve()), location

    proc = subprocess.run(
        test_command,
        shell=True,  # cibuildwheel runs the test-command in a shell too
        check=False,  # judged below, with the end of the output in the message
        cwd=run_dir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=1200,
    )
    # Only the end of the output (the short summary of failures) goes into the report:
    # the whole of it would bury this run's own summary.
    exit_code, lines = proc.returncode, proc.stdout.rstrip().splitlines() or ["(no output)"]
    summary, tail = lines[-1], "\n".join(lines[-60:])
    # pytest's exit code 5 is "no test collected": a failure too, since it proves nothing.
    assert exit_code == 0, f"{test_command}\nexited {exit_code}:\n...\n{tail}"
    assert " passed" in summary, summary
    return f"{test_command}\n{summary}"
