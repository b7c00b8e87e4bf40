"""Live MQTT messages into Spark: a Structured Streaming source (``format("mqtt")``).

::

    from mqttwire.spark.live import register
    register(spark)
    messages = (spark.readStream.format("mqtt")
                .option("url", "mqtt://127.0.0.1:1883").option("topics", "sensors/#")
                .option("clientId", "spark-sensors").load())

How it works: the driver side of the source (Spark runs it in a Python process of its
own for the query's lifetime) holds one MQTT connection (TCP, TLS or WebSocket:
:mod:`.transport`), a :class:`.subscriber.Subscriber` over the session layer
(:mod:`mqttwire.session`), which keeps every message received,
in order.  Each micro-batch takes the messages received since the last one; its offsets
are message counts (``{"seq": n}``).  The batch's rows travel to one task in its input
partition, already an Arrow batch in :data:`SCHEMA`, which the task returns.

At-least-once: QoS 1 and 2 messages are acknowledged to the broker (PUBACK, PUBREC) only
once the micro-batch that holds them has committed, over a persistent session (Clean
Start 0, a Session Expiry Interval): until then the broker keeps them and sends them
again when the client id connects again.  After a crash, the query restarted from its
checkpoint first re-runs the batch that was planned and not committed: its offsets come
from the checkpoint, and it has no rows: the messages the broker sends again go to the
next batches (below, "Re-runs").  docs/live.md, "What is
guaranteed", says what is and is not guaranteed.

Re-runs: after a crash, the query restarted from its checkpoint first runs again the
batch that was planned and not committed (its offsets are in the checkpoint's offset
log, its commit is not in the commit log).  The sink may have committed that batch's
output before the crash: the file sink writes its own log entry (``_spark_metadata/N``)
before the checkpoint writes ``commits/N``, and skips a batch it has already written.
This process never saw the batch's messages: the broker sends again whatever was not
acknowledged, which is that batch's messages and any received after it was planned.
Were those the re-run's rows, a skipped re-run would acknowledge messages never
written: lost.  So the re-run has no rows, and the messages sent again go to the next
batch, written and then acknowledged; the cost is that a batch the sink had committed
is written again (duplicates, which at-least-once allows).
tests/spark/test_live_restart.py kills the driver in that window and checks.

When: Spark calls a source's ``commit`` for a batch only when it plans the next batch
that has data, so the last batch before a pause would stay unacknowledged until traffic
resumes: the broker's in-flight window would hold it and the new messages at once
(Mosquitto 2.0.11 then reuses packet identifiers past 65,535: benchmarks/history/live.md),
and a query stopped in the pause would get it again when restarted.  Spark asks for the
next end offset (``latestOffset(start)``) only after the batch ending at ``start`` has
run and committed (micro-batches run one at a time; a failed batch stops the query), so
the source acknowledges there, at the next trigger, whether or not new messages came.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs
    from pyspark.sql import SparkSession

    from .subscriber import Received, Subscriber
    from .transport import Endpoint, TlsOptions

__all__ = ["SCHEMA", "LiveOptions", "MqttDataSource", "MqttStreamReader", "register",
           "use_filesystem_checkpoints"]

#: The columns, as Spark DDL.  Times have microseconds (Spark's precision).
#:
#: ``topic``, ``payload`` (never decoded as text), ``qos``, ``retain``; ``dup``: the
#: PUBLISH's DUP flag, which says only that the broker may have sent this message before
#: [MQTT-3.3.1-1], not that this row is a duplicate: after a broker restart, or a
#: reconnection, or a query restarted from its checkpoint, the broker sends again every
#: message not yet acknowledged with DUP set, and most of those are first deliveries to
#: the table (in a check of 20,000 messages with the driver killed and restarted
#: mid-stream, 15,971 rows had ``dup`` true and none was a duplicate).  Dropping ``dup``
#: rows loses data; to drop duplicates,
#: compare something in the message (a message id in the payload or
#: ``correlation_data``).  ``received_at`` (when the source received it),
#: ``subscription`` (the first of the ``topics`` filters that the topic matches),
#: ``protocol_version``, and the 5.0 properties, typed (null at 3.x).
SCHEMA = (
    "topic STRING, payload BINARY, qos INT, retain BOOLEAN, dup BOOLEAN, "
    "received_at TIMESTAMP, subscription STRING, protocol_version INT, "
    "content_type STRING, correlation_data BINARY, response_topic STRING, "
    "message_expiry_interval BIGINT, payload_format_indicator INT, "
    "user_properties ARRAY<STRUCT<key: STRING, value: STRING>>"
)

_VERSIONS = {"3": 3, "3.1": 3, "4": 4, "3.1.1": 4, "5": 5, "5.0": 5}


@dataclass(frozen=True)
class LiveOptions:
    """The source's options, checked (see :meth:`parse` for their names)."""

    host: str
    port: int
    topics: tuple[str, ...]
    qos: int
    version: int
    client_id: str
    clean_start: bool
    session_expiry: int
    keep_alive: int
    receive_maximum: int | None
    username: str | None
    password: bytes | None = field(repr=False)  # kept out of logs and tracebacks
    max_messages_per_batch: int | None
    connect_timeout: float
    #: How to reach the broker: TLS, WebSocket (the url's scheme, the TLS options).
    endpoint: Endpoint
    reconnect_delay: float = 1.0
    reconnect_max_delay: float = 30.0
    reconnect_timeout: float = 300.0
    fail_on_session_loss: bool = False
    #: A broker's in-flight overrun fails the query (else taken, logged): ``strictBroker``.
    strict_broker: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> LiveOptions:
        """From the reader's options (names case-insensitive, values strings): ``url``
        (``mqtt://[user[:password]@]host[:port]``, port 1883 by default; TLS:
        ``mqtts://`` or ``ssl://``, port 8883 by default; MQTT over WebSocket:
        ``ws://host[:port][/path]``, port 80 by default, and over TLS ``wss://``, port
        443 by default; the subprotocol is ``mqtt``), ``topics``
        (comma-separated topic filters; ``$share/group/filter`` allowed), ``qos`` (0, 1
        or 2; default 1), ``version`` (3, 4 or 5, also 3.1, 3.1.1, 5.0; default 5),
        ``clientId`` (required: the persistent session is the client id's),
        ``cleanStart`` (default false), ``sessionExpiry`` (seconds, 5.0; default 3600),
        ``keepAlive`` (seconds; default 60), ``receiveMaximum`` (5.0; default the
        protocol's 65,535), ``username``, ``password``, ``maxMessagesPerBatch``
        (default: all received), ``connectTimeout`` (seconds; default 10);
        reconnection after a lost connection (:class:`.subscriber.Reconnect`):
        ``reconnectDelay`` (seconds before the first attempt; default 1),
        ``reconnectMaxDelay`` (the longest wait between attempts; default 30),
        ``reconnectTimeout`` (seconds the broker may stay away before the query fails;
        default 300; 0: fail at once), ``failOnSessionLoss`` (true: a reconnection that
        finds no session on the broker fails the query; default false, logged),
        ``strictBroker`` (default true: a broker that sends more unacknowledged QoS 1/2
        messages than the Receive Maximum, or a new one with a packet identifier still
        in use, fails the query with its protocol error, and keeps the messages; false:
        they are taken as new messages and logged, ``ClientSession.tolerate_overrun``,
        which lets a query go on against a broker with more than 65,535 messages in
        flight for the client, but cannot make that broker's matching of
        acknowledgements to messages right: docs/live.md, "What is guaranteed").

        TLS (mqtts://, ssl://, wss://; an error with another scheme): ``caFile`` (the
        CA certificates, PEM, that the broker's certificate must chain to; default the
        system's CA store), ``certFile`` and ``keyFile`` (a client certificate and its
        key, PEM, for brokers that require one; the key may be in ``certFile``),
        ``keyPassword`` (an encrypted key's), ``tlsInsecure`` (true or false, default
        false: true checks neither the certificate nor the host name, and warns with
        :class:`.transport.InsecureTLSWarning` through Python's ``warnings``; for tests
        only).  The host name of the url is checked against the broker's certificate
        and sent as SNI.  The files are read here: a missing or unreadable one, a key
        that is not the certificate's, a wrong ``keyPassword`` is a ValueError before
        any connection."""
        opts = {k.lower(): v for k, v in options.items()}

        def seconds(name: str, default: float, low: float) -> float:
            text = opts.get(name.lower())
            if text is None:
                return default
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"mqtt source: option {name} must be a number of seconds, "
                                 f"not {text!r}") from None
            if not low <= value <= 86400:  # also refuses nan and inf
                raise ValueError(f"mqtt source: option {name} must be {low:g} to 86400 "
                                 f"seconds, not {text}")
            return value

        def flag(name: str, default: bool = False) -> bool:
            text = opts.get(name.lower(), str(default).lower()).lower()
            if text not in ("true", "false"):
                raise ValueError(f"mqtt source: option {name} must be true or false, "
                                 f"not {text!r}")
            return text == "true"

        def number(name: str, default: int, low: int, high: int) -> int:
            text = opts.get(name.lower())
            if text is None:
                return default
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"mqtt source: option {name} must be a whole number, "
                                 f"not {text!r}") from None
            if not low <= value <= high:
                raise ValueError(f"mqtt source: option {name} must be {low} to {high}, "
                                 f"not {value}")
            return value

        url = opts.get("url")
        if not url:
            raise ValueError("mqtt source: option url is required, e.g. mqtt://host:1883")
        parts = urlsplit(url)
        from .transport import SCHEMES, Endpoint

        scheme = SCHEMES.get(parts.scheme.lower())
        if scheme is None or not parts.hostname:
            raise ValueError(f"mqtt source: url must be mqtt://, mqtts://, ssl://, ws:// "
                             f"or wss://host[:port] (a path for ws, wss), not {url!r}")
        tls, websocket, default_port = scheme
        try:
            port = parts.port or default_port
        except ValueError:
            raise ValueError(f"mqtt source: bad port in url {url!r}") from None
        if not websocket and parts.path not in ("", "/"):
            raise ValueError(f"mqtt source: a path in the url is for ws:// and wss:// only, "
                             f"not {url!r}")
        endpoint = Endpoint(parts.hostname, port, _tls_options(opts, parts.scheme, tls),
                            ((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
                            if websocket else None)
        if websocket:
            from importlib.util import find_spec

            if find_spec("websockets") is None:
                raise ValueError(f"mqtt source: {parts.scheme}:// needs the websockets "
                                 "package (pip install 'mqttwire[spark]')")
        topics = tuple(t.strip() for t in opts.get("topics", "").split(",") if t.strip())
        if not topics:
            raise ValueError("mqtt source: option topics is required: one or more topic "
                             "filters, comma-separated")
        version = _VERSIONS.get(opts.get("version", "5"))
        if version is None:
            raise ValueError(f"mqtt source: option version must be 3, 4 or 5 (3.1, 3.1.1, "
                             f"5.0), not {opts['version']!r}")
        from ... import validate_topic_filter

        for topic in topics:
            validate_topic_filter(topic, version=version)  # raises the codec's error
        client_id = opts.get("clientid", "")
        if not client_id:
            raise ValueError("mqtt source: option clientId is required: the broker keeps "
                             "the unacknowledged messages in that client id's session")
        delay = seconds("reconnectDelay", 1.0, 0.001)
        max_delay = seconds("reconnectMaxDelay", max(30.0, delay), 0.001)
        if max_delay < delay:
            raise ValueError(f"mqtt source: option reconnectMaxDelay ({max_delay:g}) must "
                             f"not be less than reconnectDelay ({delay:g})")
        username = opts.get("username") or (unquote(parts.username) if parts.username
                                            else None)
        password = opts.get("password") or (unquote(parts.password) if parts.password
                                            else None)
        limit = opts.get("maxmessagesperbatch")
        return cls(
            host=parts.hostname, port=port, topics=topics,
            qos=number("qos", 1, 0, 2), version=version, client_id=client_id,
            clean_start=flag("cleanStart"),
            session_expiry=number("sessionExpiry", 3600, 0, 0xFFFFFFFF) if version == 5 else 0,
            keep_alive=number("keepAlive", 60, 0, 65535),
            receive_maximum=(number("receiveMaximum", 65535, 1, 65535)
                             if version == 5 else None),
            username=username, password=password.encode() if password else None,
            max_messages_per_batch=(None if limit is None
                                    else number("maxMessagesPerBatch", 0, 1, 1 << 31)),
            connect_timeout=float(number("connectTimeout", 10, 1, 3600)),
            endpoint=endpoint,
            reconnect_delay=delay, reconnect_max_delay=max_delay,
            reconnect_timeout=seconds("reconnectTimeout", 300.0, 0.0),
            fail_on_session_loss=flag("failOnSessionLoss"),
            strict_broker=flag("strictBroker", default=True),
        )

    def subscriber(self) -> Subscriber:
        """A subscriber for these options (not started)."""
        from ...session import ClientSession
        from .subscriber import Reconnect, Subscriber

        session = ClientSession(
            self.client_id, version=self.version, clean_start=self.clean_start,
            keep_alive=self.keep_alive, session_expiry_interval=self.session_expiry,
            receive_maximum=self.receive_maximum, username=self.username,
            password=self.password, auto_ack=False, connect_timeout=self.connect_timeout,
            tolerate_overrun=not self.strict_broker)
        return Subscriber(self.host, self.port, [(t, self.qos) for t in self.topics],
                          session, connect_timeout=self.connect_timeout,
                          endpoint=self.endpoint,
                          reconnect=Reconnect(self.reconnect_delay, self.reconnect_max_delay,
                                              self.reconnect_timeout),
                          fail_on_session_loss=self.fail_on_session_loss)


#: The TLS options, lowercased (as ``parse`` holds them) and as documented.
_TLS_OPTIONS = {"cafile": "caFile", "certfile": "certFile", "keyfile": "keyFile",
                "keypassword": "keyPassword", "tlsinsecure": "tlsInsecure"}


def _tls_options(opts: Mapping[str, str], scheme: str, tls: bool) -> TlsOptions | None:
    """The TLS options (names lowercased in ``opts``), checked; None without TLS."""
    from .transport import TlsOptions

    if not tls:
        given = [name for lower, name in _TLS_OPTIONS.items() if lower in opts]
        if given:
            raise ValueError(f"mqtt source: option {given[0]} is for TLS: use "
                             f"mqtts://, ssl:// or wss://, not {scheme}://")
        return None
    insecure = opts.get("tlsinsecure", "false").lower()
    if insecure not in ("true", "false"):
        raise ValueError(f"mqtt source: option tlsInsecure must be true or false, "
                         f"not {insecure!r}")
    options = TlsOptions(ca_file=opts.get("cafile") or None,
                         cert_file=opts.get("certfile") or None,
                         key_file=opts.get("keyfile") or None,
                         key_password=opts.get("keypassword"),
                         insecure=insecure == "true")
    options.check()
    return options


def _arrow_batch(taken: list[Received], version: int) -> pa.RecordBatch:
    """The messages as one Arrow batch in SCHEMA's Arrow types, built column by column."""
    import pyarrow as pa

    schema = _arrow_schema()
    n = len(taken)
    messages = [r.message for r in taken]
    columns: list[Any] = [
        [m.topic for m in messages], [m.payload for m in messages],
        [m.qos for m in messages], [bool(m.retain) for m in messages],
        [bool(m.dup) for m in messages], [r.received_ns // 1000 for r in taken],
        [r.subscription for r in taken],
        pa.repeat(pa.scalar(version, pa.int32()), n),
    ]
    props = [m.properties for m in messages]
    if any(p is not None for p in props):
        def prop(name: str) -> list[Any]:
            return [None if p is None else getattr(p, name) for p in props]

        columns += [prop("content_type"), prop("correlation_data"), prop("response_topic"),
                    prop("message_expiry_interval"), prop("payload_format_indicator"),
                    [[{"key": k, "value": v} for k, v in p.user_properties]
                     if p is not None and p.user_properties else None for p in props]]
    else:  # 3.x, or 5.0 without properties: no per-message work for these columns
        columns += [pa.nulls(n, schema.field(i).type) for i in range(len(columns), len(schema))]
    return pa.RecordBatch.from_arrays(
        [c if isinstance(c, pa.Array) else pa.array(c, type=field.type)
         for c, field in zip(columns, schema)], schema=schema)


def _ipc(batch: pa.RecordBatch) -> bytes:
    """``batch`` in Arrow's IPC stream format."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _arrow_schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema([
        ("topic", pa.string()), ("payload", pa.binary()), ("qos", pa.int32()),
        ("retain", pa.bool_()), ("dup", pa.bool_()),
        ("received_at", pa.timestamp("us", tz="UTC")), ("subscription", pa.string()),
        ("protocol_version", pa.int32()), ("content_type", pa.string()),
        ("correlation_data", pa.binary()), ("response_topic", pa.string()),
        ("message_expiry_interval", pa.int64()), ("payload_format_indicator", pa.int32()),
        ("user_properties", pa.list_(pa.struct([("key", pa.string()),
                                                ("value", pa.string())]))),
    ])


class MqttPartition(InputPartition):
    """One micro-batch's messages, as an Arrow batch in IPC stream format (built where the
    messages are, in the source's process: one bytes object to pickle and ship to the
    task, not a tuple per message)."""

    def __init__(self, count: int, data: bytes) -> None:
        super().__init__(count)
        self.count = count
        self.data = data

    def batch(self) -> pa.RecordBatch:
        """The messages' Arrow batch."""
        import pyarrow as pa

        with pa.ipc.open_stream(self.data) as stream:
            return stream.read_next_batch()


class MqttStreamReader(DataSourceStreamReader):
    """The driver side (offsets, partitions, commit) and the task side (read)."""

    def __init__(self, options: LiveOptions) -> None:
        self.options = options
        self._subscriber: Subscriber | None = None
        # end offset -> (start offset, the batch's messages), until committed
        self._batches: dict[int, tuple[int, list[Received]]] = {}
        self._last = 0  # the highest end offset handed out

    def _connected(self) -> Subscriber:
        if self._subscriber is None:
            # This process (Spark's runner of the source, one per query) holds every
            # message received until its batch commits: tens of thousands of objects
            # without cycles, which CPython's collector would otherwise scan again and
            # again (as in the capture decoding: .decoding.GC_THRESHOLD;
            # benchmarks/history/live.md).
            import gc

            from ..decoding import GC_THRESHOLD

            first, *rest = gc.get_threshold()
            gc.set_threshold(max(first, GC_THRESHOLD), *rest)
            self._subscriber = self.options.subscriber()
            self._subscriber.start()
        self._subscriber.raise_error()
        return self._subscriber

    def initialOffset(self) -> dict[str, int]:
        return {"seq": 0}

    def latestOffset(self, start: dict[str, int] | None = None,
                     limit: Any = None) -> dict[str, int]:
        subscriber = self._connected()
        if start:
            # The batch ending at `start` has committed: acknowledge it now rather than
            # when Spark calls commit() (at the next batch with data; module docstring).
            self.commit(start)
        base = max(self._last, start["seq"] if start else 0)
        taken = subscriber.take(self.options.max_messages_per_batch)
        if not taken:
            return {"seq": base}
        end = base + len(taken)
        self._batches[end] = (base, taken)
        self._last = end
        return {"seq": end}

    def partitions(self, start: dict[str, int],
                   end: dict[str, int]) -> list[MqttPartition]:
        batch = self._batches.get(end["seq"])
        if batch is None or batch[0] != start["seq"]:
            # Planned before a restart, not committed: Spark runs it again, and it has
            # no rows.  Its messages (unacknowledged, so kept in the session) are those
            # the broker sends again, and they go to the next batch: this one may be one
            # whose output the sink had committed before the crash (the file sink then
            # skips it), and its rows would be acknowledged without being written
            # (module docstring, "Re-runs").
            self._connected()
            taken: list[Received] = []
            self._batches[end["seq"]] = (start["seq"], taken)
            self._last = max(self._last, end["seq"])
        else:
            taken = batch[1]
        if not taken:
            return [MqttPartition(0, b"")]
        return [MqttPartition(len(taken), _ipc(_arrow_batch(taken, self.options.version)))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, MqttPartition) and partition.count:
            yield partition.batch()

    def commit(self, end: dict[str, int]) -> None:
        done = [key for key in self._batches if key <= end["seq"]]
        last = max((r.seq for key in done for r in self._batches[key][1]), default=None)
        for key in done:
            del self._batches[key]
        if last is not None and self._subscriber is not None:
            self._subscriber.ack_through(last)

    def stop(self) -> None:
        if self._subscriber is not None:
            self._subscriber.close()


class MqttDataSource(DataSource):
    """``spark.readStream.format("mqtt")``: see :mod:`mqttwire.spark.live`."""

    @classmethod
    def name(cls) -> str:
        return "mqtt"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> MqttStreamReader:
        return MqttStreamReader(LiveOptions.parse(self.options))


def register(spark: SparkSession) -> None:
    """Register the source with ``spark`` (classic or Spark Connect) as
    ``format("mqtt")``, first checking that Spark's Python workers can import mqttwire
    and pyarrow (one small DataFrame job, once per Spark application): if not,
    :class:`mqttwire.spark.startup.WorkerPythonError` says what to set.  Start a local
    session with :func:`mqttwire.spark.startup.make_session`, or with PYSPARK_PYTHON set
    to the interpreter that has mqttwire, before it starts."""
    from ..startup import check_python_workers

    check_python_workers(spark)
    spark.dataSource.register(MqttDataSource)


#: Spark's checkpoint manager over Hadoop's FileSystem API (the package moved in Spark 4).
_FILESYSTEM_MANAGERS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager",
)


def use_filesystem_checkpoints(spark: SparkSession) -> bool:
    """Have ``spark``'s streaming queries write their checkpoint and sink logs through
    Hadoop's FileSystem API, Spark's own alternative to its default FileContext one (the
    setting ``spark.sql.streaming.checkpointFileManagerClass``).  For checkpoints on the
    local file system: without Hadoop's native library (pip's pyspark has none),
    FileContext's rename starts a ``readlink`` process for every log file a micro-batch
    writes (about twelve), which the FileSystem API does not: the source then sustains
    more messages a second, at a lower latency (benchmarks/history/live.md).  A rename on
    a local (or HDFS) file system is atomic
    either way; do not use it where ``FileSystem.rename`` is not atomic (object stores),
    which is why Spark's default is FileContext.

    Call it before starting the query.  True if set; False if this Spark has no such
    class (the default stays).  On a Spark Connect session, whose client cannot look
    into the server's JVM, the class is chosen by the server's Spark version (the name
    of Spark 4, where it moved, from 4.0 on) and set; the setting is the session's, and
    a server without the class fails the query at its start, naming it."""
    from ..startup import is_connect

    if is_connect(spark):
        major = int(str(spark.version).split(".", 1)[0])
        name = _FILESYSTEM_MANAGERS[0 if major >= 4 else 1]
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", name)
        return True
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # no stubs

    jvm = spark.sparkContext._jvm  # py4j's view of the driver's JVM
    assert jvm is not None, "a classic session has a JVM"
    for name in _FILESYSTEM_MANAGERS:
        try:
            jvm.java.lang.Class.forName(name)
        except Py4JJavaError:  # ClassNotFoundException: another Spark version
            continue
        spark.conf.set("spark.sql.streaming.checkpointFileManagerClass", name)
        return True
    return False
