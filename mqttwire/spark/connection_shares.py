"""One capture file over several tasks without a shuffle: each task reads the whole file
and keeps the connections of its share.

Most of a decoding task's time goes into what comes after the reading (the derived
tables' rows, the Arrow columns, the Parquet files: benchmarks/history/capture.md), and that
work is per connection.  So when the tasks write the tables themselves
(:mod:`.parquet`), a file of at least ``share_size`` bytes (the pipeline's option,
32 MiB by default) is read by ``count`` tasks
at once (at most one per core Spark offers), and task ``index`` keeps the records of
the connections numbered n with ``(n - 1) % count == index`` (and, in task 0, the
records of no connection: IP fragments and a capture error).  Every task reads the whole
file and follows every TCP connection, exactly as one task would, so each connection's
records, numbers and ids are the ones of a whole-file read, and the tables are the same
(tests/spark/test_pipeline.py compares them); the connections of the other shares are
ignored as they open (``MqttStreams``' ``keep``), so none of their bytes is decoded,
and only task 0 makes the records of no connection (``unconnected``).

The one table that spans connections is ``retained`` (the latest retained PUBLISH per
topic, over all connections): each task returns its latest per topic, with its
:data:`~.derive.RetainOrder`, as ``retain_events`` rows (:data:`RETAIN_EVENTS`), and
the driver keeps the latest of those per capture and topic (:func:`merge_retained`).

Unlike the split path (:mod:`.split`), nothing crosses Spark's shuffle; but reading the
file and finding each segment's connection are repeated in every task
(benchmarks/history/capture.md).  A capture of one busy connection does not spread.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs

from .derive import CaptureTables, RetainOrder, Row
from .schema import RETAINED

__all__ = ["RETAIN_EVENTS", "Share", "ShareTables", "merge_retained"]

#: A task's retained candidates: the retained table's columns and the RetainOrder.
RETAIN_EVENTS = pa.schema(list(RETAINED) + [
    ("order_frame", pa.int64()), ("order_connection", pa.int64()), ("order_seen", pa.int64())])


@dataclass(frozen=True)
class Share:
    """Task ``index`` (from 0) of the ``count`` that read one file."""

    index: int
    count: int

    def keeps(self, number: int) -> bool:
        """Whether connection ``number`` (n of its id "<capture>#<n>") is this share's."""
        return (number - 1) % self.count == self.index


class ShareTables(CaptureTables):
    """CaptureTables for one share of a capture's connections: instead of the retained
    rows, :meth:`retain_events` gives the share's latest retained PUBLISH per topic
    with its order, removals (an empty payload) included."""

    def _retained_event(self, order: RetainOrder, topic: str, row: Row) -> None:
        held = self._retained.get(topic)
        if held is None or held[0] < order:
            self._retained[topic] = (order, row)  # kept even when it removes the topic

    def finish(self) -> list[Row]:
        super().finish()
        return []  # the retained rows are chosen over every share: retain_events

    def retain_events(self) -> list[Row]:
        return [{**row, "order_frame": order[0], "order_connection": order[1],  # type: ignore[dict-item]
                 "order_seen": order[2]}
                for _, (order, row) in sorted(self._retained.items())]


def merge_retained(events: pa.Table) -> pa.Table:
    """The retained table from every share's ``retain_events`` rows: per capture and
    topic, the latest by RetainOrder, unless it removed the topic's message."""
    keys = events.select(["capture", "topic", "order_frame", "order_connection",
                          "order_seen", "payload_length"]).to_pylist()
    latest: dict[tuple[str, str], tuple[RetainOrder, int]] = {}
    for i, event in enumerate(keys):
        key = (event["capture"], event["topic"])
        order = (event["order_frame"], event["order_connection"], event["order_seen"])
        held = latest.get(key)
        if held is None or held[0] < order:
            latest[key] = (order, i)
    rows = [i for _, (_, i) in sorted(latest.items()) if keys[i]["payload_length"]]
    return events.take(pa.array(rows, pa.int64())).select(RETAINED.names)
