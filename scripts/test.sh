#!/usr/bin/env bash
# The project's test command (README Quickstart): bash scripts/test.sh
#
# Works on a fresh clone of a Debian machine, and is what CI runs (.ci/run):
#   1. installs what the suite needs from the system when missing (apt-get, as root):
#      mosquitto, mosquitto-clients, tcpdump, tshark, openssl (the TLS tests' certificates),
#      and Java for Spark;
#   2. creates the virtualenv .venv (reused when present) and installs mqttwire into it,
#      editable, with the test and spark extras: this compiles the Cython extensions in place;
#   3. runs the whole pytest suite from the repository root: every codec test runs against
#      both mqttwire._speedups and mqttwire._pure, and tests/test_wheel.py builds the sdist
#      and from it a wheel for CPython 3.13, and runs the release test-command against it
#      (its compiled twin's items: marker pure_twin);
#   4. builds the pure-Python wheel (MQTTWIRE_PURE_PYTHON=1: no extension at all, as on a
#      machine without a compiler), installs it into a second virtualenv, .pure/venv, made
#      with the oldest CPython that mqttwire supports (3.10, from pyenv), and runs the suite
#      again against it, from a directory outside the source tree (--no-c-extensions
#      deselects the extension's tests), then the benchmarks once each.
# It exits non-zero if anything fails, and also if a pytest pass ran no test.  Under CI
# (CI=true) a skipped test fails too, unless it is one of the expected skips listed in
# conftest.py (EXPECTED_SKIPS) and CONTRIBUTING.md.
#
# With MQTTWIRE_PURE_PYTHON set by the caller, only step 1 and step 4 run: nothing is
# compiled.
#
# Both suite passes run on every core (pytest-xdist, -n auto).
#
# Environment: PYTHON, the interpreter for .venv (default python3); PURE_PYTHON, the one
# for .pure/venv (default: CPython 3.10, see oldest_python below);
# MQTTWIRE_TEST_WORKERS, pytest-xdist's worker count (default auto: one per core).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

started=$SECONDS
pure=${MQTTWIRE_PURE_PYTHON:-}

section "System tools: mosquitto, mosquitto-clients, tcpdump, tshark, openssl, Java"
# Looked up on PATH only, as the tests look them up (shutil.which): a tool that is
# installed but not on PATH (mosquitto and tcpdump live in /usr/sbin) is reported here and
# makes its tests fail under CI, rather than being found here and missed there.
missing=()
for tool in mosquitto:mosquitto mosquitto_pub:mosquitto-clients tcpdump:tcpdump \
    tshark:tshark openssl:openssl java:openjdk-17-jre-headless; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "all on PATH"
elif [ "$(id -u)" -ne 0 ]; then
    echo "not root, so no apt-get; missing: ${missing[*]} (the tests that use them will skip," \
        "and fail under CI)"
elif ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get here; missing: ${missing[*]} (the tests that use them will skip," \
        "and fail under CI)"
else
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark's wireshark-common asks whether non-root users may capture; answer no up front.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for tool in mosquitto mosquitto_pub tcpdump tshark java; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        where=$(ls /usr/sbin/"$tool" /sbin/"$tool" 2>/dev/null | head -n 1 || true)
        echo "warning: $tool is not on PATH${where:+ (it is at $where: add its directory to PATH)}"
    fi
done

# run_pytest PYTHON ARGS...: one pytest pass; pytest's exit code 5 (no test collected)
# counts as a failure, since a pass that ran nothing proves nothing.
run_pytest() {
    local python=$1 rc=0
    shift
    "$python" -m pytest -p no:cacheprovider "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "FAILED: pytest ran no test (exit code 5)" >&2
        return 1
    fi
    return "$rc"
}

# Every core (pytest-xdist); each test module stays on one worker, the long wheel tests
# spread over them, and the groups of long tests start first (conftest.py,
# pytest_collection_modifyitems; --no-loadscope-reorder keeps that order).
PARALLEL=(-n "${MQTTWIRE_TEST_WORKERS:-auto}" --dist loadgroup --no-loadscope-reorder
    --durations=30)
