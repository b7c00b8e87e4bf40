"""A streaming query from the mqtt source into Parquet, run as a driver process of its
own by test_live.py (so that a test can kill it): it runs until the stop file exists,
then stops the query; a failed query prints its error and exits 1.

    python live_job.py OUT CHECKPOINT STOPFILE KEY=VALUE...   (the source's options)
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    out, checkpoint, stopfile, *pairs = sys.argv[1:]
    from mqttwire.spark.live import register, use_filesystem_checkpoints
    from mqttwire.spark.session import make_session

    spark = make_session("local[2]")
    register(spark)
    # As the example job does for a local checkpoint: the crash tests run with it.
    assert use_filesystem_checkpoints(spark)
    options = dict(pair.split("=", 1) for pair in pairs)
    query = (spark.readStream.format("mqtt").options(**options).load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime="250 milliseconds").start())
    print("started", flush=True)
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
