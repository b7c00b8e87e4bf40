"""Read four properties of a decoded Properties N times, present or absent ones: the
workload for counting what one attribute read of a Properties costs on each CPython
(peers.md, "CPython 3.12 and 3.13").

    cd benchmarks/costmodel
    valgrind --tool=callgrind python property_reads.py present 50000
    valgrind --tool=callgrind python property_reads.py present 0

(total with N - total with 0) / N is the cost of four reads and one loop step.  The
Properties is the one the extension builds when ``properties`` of the v5 PUBLISH with
properties of peers.OPS is read: message expiry, response topic, correlation data and
two user properties.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for peers.py

import peers

from mqttwire import _speedups


def present(pr: object, n: int) -> None:
    for _ in range(n):
        pr.message_expiry_interval; pr.response_topic; pr.correlation_data; pr.user_properties  # type: ignore[attr-defined]  # noqa: B018, E702


def absent(pr: object, n: int) -> None:
    for _ in range(n):
        pr.topic_alias; pr.content_type; pr.payload_format_indicator; pr.subscription_identifiers  # type: ignore[attr-defined]  # noqa: B018, E702


if __name__ == "__main__":
    op = {o.id: o for o in peers.OPS}["publish-v5-props v5"]
    props = _speedups.decode(op.wire(), version=5).properties
    {"present": present, "absent": absent}[sys.argv[1]](props, int(sys.argv[2]))
