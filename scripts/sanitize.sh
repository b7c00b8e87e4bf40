#!/usr/bin/env bash
# Build the Cython extensions with AddressSanitizer and UndefinedBehaviorSanitizer (clang)
# in a copy of the tree, then run the test suite and replay the fuzz corpora against them.
#
#   scripts/sanitize.sh [CORPUS_DIR] [-- extra pytest arguments]
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
# Sources only: no git metadata, no compiled modules or generated C from the in-place build.
tar -C "$ROOT" --exclude=.git --exclude=build --exclude='*.so' --exclude='mqttwire/*.c' \
    --exclude=__pycache__ --exclude=.pytest_cache --exclude=.hypothesis -cf - . \
    | tar -C "$WORK" -xf -

echo "== building the extensions with -fsanitize=address,undefined"
cd "$WORK"
# -fno-sanitize-recover: every UBSan finding is fatal, not just printed.
# The extension's undefined __asan_*/__ubsan_* symbols resolve against the preloaded
# runtime below (python itself is not instrumented).
CC=clang LDSHARED="clang -shared" \
CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g" \
LDFLAGS="-fsanitize=address,undefined -shared-libasan" \
    "$PYTHON" setup.py build_ext --inplace --force > "$WORK/build.log" 2>&1 \
    || { tail -30 "$WORK/build.log"; exit 1; }
case $(nm -D mqttwire/_speedups*.so) in *__asan_report*) ;; *) echo "not instrumented"; exit 1;; esac

RUNTIME=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
export LD_PRELOAD=$RUNTIME
# Python frees little at exit by design, so LeakSanitizer would only report the
# interpreter; leaks are checked by tests/test_leaks.py instead.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# Python objects through malloc, so ASan sees every object's bounds (not pymalloc arenas).
export PYTHONMALLOC=malloc
export PYTHONPATH=$WORK

"$PYTHON" -c "import mqttwire; assert mqttwire.IMPLEMENTATION == 'cython'; print('loaded', mqttwire._speedups.__file__)"

echo "== test suite (no Spark, no external MQTT software, no packaging)"
"$PYTHON" -m pytest tests -p no:cacheprovider -q -x \
    -m "not interop and not spark and not packaging" --ignore=tests/spark "$@"

echo "== fuzz corpora"
if [ -z "$CORPUS" ]; then
    CORPUS=$WORK/fuzz-seeds
    "$PYTHON" tests/fuzz/run.py seed "$CORPUS"
fi
for dir in "$CORPUS"/*/; do
    "$PYTHON" tests/fuzz/run.py replay "$(basename "$dir")" "$dir"
done
echo "== no sanitizer reports"
