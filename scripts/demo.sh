#!/usr/bin/env bash
# The demo: bash scripts/demo.sh
#
# Installs mqttwire into the virtualenv .venv (created if missing, shared with
# scripts/test.sh; the install compiles the Cython extension) and runs examples/demo.py:
# decode a PUBLISH captured from a real broker, encode it back, stream-decode a few packets.
# (Later: run the Spark pipeline on the sample capture instead.)
#
# Environment: PYTHON, the interpreter for a new .venv (default python3).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

section "Virtualenv .venv"
ensure_venv

section "Install mqttwire"
install_editable

section "examples/demo.py"
"$VENV_PY" examples/demo.py
