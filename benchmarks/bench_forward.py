"""Forwarding one PUBLISH (1 KiB payload, two properties) to N subscribers: PreparedPublish
against building and encoding a Publish per subscriber.

Run:  python -m pytest benchmarks/bench_forward.py --benchmark-only \
          --benchmark-group-by=group --benchmark-json=bench-forward.json
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from mqttwire import Properties

PROPS = Properties(message_expiry_interval=3600, content_type="application/json")


def _subscribers(n: int) -> list[tuple[int, int, int]]:
    """(protocol level, QoS, packet id) per subscriber: a realistic mix."""
    return [((5, 4, 5)[i % 3], i % 3, (i % 65535) + 1) for i in range(n)]


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_prepared(benchmark: Any, codec: ModuleType, n: int) -> None:
    pub = codec.Publish(
        "fleet/truck/42/telemetry", b"x" * 1024, qos=1, packet_id=1, properties=PROPS
    )
    subs = _subscribers(n)
    benchmark.group = f"forward to {n} subscriber(s)"
    benchmark.extra_info["method"] = "PreparedPublish"

    def run() -> int:
        prepared = codec.PreparedPublish(pub)
        return sum(
            len(prepared.encode(v, qos=q, packet_id=pid if q else None)) for v, q, pid in subs
        )

    assert benchmark(run) > 1024 * n


# A v5 PUBLISH as a broker receives it: properties with a Topic Alias (the publisher's
# connection only), a Message Expiry Interval, a content type and a user property.
DECODED = Properties(
    message_expiry_interval=3600,
    content_type="application/json",
    topic_alias=7,
    user_properties=[("trace", "7f3a")],
)


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_prepared_decoded(benchmark: Any, codec: ModuleType, n: int) -> None:
    """A broker's forwarding: decode the incoming v5 PUBLISH, prepare it once, and write
    each subscriber's copy with its own Subscription Identifier and the remaining Message
    Expiry Interval (v5 subscribers; levels 3.1.1 get neither), the Topic Alias left out."""
    wire = codec.Publish(
        "fleet/truck/42/telemetry", b"x" * 1024, qos=1, packet_id=1, properties=DECODED
    ).encode(5)
    subs = _subscribers(n)
    benchmark.group = f"forward a decoded v5 PUBLISH to {n} subscriber(s)"
    benchmark.extra_info["method"] = "decode, PreparedPublish, encode per subscriber"
    decode = codec.decode

    def run() -> int:
        prepared = codec.PreparedPublish(decode(wire, version=5))
        total = 0
        for v, q, pid in subs:
            if v == 5:
                out = prepared.encode(
                    5, qos=q, packet_id=pid if q else None,
                    subscription_identifiers=(pid,), message_expiry_interval=3599,
                )
            else:
                out = prepared.encode(v, qos=q, packet_id=pid if q else None)
            total += len(out)
        return total

    assert benchmark(run) > 1024 * n


@pytest.mark.parametrize("n", [1, 10, 1000])
def test_reencode(benchmark: Any, codec: ModuleType, n: int) -> None:
    pub = codec.Publish(
        "fleet/truck/42/telemetry", b"x" * 1024, qos=1, packet_id=1, properties=PROPS
    )
    subs = _subscribers(n)
    benchmark.group = f"forward to {n} subscriber(s)"
    benchmark.extra_info["method"] = "Publish(...).encode() per subscriber"

    def run() -> int:
        total = 0
        for v, q, pid in subs:
            out = codec.Publish(
                pub.topic,
                pub.payload,
                qos=q,
                packet_id=pid if q else None,
                properties=pub.properties if v == 5 else None,
            )
            total += len(out.encode(v))
        return total

    assert benchmark(run) > 1024 * n
