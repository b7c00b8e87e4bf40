"""The streaming job of bench_live.py: Mosquitto into Parquet through one of two sources.

    python benchmarks/live_sources.py mqtt|paho URL TOPIC OUT CHECKPOINT STOPFILE \
        [OPTION=VALUE...]

``mqtt`` is mqttwire's source (mqttwire.spark.live), given the options after STOPFILE
too (bench_live.py's TLS run: caFile, certFile, keyFile).  ``paho`` is a source written the
way the public samples of Spark's Python data source API for MQTT are (here only, as the
benchmark's baseline): each micro-batch opens a paho-mqtt client, subscribes, collects
for a second, disconnects, and returns every column as a string, the payload decoded as
text.  It uses a persistent session (Clean Session 0) so that what arrives between two
batches is queued by the broker rather than lost, which is kinder than the samples; and
paho acknowledges each message on receipt, so a crash loses what a batch held.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

#: How long each micro-batch of the paho source listens, as the samples do.
PAHO_WINDOW_S = 1.0


class PahoSampleReader(SimpleDataSourceStreamReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def read(self, start: dict[str, int]) -> tuple[Iterator[tuple[Any, ...]], dict[str, int]]:
        import paho.mqtt.client as mqtt

        host, port = self.options["url"].removeprefix("mqtt://").split(":")
        received: list[Any] = []
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, "paho-sample",
                             clean_session=False, protocol=mqtt.MQTTv311)
        client.on_message = lambda c, u, m: received.append(m)
        client.connect(host, int(port))
        client.subscribe(self.options["topics"], qos=1)
        client.loop_start()
        time.sleep(PAHO_WINDOW_S)
        client.loop_stop()
        client.disconnect()
        rows = [(m.topic, m.payload.decode(), str(m.qos), str(time.time()))
                for m in received]
        return iter(rows), {"batch": start["batch"] + 1}

    def readBetweenOffsets(self, start: dict[str, int],
                           end: dict[str, int]) -> Iterator[tuple[Any, ...]]:
        return iter([])

    def commit(self, end: dict[str, int]) -> None:
        pass


class PahoSampleSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "paho_sample"

    def schema(self) -> str:
        return "topic STRING, payload STRING, qos STRING, received_at STRING"

    def simpleStreamReader(self, schema: Any) -> PahoSampleReader:
        return PahoSampleReader(dict(self.options))


def main() -> int:
    source, url, topic, out, checkpoint, stopfile, *pairs = sys.argv[1:]
    from mqttwire.spark.live import register, use_filesystem_checkpoints
    from mqttwire.spark.startup import make_session

    # Spark's own Arrow batch size (10,000 rows), not the pipeline's one row a batch that
    # make_session sets for mapInArrow's inputs: a simple stream reader's rows (the paho
    # sample's) go to the JVM in Arrow batches of that many rows (pyspark's
    # python_streaming_source_runner), and one-row batches cost it tens of microseconds
    # a row.  mqttwire's source hands Spark whole Arrow batches, which no setting splits.
    spark = make_session("local[2]", conf={"spark.sql.execution.arrow.maxRecordsPerBatch":
                                           "10000"})
    # Both sources: the checkpoint and sink logs written without a readlink process per
    # file (mqttwire.spark.live.use_filesystem_checkpoints; the checkpoint is local).
    assert use_filesystem_checkpoints(spark)
    if source == "mqtt":
        register(spark)
        reader = (spark.readStream.format("mqtt").option("clientId", "bench-live")
                  .option("qos", "1").options(**dict(p.split("=", 1) for p in pairs)))
    else:
        spark.dataSource.register(PahoSampleSource)
        reader = spark.readStream.format("paho_sample")
    query = (reader.option("url", url).option("topics", topic).load()
             .writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", checkpoint)
             .trigger(processingTime=os.environ.get("MQTTWIRE_BENCH_LIVE_TRIGGER",
                                                   "250 milliseconds")).start())
    print("started", flush=True)
    try:
        while not os.path.exists(stopfile):
            if query.awaitTermination(0.2):
                break
        query.stop()
        return 0
    except Exception as exc:
        print(f"query failed: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
