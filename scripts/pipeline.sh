#!/usr/bin/env bash
# The README's first command: bash scripts/pipeline.sh
#
# Installs mqttwire with the `spark` extra (pyspark, pyarrow, pandas<3, matplotlib) into
# the virtualenv .venv (created if missing, shared with scripts/test.sh and demo.sh; the
# install compiles the Cython extension), then runs the Spark pipeline on the sample
# capture, examples/sample.pcapng, on local Spark, and says where the summary is.
#
# Needs: Python 3.10+ and a Java 17 or 21 runtime (Spark 4 runs on the JVM).  pyspark is a
# large download (about 490 MB installed) the first time.
#
# Environment: PYTHON, the interpreter for a new .venv (default python3).  Arguments are
# passed to `mqttwire pipeline` (e.g. --master spark://host:7077).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/_venv.sh
source scripts/_venv.sh

OUT=out/sample

section "Java"
# Check before the long install: Spark cannot start without it.
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    JAVA="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
    JAVA=$(command -v java)
else
    echo "error: Java was not found (no JAVA_HOME, no java on PATH); Spark 4 needs Java 17" >&2
    echo "       or 21: e.g. apt-get install openjdk-17-jre-headless" >&2
    exit 2
fi
"$JAVA" -version 2>&1 | head -n 1

section "Virtualenv .venv"
ensure_venv

section "Install mqttwire[spark]"
install_editable spark

section "mqttwire pipeline examples/sample.pcapng --out $OUT"
.venv/bin/mqttwire pipeline examples/sample.pcapng --out "$OUT" "$@"

section "Done"
echo "summary: $PWD/$OUT/summary.md"
echo "chart:   $PWD/$OUT/message_rate.png"
echo "tables:  $PWD/$OUT/{packets,connections,messages,retained,errors}/ (Parquet)"
