"""Live MQTT messages into Parquet with Spark Structured Streaming, at least once.

    python examples/live_to_parquet.py mqtt://127.0.0.1:1883 'sensors/#' out/ checkpoint/

(Spark starts its Python workers with ``python3`` from PATH, or PYSPARK_PYTHON: with a
virtualenv that is not activated, set PYSPARK_PYTHON to its python, which has mqttwire
and pyarrow; otherwise the query fails with "No module named 'pyarrow'".)

or on a cluster (every executor needs mqttwire and pyarrow: docs/cluster.md):

    spark-submit --master spark://host:7077 examples/live_to_parquet.py \
        mqtt://broker:1883 'sensors/#' hdfs:///mqtt/sensors hdfs:///mqtt/checkpoints/sensors

Stop it with Ctrl-C; run it again with the same checkpoint and client id to go on where
it stopped (the broker keeps the unacknowledged messages for the client id's session).
"""

from __future__ import annotations

import argparse

from pyspark.sql import SparkSession

from mqttwire.spark.live import register, use_filesystem_checkpoints


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="mqtt://[user:password@]host[:port]")
    parser.add_argument("topics", help="topic filters, comma-separated")
    parser.add_argument("out", help="where the Parquet files go")
    parser.add_argument("checkpoint", help="Spark's checkpoint directory for the query")
    parser.add_argument("--client-id", default="mqttwire-live-to-parquet")
    parser.add_argument("--qos", default="1", choices=("0", "1", "2"))
    parser.add_argument("--version", default="5", choices=("3", "4", "5"))
    parser.add_argument("--trigger", default="1 second", help="micro-batch interval")
    args = parser.parse_args()

    spark = SparkSession.builder.appName("mqtt-live-to-parquet").getOrCreate()
    register(spark)
    if "://" not in args.checkpoint or args.checkpoint.startswith("file:"):
        use_filesystem_checkpoints(spark)  # a local checkpoint: no process per log file
    messages = (spark.readStream.format("mqtt")
                .option("url", args.url).option("topics", args.topics)
                .option("clientId", args.client_id).option("qos", args.qos)
                .option("version", args.version).load())
    query = (messages.writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint)
             .trigger(processingTime=args.trigger).start())
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()


if __name__ == "__main__":
    main()