# --durations: the 30 slowest tests of each pass are printed, for whoever keeps CI's time.

# is_ci: whether CI is set as conftest.py's ci() reads it (anything but "", 0 or false).
is_ci() {
    case "$(printf '%s' "${CI:-}" | tr '[:upper:]' '[:lower:]' | tr -d '[:space:]')" in
        "" | 0 | false) return 1 ;;
        *) return 0 ;;
    esac
}

# oldest_python: the interpreter of the pure pass, the oldest CPython of requires-python
# (3.10), so that every module and test is proven on it as well: PURE_PYTHON if set, else
# pyenv's newest 3.10.x, else python3.10 on PATH.  Without one, CI fails; elsewhere the pass
# runs on $PYTHON, with a warning.
oldest_python() {
    local found
    if [ -n "${PURE_PYTHON:-}" ]; then
        echo "$PURE_PYTHON"
        return
    fi
    found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.10.*/bin/python3.10 2>/dev/null |
        grep -E '/3\.10\.[0-9]+/bin/' | sort -V | tail -n 1 || true)
    [ -n "$found" ] || found=$(command -v python3.10 || true)
    if [ -n "$found" ] && "$found" -c 'import sys; assert sys.version_info[:2] == (3, 10)' \
            2>/dev/null; then
        echo "$found"
    elif is_ci; then
        echo "FAILED: no CPython 3.10 for the pure pass (pyenv install 3.10, or set" \
            "PURE_PYTHON)" >&2
        return 1
    else
        echo "warning: no CPython 3.10 (pyenv install 3.10); the pure pass runs on" \
            "${PYTHON:-python3}" >&2
        echo "${PYTHON:-python3}"
    fi
}

# prepare_pure: build the pure-Python wheel (no extension) and install it into a second
# virtualenv, .pure/venv, with the oldest CPython.  Built from a copy of the sources
# without any build product, so that no compiled module left in the tree (the editable
# install puts them there) can reach the wheel.  Mostly downloads and unpacking: it runs
# beside the first pass.
prepare_pure() {
    local pure_python wheel
    rm -rf .pure/src .pure/dist
    python3 - <<'EOF'
import shutil
shutil.copytree(".", ".pure/src", ignore=shutil.ignore_patterns(
    ".git", ".venv", ".pure", "build", "dist", "out", "*.egg-info", "__pycache__",
    ".hypothesis", ".benchmarks", "*.so", "*.pyd", "*.c", "*.html"))
EOF
    pure_python=$(oldest_python)
    PYTHON=$pure_python ensure_venv .pure/venv
    PIP_BUILD_CONSTRAINT=$PWD/requirements/cython.txt MQTTWIRE_PURE_PYTHON=1 \
        "$VENV_PY" -m pip wheel --quiet --no-deps --wheel-dir .pure/dist ./.pure/src
    wheel=$(ls .pure/dist/mqttwire-*.whl)
    "$VENV_PY" - "$wheel" <<'EOF'
import sys, zipfile
wheel = sys.argv[1]
assert wheel.endswith("-py3-none-any.whl"), f"not a pure wheel: {wheel}"
compiled = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith((".so", ".pyd"))]
assert not compiled, f"the pure wheel holds compiled modules: {compiled}"
print("pure wheel:", wheel)
EOF
    # The wheel's dependencies and the test, spark and bench extras (pip's cache makes a
    # second pyspark install cheap); --force-reinstall of mqttwire alone, for a changed
    # tree; --no-compile as in install_editable (scripts/_venv.sh).
    "$VENV_PY" -m pip install --quiet --no-compile "$wheel[test,spark,bench]"
    "$VENV_PY" -m pip install --quiet --no-compile --no-deps --force-reinstall "$wheel"
}

failed=0
mkdir -p .pure
rm -rf .pure/run
if [ -z "$pure" ]; then
    section "Virtualenv .venv"
    ensure_venv .venv

    section "Install mqttwire (editable, test and spark extras)"
    # The spark extra brings pyspark (about 490 MB): installed once per .venv, later runs
    # only check it.
    install_editable test,spark
    # Fail here, with a clear message, rather than with every Cython test failing one by one.
    "$VENV_PY" -c '
