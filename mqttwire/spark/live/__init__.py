"""Live MQTT messages into Spark Structured Streaming: the ``mqtt`` source.

::

    from mqttwire.spark.live import register
    register(spark)
    messages = (spark.readStream.format("mqtt")
                .option("url", "mqtt://127.0.0.1:1883").option("topics", "sensors/#")
                .option("clientId", "spark-sensors").load())

The modules: :mod:`.source`, the data source and its stream reader (offsets, batches,
acknowledgements on commit); :mod:`.subscriber`, the MQTT connection under it (a thread
around :class:`mqttwire.session.ClientSession`, reconnecting); :mod:`.transport`, how that
connection reaches the broker (TCP, TLS, WebSocket).  docs/live.md is the user's guide.
Importing this package imports pyspark.
"""

from __future__ import annotations

from .source import (
    SCHEMA,
    LiveOptions,
    MqttDataSource,
    MqttStreamReader,
    register,
    use_filesystem_checkpoints,
)

__all__ = ["SCHEMA", "LiveOptions", "MqttDataSource", "MqttStreamReader", "register",
           "use_filesystem_checkpoints"]
