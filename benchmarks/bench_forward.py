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
