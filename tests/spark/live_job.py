"""A streaming query from the mqtt source into Parquet, run as a driver process of its
own by test_live.py (so that a test can kill it): it runs until the stop file exists,
then stops the query; a failed query prints its error and exits 1.

    python live_job.py OUT CHECKPOINT STOPFILE KEY=VALUE...   (the source's options)

LIVE_JOB_TRIGGER sets the trigger interval (default "250 milliseconds").
With LIVE_JOB_KILL_BETWEEN_COMMITS=1 in its environment it kills itself (SIGKILL to its
process group: the JVM and Python workers too) between the file sink's commit of a batch
and the checkpoint's: when ``OUT/_spark_metadata/N`` exists and
``CHECKPOINT/commits/N`` does not (test_live_restart.py).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time


def has_messages(checkpoint: str, batch: int) -> bool:
    """Whether the batch's offsets (the checkpoint's offset log: a "v1" line, the
    metadata line, then the source's end offset) say it has messages."""
    def end(n: int) -> int:
        with open(os.path.join(checkpoint, "offsets", str(n))) as f:
            return int(json.loads(f.read().splitlines()[-1])["seq"])

    try:
        return batch > 0 and end(batch) > end(batch - 1)
    except (FileNotFoundError, IndexError, ValueError, KeyError):
        return False


def kill_between_commits(out: str, checkpoint: str) -> None:
    """Watch the sink's log and the checkpoint's commit log; SIGKILL this process group
    as soon as a batch with messages is in the first and not in the second.  The
    window is short (the rest of the batch's bookkeeping), so this polls every half
    millisecond; a batch whose commit came first is let go, and the next one is
    watched."""
    sink_log = os.path.join(out, "_spark_metadata")
    commits = os.path.join(checkpoint, "commits")
    while True:
        try:
            written = [int(name.split(".")[0]) for name in os.listdir(sink_log)
                       if name.split(".")[0].isdigit()]
        except FileNotFoundError:
            written = []
        if written:
            batch = max(written)
            if not os.path.exists(os.path.join(commits, str(batch))) \
                    and has_messages(checkpoint, batch):
                os.killpg(os.getpgrp(), signal.SIGKILL)
        time.sleep(0.0005)


def main() -> int:
    out, checkpoint, stopfile, *pairs = sys.argv[1:]
    from mqttwire.spark.live import register, use_filesystem_checkpoints
    from mqttwire.spark.startup import make_session

    spark = make_session("local[2]")
    register(spark)
    # As the example job does for a local checkpoint: the crash tests run with it.
    assert use_filesystem_checkpoints(spark)
    options = dict(pair.split("=", 1) for pair in pairs)
    query = (spark.readStream.format("mqtt").options(**options).load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=os.environ.get("LIVE_JOB_TRIGGER", "250 milliseconds"))
             .start())
    print("started", flush=True)
    if os.environ.get("LIVE_JOB_KILL_BETWEEN_COMMITS") == "1":
        threading.Thread(target=kill_between_commits, args=(out, checkpoint),
                         daemon=True).start()
    try:
        while not os.path.exists(stopfile):
            if query.awaitTermination(0.2):
                break
        query.stop()
        return 0
    except Exception as exc:  # the query's error: the test reads it
        print(f"query failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
        time.sleep(0)


if __name__ == "__main__":
    sys.exit(main())
