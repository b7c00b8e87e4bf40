"""Live MQTT messages into Parquet with Spark Structured Streaming, at least once.

    python examples/live_to_parquet.py mqtt://127.0.0.1:1883 'sensors/#' out/ checkpoint/

Run it with the python that has mqttwire and pyarrow (a virtualenv's, activated or
not): with a local master Spark's Python workers run that same interpreter
(``mqttwire.spark.startup.make_session`` sets PYSPARK_PYTHON to it when unset).  A
PYSPARK_PYTHON of yours that cannot import mqttwire stops the job before the query
starts, with a line saying what to set.

or on a cluster (every executor needs mqttwire and pyarrow, under the PYSPARK_PYTHON
that Spark runs: docs/cluster.md; the job checks that before the query starts):

    spark-submit --master spark://host:7077 examples/live_to_parquet.py \
        mqtt://broker:1883 'sensors/#' hdfs:///mqtt/sensors hdfs:///mqtt/checkpoints/sensors

Stop it with Ctrl-C: it waits for the micro-batch under way to end (10 s at most), stops
the query, says so on stderr and exits with status 130, as an interrupted program does
(a second Ctrl-C exits at once, the batch left to the checkpoint).  Run it again with the
same checkpoint and client id to go on where it stopped (the broker keeps the
unacknowledged messages for the client id's session).  A broker that restarts, or a
connection that drops, does not stop it: the source reconnects and resumes the session
(for up to 300 s: ``-o reconnectTimeout=SECONDS``).  A query that fails prints its
error on stderr and exits with status 1.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from types import FrameType
from typing import Any

PROG = "live_to_parquet"
#: The exit status after Ctrl-C: 128 + SIGINT, what a shell reports for a program that
#: SIGINT ended, so that a script can tell "interrupted" from "done" (0) and "failed" (1).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: How long Ctrl-C waits for the micro-batch under way before stopping the query anyway.
BATCH_WAIT = 10.0


class Interrupts:
    """Ctrl-C (SIGINT) as a flag that the main loop polls.

    pyspark's own SIGINT handler cancels every job and raises KeyboardInterrupt in the
    main thread, which is then most likely inside a py4j call (awaitTermination): py4j
    fails on the reentrant read and prints its tracebacks.  This handler only counts, so
    the call in progress finishes, and the main loop stops the query between calls.  The
    second Ctrl-C exits at once; the JVM, whose stdin is a pipe from this process, exits
    when it closes."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1:
            # os.write: print() could be in the middle of a write to stderr.
            os.write(2, f"{PROG}: interrupted again: exiting now\n".encode())
            os._exit(EXIT_INTERRUPTED)

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)


def stop(spark: Any, query: Any) -> None:
    """Stop the query, between two micro-batches when one ends within BATCH_WAIT seconds.

    A batch that the stop interrupts (none ended in time, or the next one began meanwhile)
    is aborted, and Spark logs the cancellation as errors with Java stack traces, as it
    does while the SparkContext stops under tasks still finishing.  Those are the stop's
    expected effects, not failures (the checkpoint is right either way: an interrupted
    batch runs again on the next start), so Spark's log is quieted to fatal errors first:
    the stop is said on stderr instead."""
    deadline = time.monotonic() + BATCH_WAIT
    while query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.01)
    spark.sparkContext.setLogLevel("FATAL")
    query.stop()


def failure(message: str) -> str:
    """What a failed query's error comes to: Spark words a Python source's error as its
    own message with the Python traceback inside (and has logged it already), so the
    last "SomeError: what" line of that traceback, else the message's first line."""
    found = re.findall(r"^([A-Za-z_][\w.]*(?:Error|Exception)): (.+)$", message, re.M)
    if found:
        name, what = found[-1]
        return f"{name.rsplit('.', 1)[-1]}: {what}"
    return message.strip().splitlines()[0] if message.strip() else "unknown error"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="mqtt://[user:password@]host[:port], or mqtts:// "
                        "(TLS), ws://host[:port]/path, wss:// (docs/live.md)")
    parser.add_argument("topics", help="topic filters, comma-separated")
    parser.add_argument("out", help="where the Parquet files go")
    parser.add_argument("checkpoint", help="Spark's checkpoint directory for the query")
    parser.add_argument("--client-id", default="mqttwire-live-to-parquet")
    parser.add_argument("--qos", default="1", choices=("0", "1", "2"))
    parser.add_argument("--version", default="5", choices=("3", "4", "5"))
    parser.add_argument("--trigger", default="1 second", help="micro-batch interval")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                        help="any other option of the source, e.g. -o caFile=ca.pem "
                        "-o certFile=client.pem -o keyFile=client.key (repeatable)")
    args = parser.parse_args()
    if bad := [o for o in args.option if "=" not in o]:
        parser.error(f"--option takes NAME=VALUE, not {bad[0]!r}")

    interrupts = Interrupts()
    interrupts.install()  # Ctrl-C while Spark is imported and starts, too
    from pyspark.errors import StreamingQueryException

    from mqttwire.spark.live import register, use_filesystem_checkpoints
    from mqttwire.spark.startup import WorkerPythonError, default_master, make_session

    # A local master unless spark-submit gives one; PYSPARK_PYTHON set to this python
    # when unset, before Spark starts (its workers would run python3 from PATH).
    spark = make_session(default_master(), app_name="mqtt-live-to-parquet")
    interrupts.install()  # again: the SparkContext installed pyspark's handler
    if interrupts.count:
        print(f"{PROG}: interrupted before the query started", file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_INTERRUPTED
    try:
        register(spark)  # checks that Spark's Python workers can import mqttwire
    except WorkerPythonError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr, flush=True)
        spark.stop()
        return 1
    if "://" not in args.checkpoint or args.checkpoint.startswith("file:"):
        use_filesystem_checkpoints(spark)  # a local checkpoint: no process per log file
    messages = (spark.readStream.format("mqtt")
                .option("url", args.url).option("topics", args.topics)
                .option("clientId", args.client_id).option("qos", args.qos)
                .option("version", args.version)
                .options(**dict(o.split("=", 1) for o in args.option)).load())
    query = (messages.writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=args.trigger).start())
    try:
        while not query.awaitTermination(0.5):
            if interrupts.count:
                print(f"{PROG}: interrupted: stopping the query after its current batch",
                      file=sys.stderr, flush=True)
                stop(spark, query)
                print(f"{PROG}: query stopped; run again with the same checkpoint and "
                      "client id to go on", file=sys.stderr, flush=True)
                return EXIT_INTERRUPTED
    except StreamingQueryException as exc:
        print(f"{PROG}: the query failed: {failure(exc.getMessage())}", file=sys.stderr,
              flush=True)
        return 1
    finally:
        spark.stop()
    return 0  # stopped from elsewhere (the Spark UI, another thread)


if __name__ == "__main__":
    sys.exit(main())
