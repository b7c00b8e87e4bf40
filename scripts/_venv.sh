# Sourced by scripts/test.sh and scripts/demo.sh (not run on its own): the virtualenv
# .venv in the repository and the editable install of mqttwire into it.
#
# The caller has `set -euo pipefail` and has cd'ed to the repository root.

# section TITLE: a header that stands out in a long CI log, with the seconds since the
# script started.
section() {
    printf '\n==== %s ==== [%d s]\n' "$*" "$SECONDS"
}

# ensure_venv [DIR]: create the virtualenv DIR (default .venv) with $PYTHON (default
# python3) unless a working one of the same Python version is there, and bring its pip to
# a version that knows build constraints (pip >= 25.3; see below).  Sets VENV_PY to the
# venv's interpreter.
ensure_venv() {
    local python=${PYTHON:-python3} dir=${1:-.venv}
    local want='import sys; print("%d.%d" % sys.version_info[:2])'
    if [ -x "$dir/bin/python" ] && [ "$("$dir/bin/python" -c "$want" 2>/dev/null)" = \
            "$("$python" -c "$want")" ]; then
        echo "reusing $dir ($("$dir/bin/python" --version))"
    else
        if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
            echo "error: $python is not Python 3.10 or newer (set PYTHON=...)" >&2
            return 1
        fi
        echo "creating $dir with $("$python" --version)"
        rm -rf "$dir"
        "$python" -m venv "$dir"
    fi
    VENV_PY=$PWD/$dir/bin/python
    "$VENV_PY" -m pip install --quiet --upgrade 'pip>=25.3'
}

# install_editable [EXTRAS]: install the package editable, with the given extras if any
# ("test", "test,spark"...).  The editable build compiles each mqttwire/*.pyx and puts the
# extension next to its source in mqttwire/, so `import mqttwire` from the repository root
# gets it (setuptools' editable mode for this flat layout; test.sh checks it).  With
# MQTTWIRE_PURE_PYTHON set, setup.py builds without the extensions on purpose.
install_editable() {
    local target=.
    [ -z "${1:-}" ] || target=".[$1]"
    # Build with the Cython that CI pins: pip applies PIP_BUILD_CONSTRAINT to the isolated
    # build environment (pip >= 25.3; PIP_CONSTRAINT no longer reaches it when this is set).
    # --no-compile: pip would byte-compile every module it installs (pyspark's, pandas'...),
    # most never imported; Python compiles a module on its first import.  The test extra
    # into a new CPython 3.13 venv took 25 and 33 s with --no-compile, 58 and 70 s
    # without (a quiet two-core machine, 2026-11-30).
    PIP_BUILD_CONSTRAINT=$PWD/requirements/cython.txt \
        "$VENV_PY" -m pip install --quiet --no-compile --editable "$target"
}