import mqttwire, mqttwire._speedups as ext
assert mqttwire.IMPLEMENTATION == "cython", mqttwire.IMPLEMENTATION
print("extension built in place:", ext.__file__)'

    section "Pure-Python wheel (no extension) into .pure/venv, in the background"
    prepare_pure >.pure/prepare.log 2>&1 &
    preparing=$!
    echo "log: .pure/prepare.log"

    section "pytest: the whole suite, both implementations"
    run_pytest "$VENV_PY" "${PARALLEL[@]}" || failed=1

    section "Pure-Python wheel (no extension) into .pure/venv: the background job's log"
    prepared=0
    wait "$preparing" || prepared=$?
    cat .pure/prepare.log
    if [ "$prepared" -ne 0 ]; then
        echo "FAILED: preparing the pure-Python install (exit code $prepared)" >&2
        exit 1
    fi
else
    section "Pure-Python wheel (no extension) into .pure/venv"
    prepare_pure
fi
VENV_PY=$PWD/.pure/venv/bin/python

# Run outside the source tree, from a copy of what the tests read, so that `import
# mqttwire` can only be the installed pure wheel.
mkdir .pure/run
cp -r tests examples benchmarks docs README.md pyproject.toml conftest.py .pure/run/
(
    cd .pure/run
    "$VENV_PY" -c '
import importlib.util, mqttwire
assert mqttwire.IMPLEMENTATION == "python", mqttwire.IMPLEMENTATION
assert importlib.util.find_spec("mqttwire._speedups") is None, "an extension is installed"
print("import mqttwire:", mqttwire.__file__, "(pure)")'

    section "pytest: the whole suite against the pure wheel (--no-c-extensions)"
    # packaging: tests/test_wheel.py builds an extension wheel; once: long system tests
    # whose subject does not depend on the implementation (pyproject's markers).  Both
    # ran in the pass above, unless this is MQTTWIRE_PURE_PYTHON's pass alone.  The local
    # Spark run that the pipeline's tests share then makes the stream reader's run alone
    # (tests/spark/conftest.py: what the selected tests read; the comparisons of readers,
    # writers and split runs are once).
    deselect="not packaging"
    [ -n "$pure" ] || deselect="not packaging and not once"
    run_pytest "$VENV_PY" "${PARALLEL[@]}" --no-c-extensions -m "$deselect" || exit 1

    section "pytest benchmarks/: each benchmark once, without the extension"
    # --benchmark-disable runs each benchmark body once, untimed: proof that the suites
    # run on a pure install (the extension's benchmarks skip, as expected).  The capture
    # benchmarks on a 1 MB capture, the live source on 2,100 messages a source (its two
    # sources on two workers at once: most of each is its Spark driver's start,
    # benchmarks/bench_live.py); the peer codecs (benchmarks/requirements-peers.txt) are
    # not installed here, so their comparison is left out.  Of the pipeline runs only
    # local2-whole runs: the others are the same benchmark code with another master
    # (local1), capture size (5x), split size or writer, each a JVM start (about 95 s of
    # CI together), and the first pass's Spark tests run those paths of the pipeline
    # (tests/spark/test_split.py, test_pipeline.py).
    # On every core, as the suite (untimed, so the workers cannot disturb a figure).
    MQTTWIRE_BENCH_CAPTURE_MB=1 MQTTWIRE_BENCH_LIVE_QUICK=1 run_pytest "$VENV_PY" benchmarks \
        "${PARALLEL[@]}" --benchmark-disable -q \
        -k "not peers and not local1 and not 5x and not split and not sparkwriter" || exit 1
) || failed=1

section "Done in $((SECONDS - started)) s"
if [ "$failed" -ne 0 ]; then
    echo "FAILED: see the pytest output above" >&2
    exit 1
fi
echo "all test passes succeeded"
