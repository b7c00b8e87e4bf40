"""Codec benchmarks: the Cython extension against the pure-Python fallback.

Run:  python -m pytest benchmarks/bench_codec.py --benchmark-only \
          --benchmark-group-by=group --benchmark-json=bench-codec.json
then: python benchmarks/report.py bench-codec.json

Each timed call does 100 operations (the stream: 10,000 packets), so the harness's own
per-call cost does not blur a sub-microsecond figure; report.py prints per-operation
medians.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from mqttwire import Properties, _pure

# The v5 PUBLISH captured from a real broker (tests/vectors/README.md, "Provenance").
SEED_V5_PUBLISH = bytes.fromhex(
    "30 31 00 07 72 65 71 75 65 73 74 10 02 00 00 01 2c 08 00 08"
    "72 65 73 70 6f 6e 73 65 54 68 69 73 20 69 73 20 61 20 51 6f"
    "53 20 30 20 6d 65 73 73 61 67 65"
)


def _packets(m: ModuleType) -> dict[str, tuple[Any, int]]:
    """name -> (packet, protocol level), built with the module under test."""
    return {
        "publish-qos0-small": (m.Publish("sensors/temp", b"22.5"), 4),
        "publish-qos1-1KiB": (
            m.Publish("fleet/truck/42/telemetry", b"x" * 1024, qos=1, packet_id=7),
            4,
        ),
        "publish-v5-seed": (
            m.Publish(
                "request",
                b"This is a QoS 0 message",
                properties=Properties(message_expiry_interval=300, response_topic="response"),
            ),
            5,
        ),
        "puback": (m.PubAck(0x644A), 4),
        "connect": (
            m.Connect(
                "client-0001",
                protocol_version=4,
                keep_alive=30,
                username="u",
                password=b"secret",
                will=m.Will("status/client-0001", b"offline", qos=1, retain=True),
            ),
            4,
        ),
    }


NAMES = list(_packets(_pure))


def test_seed_vector_is_the_one_we_encode() -> None:
    # The benchmark's v5 packet must be byte-for-byte the captured one.
    pkt, version = _packets(_pure)["publish-v5-seed"]
    assert pkt.encode(version) == SEED_V5_PUBLISH


OPS = 100  # operations per timed call: sub-microsecond work is timed in batches


def _setup(benchmark: Any, group: str, ops: int = OPS) -> None:
    benchmark.group = group
    benchmark.extra_info["ops"] = ops  # report.py divides the median by this


@pytest.mark.parametrize("name", NAMES)
def test_decode(benchmark: Any, codec: ModuleType, name: str) -> None:
    pkt, version = _packets(codec)[name]
    data = pkt.encode(version)
    decode: Callable[..., Any] = codec.decode
    _setup(benchmark, f"decode {name}")

    def run() -> Any:
        for _ in range(OPS):
            result = decode(data, version=version)
        return result

    assert benchmark(run) == pkt


@pytest.mark.parametrize("name", NAMES)
def test_encode(benchmark: Any, codec: ModuleType, name: str) -> None:
    pkt, version = _packets(codec)[name]
    encode = pkt.encode
    _setup(benchmark, f"encode {name}")

    def run() -> bytes:
        for _ in range(OPS):
            result = encode(version)
        return result

    assert codec.decode(benchmark(run), version=version) == pkt


def test_stream_10000_small_publish(benchmark: Any, codec: ModuleType) -> None:
    pkt, version = _packets(codec)["publish-qos0-small"]
    stream = pkt.encode(version) * 10_000
    _setup(benchmark, "stream of 10,000 small PUBLISH (one chunk), per packet", 10_000)

    def run() -> int:
        return len(codec.StreamDecoder(version).feed(stream))

    assert benchmark(run) == 10_000
