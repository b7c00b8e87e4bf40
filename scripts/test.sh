#!/usr/bin/env bash
# The project's test command (README Quickstart): bash scripts/test.sh
#
# Works on a fresh clone of a Debian machine, and is what CI runs (.ci/run):
#   1. installs the system tools the interop and capture tests use, when missing (apt-get);
#   2. creates the virtualenv .venv (reused when present) and installs mqttwire into it,
#      editable, with the test and spark extras: this compiles the Cython extensions in place;
#   3. runs the whole pytest suite from the repository root: every codec test runs against
#      both mqttwire._speedups and mqttwire._pure, and tests/test_wheel.py builds the sdist
#      and the wheel and runs the release test-command against the installed wheel;
#   4. runs the suite again with MQTTWIRE_PURE_PYTHON=1, so the selector's fallback is what
#      `import mqttwire` gives (the guard test checks IMPLEMENTATION in both passes).
# It exits non-zero if anything fails, and also if a pytest pass ran no test.
#
# With MQTTWIRE_PURE_PYTHON set by the caller, the build leaves the extensions out on
# purpose (as on a machine without a compiler), and a single pass runs with
# --no-c-extensions and without the wheel test, which builds the extensions.
#
# Environment: PYTHON, the interpreter for a new .venv (default python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

started=$SECONDS

section "System tools: mosquitto, mosquitto-clients, tcpdump, tshark"
# mosquitto and tcpdump live in /usr/sbin, which is not on every user's PATH.
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
missing=()
have mosquitto || missing+=(mosquitto)
have mosquitto_pub || missing+=(mosquitto-clients)
have tcpdump || missing+=(tcpdump)
have tshark || missing+=(tshark)
if [ ${#missing[@]} -eq 0 ]; then
    echo "all present"
elif [ "$(id -u)" -ne 0 ]; then
    echo "not root, so no apt-get; missing: ${missing[*]} (the tests that use them may fail)"
elif ! command -v apt-get >/dev/null 2>&1; then
    echo "no apt-get here; missing: ${missing[*]} (the tests that use them may fail)"
else
    echo "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark's wireshark-common asks whether non-root users may capture; answer no up front.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

section "Virtualenv .venv"
ensure_venv

pure=${MQTTWIRE_PURE_PYTHON:-}
section "Install mqttwire (editable, test and spark extras)${pure:+, pure Python on purpose}"
# The spark extra brings pyspark (about 490 MB): installed once per .venv, later runs
# only check it.  The Spark tests also need Java 17, which this script does not install.
install_editable test,spark
# Fail here, with a clear message, rather than with every Cython test failing one by one.
if [ -z "$pure" ]; then
    "$VENV_PY" -c '
import mqttwire, mqttwire._speedups as ext
assert mqttwire.IMPLEMENTATION == "cython", mqttwire.IMPLEMENTATION
print("extension built in place:", ext.__file__)'
fi

# run_pytest ARGS...: one pytest pass from the repository root; pytest's exit code 5 (no
# test collected) counts as a failure, since a pass that ran nothing proves nothing.
run_pytest() {
    local rc=0
    "$VENV_PY" -m pytest -p no:cacheprovider "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "FAILED: pytest ran no test (exit code 5)" >&2
        return 1
    fi
    return "$rc"
}

failed=0
if [ -z "$pure" ]; then
    section "pytest: the whole suite, both implementations"
    run_pytest || failed=1

    section "pytest: again with MQTTWIRE_PURE_PYTHON=1 (the selector's fallback)"
    # Here `import mqttwire` gives _pure, so the tests that use the package's top-level
    # names (not the `codec` fixture) run against the fallback too; the Cython items ran
    # above.  The whole suite, since it is cheap (about 50 s of a 6-minute run), less the
    # wheel test (packaging: one wheel build per run) and Spark (slow to start, and its
    # codec use is covered by the fixture-driven tests).
    MQTTWIRE_PURE_PYTHON=1 run_pytest --no-c-extensions -m "not packaging and not spark" || failed=1
else
    section "pytest: the whole suite, pure Python only (--no-c-extensions)"
    run_pytest --no-c-extensions -m "not packaging" || failed=1
fi

section "Done in $((SECONDS - started)) s"
if [ "$failed" -ne 0 ]; then
    echo "FAILED: see the pytest output above" >&2
    exit 1
fi
echo "all test passes succeeded"
