#!/usr/bin/env bash
# Build the Cython extensions with AddressSanitizer and UndefinedBehaviorSanitizer (clang)
# in a copy of the tree, then run the test suite and replay the fuzz corpora against them.
#
#   scripts/sanitize.sh [CORPUS_DIR] [-- pytest arguments (default: tests)]
#
# The copy lives in $SANITIZE_DIR (default /tmp/mqttwire-sanitize): the checkout's own
# in-place build is never touched.  CORPUS_DIR holds one folder per fuzz target (the
# corpora of long atheris runs); without it the seed corpora are written and replayed.
# Needs clang and its runtime (Debian: clang, libclang-rt-14-dev), and PYTHON (default
# python3) with Cython and the test extra installed.  Any sanitizer report fails the run:
# UBSan halts on the first error, ASan always does.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=${SANITIZE_DIR:-/tmp/mqttwire-sanitize}
CORPUS=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then CORPUS=$(cd "$1" && pwd); shift; fi
[ "${1:-}" = "--" ] && shift

echo "== copying the tree to $WORK"
rm -rf "$WORK"
mkdir -p "$WORK"
# Sources only: no git metadata, virtualenv or build output, no compiled modules or
# generated C from the in-place build.
tar -C "$ROOT" --exclude=./.git --exclude=./.venv --exclude=./build --exclude=./dist \
    --exclude=./out --exclude='*.so' --exclude='./mqttwire/*.c' --exclude=__pycache__ \
    --exclude=.pytest_cache --exclude=.hypothesis -cf - . \
    | tar -C "$WORK" -xf -

echo "== building the extensions with -fsanitize=address,undefined"
cd "$WORK"
# -fno-sanitize-recover: every UBSan finding is fatal, not just printed; pointer-overflow
# stays recoverable only so that the one suppression below can apply (UBSan suppresses
# recoverable checks only; halt_on_error still stops on any other pointer-overflow).
# The extension's undefined __asan_*/__ubsan_* symbols resolve against the preloaded
# runtime below (python itself is not instrumented).
CC=clang LDSHARED="clang -shared" \
CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fsanitize-recover=pointer-overflow -fno-omit-frame-pointer -O1 -g" \
LDFLAGS="-fsanitize=address,undefined -shared-libasan" \
    "$PYTHON" setup.py build_ext --inplace --force > "$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log"; exit 1; }
case $(nm -D mqttwire/_speedups*.so) in *__asan_report*) ;; *) echo "not instrumented"; exit 1;; esac

RUNTIME=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
export LD_PRELOAD=$RUNTIME
# Python frees little at exit by design, so LeakSanitizer would only report the
# interpreter; leaks are checked by tests/codec/test_leaks.py instead.
# Reports go to files (pytest's output capture would swallow them when ASan aborts) and
# are printed when the script stops.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:log_path=$WORK/reports/asan
# One suppression, of Cython's generated code (not mqttwire's): the argument-parsing
# wrapper of a cdef class's __cinit__ computes `args + nargs` for a vectorcall tp_new,
# where CPython passes args == NULL and nargs == 0 (Cython 3.3.1's
# __Pyx_KwValues_FASTCALL_TPNEW).  NULL + 0 is undefined in C (well defined in C++) and
# harmless here; nothing dereferences it.
echo 'pointer-overflow:*__cinit__' > "$WORK/ubsan.supp"
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=$WORK/ubsan.supp:log_path=$WORK/reports/ubsan
mkdir -p "$WORK/reports"
reports() {
    if compgen -G "$WORK/reports/*" > /dev/null; then
        echo "== SANITIZER REPORTS"; cat "$WORK"/reports/*; return 1
    fi
}
trap 'reports || true' EXIT
# Python objects through malloc, so ASan sees every object's bounds (not pymalloc arenas).
export PYTHONMALLOC=malloc
export PYTHONPATH=$WORK

"$PYTHON" -c "import mqttwire; assert mqttwire.IMPLEMENTATION == 'cython'; print('loaded', mqttwire._speedups.__file__)"

echo "== test suite (no Spark, no external MQTT software, no packaging)"
[ $# -gt 0 ] || set -- tests
"$PYTHON" -m pytest -p no:cacheprovider -q -x \
    -m "not interop and not spark and not packaging" --ignore=tests/spark "$@"

echo "== fuzz corpora"
if [ -z "$CORPUS" ]; then
    CORPUS=$WORK/fuzz-seeds
    "$PYTHON" tests/fuzz/run.py seed "$CORPUS"
fi
for dir in "$CORPUS"/*/; do
    "$PYTHON" tests/fuzz/run.py replay "$(basename "$dir")" "$dir"
done
trap - EXIT
reports
echo "== no sanitizer reports"
