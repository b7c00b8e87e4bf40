"""A streaming query over the mqtt source started, or restarted on its checkpoint, with
more than 65,535 messages waiting in its session (Mosquitto, ``max_inflight_messages
0``): it drains them all, batch by batch, at MQTT 5.0 and 3.1.1, QoS 1, 2 and mixed,
with ``maxMessagesPerBatch`` unset and set, with ``strictBroker`` false.  Mosquitto 2.0.11
then has more messages in flight than there are packet identifiers (test_live_backlog.py
shows it from a capture, and that the strict session refuses it).  Whether the broker
gets there under a query depends on how soon the query's first acknowledgements reach
it, so the query's failure on such a PUBLISH under the default (``strictBroker`` true)
is shown with a scripted broker that always sends it: test_live.py's
``test_a_reused_packet_identifier_fails_the_query_by_default``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_brokers import Mosquitto, live_spark
from test_live import rows
from test_live_backlog import BACKLOG, publish_backlog, subscriber

import mqttwire

pytestmark = [pytest.mark.interop, pytest.mark.spark, pytest.mark.slow,
              # The subscriber under the query meets the same backlog in
              # test_live_backlog.py (once too: the subject is the broker's and the
              # session's, not the codec's).
              pytest.mark.once]

#: Bound on a query's draining of the backlog, in seconds.
DRAIN_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    b = Mosquitto(tmp_path_factory.mktemp("backlog-broker"), log_all=False)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with live_spark() as session:
        yield session


def start(spark: Any, options: dict[str, str], out: Path, checkpoint: Path) -> Any:
    return (spark.readStream.format("mqtt").options(**options).load()
            .writeStream.format("parquet").option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="500 milliseconds").start())


def batches_with_rows(checkpoint: Path) -> int:
    """How many of the query's batches had messages (their end offset above the one
    before: the checkpoint's offset log, whose last line is the source's offset)."""
    import json

    ends = sorted((int(p.name), int(json.loads(p.read_text().splitlines()[-1])["seq"]))
                  for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    return sum(1 for (_, a), (_, b) in zip(ends, ends[1:]) if b > a) + (
        1 if ends and ends[0][1] > 0 else 0)


# Each dimension's every value at least once, and each version with both batch settings.
CASES = [
    # version, the publishers' QoS (the subscription's is 2), maxMessagesPerBatch, how
    pytest.param(5, (1, 2), None, "restarted", id="v5-mixed-unset-restarted"),
    pytest.param(4, (1, 2), 20000, "started", id="v311-mixed-20000-started"),
    pytest.param(5, (2, 2), 20000, "restarted", id="v5-qos2-20000-restarted"),
    pytest.param(4, (1, 1), None, "started", id="v311-qos1-unset-started"),
]


@pytest.mark.parametrize(("version", "qos", "limit", "how"), CASES)
def test_a_query_drains_a_backlog_beyond_the_identifier_space(
        spark: Any, broker: Mosquitto, tmp_path: Path, version: int, qos: tuple[int, int],
        limit: int | None, how: str) -> None:
    assert broker.port is not None
    client_id = f"backlog-{version}-{qos[0]}{qos[1]}-{limit}-{how}"
    topic = f"backlog/{client_id}"
    options = {"url": broker.url, "topics": f"{topic}/#", "clientId": client_id,
               "qos": "2", "version": str(version), "strictBroker": "false"}
    if limit is not None:
        options["maxMessagesPerBatch"] = str(limit)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    if how == "started":
        # The session is there, made by another client of the client id (as by an
        # earlier run of the job): the query starts on a backlog.
        made = subscriber(broker.port, mqttwire, client_id, version, tolerate=False,
                          topic=f"{topic}/#")
        made.start()
        made.close()
    else:
        # The query's own session, then the query stopped (its DISCONNECT keeps the
        # session): restarted on its checkpoint, it finds the backlog.
        query = start(spark, options, out, checkpoint)
        deadline = time.monotonic() + 60
        while query.lastProgress is None:
            assert time.monotonic() < deadline and query.exception() is None
            time.sleep(0.1)
        query.stop()
    payloads = publish_backlog(broker.port, BACKLOG, qos=qos, topic=topic)
    query = start(spark, options, out, checkpoint)
    try:
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while len(got := rows(out)) < BACKLOG:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"{len(got)} rows of {BACKLOG}"
            time.sleep(0.5)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
    written = [r["payload"] for r in rows(out)]
    assert len(written) == BACKLOG and set(written) == payloads
    assert {r["qos"] for r in rows(out)} == set(qos)
    batches = batches_with_rows(checkpoint)
    if limit is not None:
        assert batches >= BACKLOG // limit, batches
    print(f"\n{client_id}: {BACKLOG} messages in {batches} batches")

